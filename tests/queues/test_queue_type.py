"""Every queue type implements `queues.base.QueueType` completely and with the same signatures.

The server and mgmt call queues only through that protocol (no getattr probing), so a type that
lacks a member, or spells a parameter differently, breaks a caller at run time. A new type (a
remote-queue proxy) is checked by adding a builder to `BUILDERS`. The behaviour tests below pin
the parts of the contract that are easy to get subtly wrong: confirms are settled through the
sink exactly once, basic.get replies exactly once, `is_full` follows each type's limit rule.
"""

from __future__ import annotations

import inspect

import pytest

from amqp_broker.cluster import QuorumRuntime
from amqp_broker.queues import ClassicQueue, Placement, QueueType, QuorumQueue
from amqp_broker.queues import remote_wire as w
from amqp_broker.queues.remote import RemoteQueue

from .helpers import msg


def _classic(tmp_path):
    return ClassicQueue("q", "/", arguments={})


def _quorum(tmp_path):
    runtime = QuorumRuntime(str(tmp_path / "quorum"), "n")  # not run: construction only
    return QuorumQueue(runtime, None, "q", "/", arguments={"x-queue-type": "quorum"}, now_ms=0,
                       dlx_worker_factory=lambda queue: None)


class Link:
    """The remote proxy's link, recording what it sends (the real one: server/remote_queues)."""

    def __init__(self, up: bool = True) -> None:
        self.up = up
        self.sent: list = []
        self.n = 0

    def send(self, node, msg) -> bool:
        self.sent.append((node, msg))
        return self.up

    def is_up(self, node) -> bool:
        return self.up

    def new_id(self) -> int:
        self.n += 1
        return self.n

    def channel_id(self, channel) -> int:
        return 7

    def expect(self, ident, queue) -> None:
        pass

    def forget(self, ident) -> None:
        pass

    def runtime_of(self, queue):
        return None


def _remote(tmp_path, link=None):
    return RemoteQueue(link or Link(), "q", "/", "rabbit@home", arguments={}, auto_delete=False)


BUILDERS = {"classic": _classic, "quorum": _quorum, "remote": _remote}
LOCAL = ("classic", "quorum")


def _protocol_members() -> tuple[set[str], dict[str, object]]:
    """(data attributes, methods and properties) that QueueType declares."""
    attrs = set(QueueType.__annotations__)
    members = {name: value for name, value in vars(QueueType).items()
               if not name.startswith("_") and (callable(value) or isinstance(value, property))}
    return attrs, members


def test_the_protocol_covers_what_the_server_needs():
    attrs, members = _protocol_members()
    # a sample of each group, so an accidental deletion from base.py fails here
    assert {"name", "vhost", "settings", "queue_type", "supports_global_qos",
            "supports_conditional_delete"} <= attrs
    assert {"publish", "basic_get", "get", "settle", "requeue", "discard", "add_consumer",
            "remove_consumer", "remove_channel", "dispatch", "apply_policy", "purge", "delete",
            "next_deadline", "expire", "placement", "is_full", "message_count",
            "consumer_count", "unacked_count", "message_bytes", "active_consumer"} <= set(members)


@pytest.mark.parametrize("kind", sorted(BUILDERS))
def test_queue_type_has_every_member_with_the_protocol_signature(kind, tmp_path):
    queue = BUILDERS[kind](tmp_path)
    cls = type(queue)
    attrs, members = _protocol_members()
    missing = sorted(a for a in attrs if not hasattr(queue, a))
    assert not missing, f"{cls.__name__} lacks attributes {missing}"
    for name, declared in members.items():
        actual = inspect.getattr_static(cls, name, None)
        assert actual is not None, f"{cls.__name__} lacks {name}"
        if isinstance(declared, property):
            assert isinstance(actual, property), f"{cls.__name__}.{name} is not a property"
            continue
        want = [(p.name, p.kind, p.default) for p in inspect.signature(declared).parameters.values()]
        got = [(p.name, p.kind, p.default) for p in inspect.signature(actual).parameters.values()]
        assert got == want, f"{cls.__name__}.{name}{inspect.signature(actual)} differs"
    assert isinstance(queue, QueueType)  # runtime_checkable: the members exist


@pytest.mark.parametrize("kind", LOCAL)
def test_placement_names_the_callers_node_for_a_local_queue(kind, tmp_path):
    where = BUILDERS[kind](tmp_path).placement("rabbit@here")
    assert isinstance(where, Placement)
    assert (where.leader, where.members, where.online) == (
        "rabbit@here", ("rabbit@here",), ("rabbit@here",))
    assert where.replicated == (kind == "quorum")
    assert (where.group is not None) == (kind == "quorum")


class Sink:
    def __init__(self) -> None:
        self.outcomes: list[tuple[int, bool]] = []

    def settle(self, seq: int, ok: bool) -> None:
        self.outcomes.append((seq, ok))


class Journal:
    """A durable queue's journal that records which confirms wait for which record."""

    def __init__(self) -> None:
        self.seq = 0
        self.waiting: list[tuple[int, object]] = []

    def enqueued(self, queue, msg_id, message) -> int:
        self.seq += 1
        return self.seq

    def delivered(self, queue, msg_ids) -> int:
        return self.seq

    def removed(self, queue, msg_ids) -> int:
        return self.seq

    def drop_queue(self, queue) -> int:
        return self.seq

    def confirm_when_durable(self, journal_seq, confirm) -> None:
        self.waiting.append((journal_seq, confirm))


def test_classic_settles_confirms_now_or_after_the_journal():
    sink, journal = Sink(), Journal()
    q = ClassicQueue("q", "/", durable=True, journal=journal,
                     arguments={"x-max-length": 2, "x-overflow": "reject-publish"})
    assert q.publish(msg(b"a"), 0, (sink, 1))  # transient: confirmed at once
    assert q.publish(msg(b"b", persistent=True), 0, (sink, 2))  # waits for record 1's fsync
    assert not q.publish(msg(b"c"), 0, (sink, 3))  # over x-max-length: nacked at once
    assert sink.outcomes == [(1, True), (3, False)]
    assert journal.waiting == [(1, (sink, 2))]
    assert q.is_full()
    q.purge()
    assert not q.is_full()


def test_quorum_acks_at_a_low_rate_wait_for_the_next_publish_or_their_deadline(tmp_path,
                                                                              monkeypatch):
    """With the Raft driver idle and no message waiting for credit, a batch's acks are not
    proposed at its end: they go just before the queue's next Enqueue (one WAL write for
    both) or when `SETTLE_DELAY_MS` has passed, whichever comes first. With a driver pass
    due anyway they go at once."""
    from amqp_broker.queues.quorum import SETTLE_DELAY_MS
    from quorum.fifo import ConsumerKey, Enqueue, Settle, decode_command

    q = _quorum(tmp_path)  # not ready: proposals wait in its backlog, in order
    driver = type(q.runtime.driver)
    monkeypatch.setattr(driver, "pass_due", False)  # the driver is not run here: say it is idle

    def proposed() -> list[type]:
        return [type(decode_command(data)) for data, _ in q._backlog]

    key = ConsumerKey("ctag", "pid", "n")
    q.settle([(key, 1)])
    assert q.next_deadline(1000) == 1000 + SETTLE_DELAY_MS and proposed() == []
    q.settle([(key, 2)])
    assert q.next_deadline(1002) == 1000 + SETTLE_DELAY_MS  # the first ack's deadline holds
    assert not q.expire(1000 + SETTLE_DELAY_MS - 1) and proposed() == []
    assert not q.expire(1000 + SETTLE_DELAY_MS)
    assert proposed() == [Settle] and decode_command(q._backlog[0][0]).msg_ids == (1, 2)
    q.settle([(key, 3)])
    assert q.next_deadline(2000) == 2000 + SETTLE_DELAY_MS
    q.publish(msg(b"a"), 2001)
    assert proposed() == [Settle, Settle, Enqueue]  # the held ack went first, with it
    assert q.next_deadline(2002) is None
    monkeypatch.setattr(driver, "pass_due", True)
    q.settle([(key, 4)])
    assert q.next_deadline(3000) is None and proposed()[-1] is Settle


def test_quorum_publishers_are_asked_to_pause_past_the_unapplied_limit_until_half_are_applied(
        tmp_path):
    """`flow` turns on once more than FLOW_PENDING Enqueues proposed here are unapplied
    (looked at every FLOW_CHECK_EVERY publishes); `when_flow_ends` calls back once no more than
    half as many are left, and at once for a deleted queue. A new classic queue does not ask
    (its own rule: tests/queues/test_classic_flow.py)."""
    from amqp_broker.queues.quorum import FLOW_CHECK_EVERY, FLOW_PENDING
    from quorum.fifo import Meta

    assert _classic(tmp_path).flow is False
    q = _quorum(tmp_path)  # not ready: nothing is applied until the test applies it
    sent = 0
    while not q.flow:
        q.publish(msg(b"m%d" % sent), 0)
        sent += 1
        assert sent <= FLOW_PENDING + FLOW_CHECK_EVERY
    assert sent > FLOW_PENDING
    ended: list[str] = []

    def first() -> None:
        ended.append("first")

    q.when_flow_ends(first)
    q.when_flow_ends(lambda: ended.append("second"))
    q.when_flow_ends(first)  # asked again after a wait gave up: still called once
    assert len(q._flow_waiters) == 2
    state = q.machine.init()
    for i, (data, _) in enumerate(q._backlog, start=1):  # the driver's applies, one by one
        state, _, _ = q.machine.apply(Meta(i, 1, 0), q.machine.decode(data), state)
        if i < sent - FLOW_PENDING // 2:
            assert not ended and q.flow
    assert ended == ["first", "second"] and not q.flow
    q.flow = True  # asked again, then deleted: a waiting publisher goes on
    q.when_flow_ends(lambda: ended.append("third"))
    assert ended == ["first", "second"]
    q.delete()
    assert ended == ["first", "second", "third"] and not q.flow
    q.when_flow_ends(lambda: ended.append("after delete"))
    assert ended[-1] == "after delete"


def test_classic_basic_get_replies_once_inside_the_call():
    q = ClassicQueue("q", "/")
    q.publish(msg(b"a"), 0)
    q.publish(msg(b"b"), 0)
    replies: list = []
    q.basic_get(object(), True, 0, lambda entry, left: replies.append((entry.message.body, left)))
    assert replies == [(b"a", 1)]
    q.basic_get(object(), True, 0, lambda entry, left: replies.append((entry.message.body, left)))
    q.basic_get(object(), True, 0, lambda entry, left: replies.append((entry, left)))
    assert replies == [(b"a", 1), (b"b", 0), (None, 0)]


def test_remote_placement_names_the_home_node_online_only_while_its_link_is_up(tmp_path):
    link = Link()
    q = _remote(tmp_path, link)
    assert q.placement("rabbit@here") == Placement("rabbit@home", ("rabbit@home",),
                                                   ("rabbit@home",))
    assert q.unavailable_error() is None
    link.up = False
    assert q.placement("rabbit@here").online == ()
    assert q.unavailable_error().reply_code == 404


def test_remote_confirm_settles_once_from_the_home_node_or_at_once_when_it_is_down(tmp_path):
    sink, link = Sink(), Link()
    q = _remote(tmp_path, link)
    q.publish(msg(b"a"), 0, (sink, 1))
    (node, sent), = link.sent
    assert node == "rabbit@home" and isinstance(sent, w.Publish) and sent.body == b"a"
    assert sink.outcomes == []
    q.confirmed((sent.corr,), True)
    q.confirmed((sent.corr,), True)  # a duplicate answer settles nothing more
    assert sink.outcomes == [(1, True)]
    link.up = False
    q.publish(msg(b"b"), 0, (sink, 2))
    assert sink.outcomes == [(1, True), (2, False)]


def test_remote_basic_get_replies_once(tmp_path):
    link = Link()
    q = _remote(tmp_path, link)
    replies: list = []
    q.basic_get(object(), True, 0, lambda entry, left: replies.append((entry, left)))
    corr = link.sent[-1][1].corr
    q.got(w.GetReply(corr, 3, 9, False, 0, "", "q", b"", b"x"))
    q.got(w.GetReply(corr, 3))
    assert [(e.message.body, e.msg_id, left) for e, left in replies] == [(b"x", 9, 3)]


def test_remote_counts_come_from_the_home_node_once_or_from_the_last_report(tmp_path):
    """ask_counts (a declare-ok, a purge-ok on another node): answered once, from the home
    queue; when the home node cannot be asked, or goes down before it answers, the last
    report."""
    link = Link()
    q = _remote(tmp_path, link)
    q.stats(4, 1)
    got: list = []
    q.ask_counts(got.append)
    request = link.sent[-1][1]
    assert type(request) is w.CountsRequest and (request.vhost, request.queue) == ("/", "q")
    q.counted(w.Counts(request.corr, 9, 2))
    q.counted(w.Counts(request.corr, 1, 0))  # a duplicate: ignored
    assert got == [9] and (q.message_count, q.consumer_count) == (9, 2)
    q.ask_counts(got.append, purge=True)
    purge = link.sent[-1][1]
    assert type(purge) is w.Purge and purge.corr
    q.counted(w.Counts(purge.corr, 9, 0))
    assert got == [9, 9] and q.message_count == 0
    q.stats(5, 0)
    q.ask_counts(got.append)   # no answer before the link drops
    q.home_down()
    link.up = False
    q.ask_counts(got.append)   # cannot be asked
    assert got == [9, 9, 5, 5]
