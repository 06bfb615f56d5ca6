"""Classic queue rules, one small scenario each: FIFO, prefetch, requeue position, priorities,
consumer priorities, single-active-consumer, exclusivity, TTL, x-expires, max-length/overflow,
dead letters, purge/delete, and what the journal is told."""

import pytest

from amqp_broker.core.errors import AccessRefused
from amqp_broker.queues import ClassicQueue, DeadLetter

from .helpers import bodies, consumer, msg

DLX = {"x-dead-letter-exchange": "dlx"}


def fill(q, n, now=0, **kw):
    for i in range(n):
        assert q.publish(msg(b"m%d" % i, **kw), now)


def test_fifo_and_counts():
    q = ClassicQueue("q")
    fill(q, 3)
    assert (q.message_count, q.consumer_count, q.unacked_count) == (3, 0, 0)
    q.add_consumer(consumer("c"), 0)
    ds = q.dispatch(0)
    assert bodies(ds) == [b"m0", b"m1", b"m2"]
    assert [d.entry.redelivered for d in ds] == [False] * 3
    assert (q.message_count, q.unacked_count) == (0, 3)
    q.settle([d.entry.msg_id for d in ds])
    assert q.unacked_count == 0


def test_prefetch_credit_limits_dispatch():
    q = ClassicQueue("q")
    fill(q, 5)
    c = consumer("c", prefetch=2)
    q.add_consumer(c, 0)
    assert bodies(q.dispatch(0)) == [b"m0", b"m1"]
    assert q.dispatch(0) == []
    c.take_credit.n = 1  # the channel got an ack and freed one unit
    assert bodies(q.dispatch(0)) == [b"m2"]


def test_no_ack_consumers_settle_on_delivery():
    q = ClassicQueue("q")
    fill(q, 2)
    q.add_consumer(consumer("c", no_ack=True), 0)
    assert len(q.dispatch(0)) == 2
    assert q.unacked_count == 0


def test_requeue_returns_to_original_position_with_redelivered():
    q = ClassicQueue("q")
    fill(q, 5)
    c = consumer("c", prefetch=3)
    q.add_consumer(c, 0)
    ids = [d.entry.msg_id for d in q.dispatch(0)]
    q.requeue([ids[2], ids[0]])  # out of order on purpose
    q.requeue([ids[1]])
    c.take_credit.n = None
    ds = q.dispatch(0)
    assert bodies(ds) == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    assert [d.entry.redelivered for d in ds] == [True, True, True, False, False]


def test_requeue_merges_between_ready_messages():
    q = ClassicQueue("q")
    fill(q, 4)
    c = consumer("c", prefetch=4)
    q.add_consumer(c, 0)
    ids = [d.entry.msg_id for d in q.dispatch(0)]
    q.requeue([ids[0], ids[2]])  # ready: 0, 2
    q.requeue([ids[1]])  # must land between 0 and 2
    q.requeue([ids[3]])
    c.take_credit.n = None
    assert bodies(q.dispatch(0)) == [b"m0", b"m1", b"m2", b"m3"]


def test_unknown_ids_are_ignored():
    q = ClassicQueue("q")
    q.settle([99])
    q.requeue([99])
    q.discard([99])
    assert (q.message_count, q.unacked_count) == (0, 0)


def test_basic_get():
    q = ClassicQueue("q")
    assert q.get(0, no_ack=False) is None
    fill(q, 2)
    e = q.get(0, no_ack=False)
    assert e.message.body == b"m0" and q.unacked_count == 1 and q.message_count == 1
    q.requeue([e.msg_id])
    again = q.get(0, no_ack=True)
    assert again.message.body == b"m0" and again.redelivered and q.unacked_count == 0


def test_message_priorities_higher_first_fifo_within_level():
    q = ClassicQueue("q", arguments={"x-max-priority": 5})
    for body, prio in [(b"a0", 0), (b"b3", 3), (b"c9", 9), (b"d3", 3), (b"e", None), (b"f5", 5)]:
        q.publish(msg(body, priority=prio), 0)
    q.add_consumer(consumer("c"), 0)
    # 9 is capped at max priority 5 and stays FIFO with the other 5
    assert bodies(q.dispatch(0)) == [b"c9", b"f5", b"b3", b"d3", b"a0", b"e"]


def test_priorities_ignored_without_max_priority():
    q = ClassicQueue("q")
    q.publish(msg(b"low"), 0)
    q.publish(msg(b"high", priority=9), 0)
    q.add_consumer(consumer("c"), 0)
    assert bodies(q.dispatch(0)) == [b"low", b"high"]


def test_round_robin_among_equal_consumers():
    q = ClassicQueue("q")
    fill(q, 4)
    q.add_consumer(consumer("a"), 0)
    q.add_consumer(consumer("b"), 0)
    assert [d.consumer.tag for d in q.dispatch(0)] == ["a", "b", "a", "b"]


def test_consumer_priority_gets_messages_while_it_has_credit():
    q = ClassicQueue("q")
    fill(q, 5)
    q.add_consumer(consumer("low"), 0)
    q.add_consumer(consumer("high", prefetch=2, arguments={"x-priority": 10}), 0)
    assert [d.consumer.tag for d in q.dispatch(0)] == ["high", "high", "low", "low", "low"]


def test_single_active_consumer_and_takeover_by_priority():
    q = ClassicQueue("q", arguments={"x-single-active-consumer": True})
    fill(q, 4)
    q.add_consumer(consumer("first", prefetch=1), 0)
    q.add_consumer(consumer("second"), 0)
    q.add_consumer(consumer("urgent", priority=5), 0)
    assert q.active_consumer.tag == "first"
    assert [d.consumer.tag for d in q.dispatch(0)] == ["first"]
    assert q.dispatch(0) == []  # others wait even though they have credit
    q.remove_consumer("first", "first", 0)
    assert q.active_consumer.tag == "urgent"
    assert [d.consumer.tag for d in q.dispatch(0)] == ["urgent"] * 3
    assert q.consumer_count == 2


def test_exclusive_consumer():
    q = ClassicQueue("q")
    q.add_consumer(consumer("x", exclusive=True), 0)
    with pytest.raises(AccessRefused) as err:
        q.add_consumer(consumer("y"), 0)
    assert err.value.reply_text == "ACCESS_REFUSED - queue 'q' in vhost '/' in exclusive use"
    q.remove_consumer("x", "x", 0)
    q.add_consumer(consumer("y"), 0)
    with pytest.raises(AccessRefused):
        q.add_consumer(consumer("z", exclusive=True), 0)


def test_remove_channel_drops_all_its_consumers():
    q = ClassicQueue("q")
    ch = object()
    q.add_consumer(consumer("a", ch), 0)
    q.add_consumer(consumer("b", ch), 0)
    q.add_consumer(consumer("c"), 0)
    assert sorted(c.tag for c in q.remove_channel(ch, 0)) == ["a", "b"]
    assert [c.tag for c in q.consumers()] == ["c"]


def test_auto_delete_after_last_consumer():
    q = ClassicQueue("q", auto_delete=True)
    assert not q.should_auto_delete  # never had a consumer
    q.add_consumer(consumer("a"), 0)
    assert not q.should_auto_delete
    q.remove_consumer("a", "a", 0)
    assert q.should_auto_delete


# -- TTL ----------------------------------------------------------------------------------------

def test_queue_ttl_expires_at_head_and_dead_letters():
    q = ClassicQueue("q", arguments={"x-message-ttl": 100, **DLX})
    q.publish(msg(b"old"), 0)
    q.publish(msg(b"new"), 50)
    assert q.next_deadline(0) == 101
    assert not q.expire(100)  # not yet: expired strictly after the deadline
    assert q.message_count == 2
    q.expire(101)
    assert q.message_count == 1
    (dead,) = q.take_dead_letters()
    assert dead == DeadLetter(dead.message, "expired", "q", False) and dead.message.body == b"old"
    assert q.next_deadline(101) == 151


def test_expired_dead_letter_reason_and_order():
    q = ClassicQueue("q", arguments={"x-message-ttl": 100, **DLX})
    q.publish(msg(b"a"), 0)
    q.publish(msg(b"b"), 10)
    q.publish(msg(b"c"), 500)
    q.expire(200)
    dead = q.take_dead_letters()
    assert [(d.message.body, d.reason, d.queue) for d in dead] == [(b"a", "expired", "q"),
                                                                    (b"b", "expired", "q")]
    assert q.take_dead_letters() == []
    assert q.next_deadline(200) == 601


def test_per_message_ttl_only_at_head():
    q = ClassicQueue("q", arguments=DLX)
    q.publish(msg(b"long", expiration=1000), 0)
    q.publish(msg(b"short", expiration=10), 0)
    q.expire(100)  # "short" is behind "long": classic queues only expire at the head
    assert q.message_count == 2
    q.add_consumer(consumer("c"), 100)
    assert bodies(q.dispatch(100)) == [b"long"]  # dispatch drops the expired head "short"
    assert [d.reason for d in q.take_dead_letters()] == ["expired"]


def test_lower_of_message_and_queue_ttl_applies():
    q = ClassicQueue("q", arguments={"x-message-ttl": 50})
    q.publish(msg(b"a", expiration=500), 0)
    q.publish(msg(b"b", expiration=5), 0)
    assert q.next_deadline(0) == 51
    q.expire(51)
    assert q.message_count == 0  # a at 50, then b (deadline 5) at the head


def test_ttl_zero_reaches_a_ready_consumer_but_not_a_waiting_queue():
    q = ClassicQueue("q", arguments={"x-message-ttl": 0})
    q.add_consumer(consumer("c"), 0)
    q.publish(msg(b"now"), 7)
    assert bodies(q.dispatch(7)) == [b"now"]
    q2 = ClassicQueue("q2", arguments={"x-message-ttl": 0})
    q2.publish(msg(b"late"), 7)
    q2.expire(8)
    assert q2.message_count == 0


def test_requeued_message_keeps_its_deadline():
    q = ClassicQueue("q", arguments={"x-message-ttl": 100, **DLX})
    q.publish(msg(b"a"), 0)
    q.add_consumer(consumer("c", prefetch=1), 0)
    (d,) = q.dispatch(0)
    q.requeue([d.entry.msg_id])
    q.expire(150)
    (dead,) = q.take_dead_letters()
    assert dead.reason == "expired" and dead.redelivered


def test_no_dead_letters_without_dlx():
    q = ClassicQueue("q", arguments={"x-message-ttl": 1})
    q.publish(msg(), 0)
    q.expire(10)
    assert q.message_count == 0 and q.take_dead_letters() == []


def test_policy_dlx_enables_dead_letters():
    q = ClassicQueue("q")
    q.apply_policy({"dead-letter-exchange": "dlx", "message-ttl": 1})
    q.publish(msg(), 0)
    q.expire(10)
    assert [d.reason for d in q.take_dead_letters()] == ["expired"]


def test_max_length_policy_trims_an_existing_queue_at_once():
    q = ClassicQueue("q", arguments=DLX)
    fill(q, 5)
    q.apply_policy({"max-length": 2})
    assert q.message_count == 2
    dls = q.take_dead_letters()
    assert [d.reason for d in dls] == ["maxlen"] * 3
    assert [d.message.body for d in dls] == [b"m0", b"m1", b"m2"]  # the heads go first
    q.add_consumer(consumer("c"), 0)
    assert bodies(q.dispatch(0)) == [b"m3", b"m4"]


def test_max_length_bytes_policy_trims_but_reject_publish_keeps():
    q = ClassicQueue("q")
    fill(q, 4)  # 2 bytes each
    q.apply_policy({"max-length-bytes": 5})
    assert (q.message_count, q.message_bytes) == (2, 4)
    q.apply_policy({"max-length": 1, "overflow": "reject-publish"})
    assert q.message_count == 2  # RabbitMQ keeps what is there and refuses new messages
    assert not q.publish(msg(), 0)


# -- x-expires ------------------------------------------------------------------------------------

def test_queue_expires_when_unused():
    q = ClassicQueue("q", arguments={"x-expires": 1000}, now_ms=0)
    assert q.next_deadline(0) == 1000
    assert not q.expire(999)
    q.touch(500)  # redeclare
    assert not q.expire(1000)
    assert q.expire(1500)


def test_queue_with_consumer_does_not_expire_and_get_counts_as_use():
    q = ClassicQueue("q", arguments={"x-expires": 100}, now_ms=0)
    q.add_consumer(consumer("c"), 0)
    assert q.next_deadline(0) is None and not q.expire(10_000)
    q.remove_consumer("c", "c", 10_000)  # unused from now on
    assert q.next_deadline(10_000) == 10_100
    q.get(10_050, no_ack=True)
    assert not q.expire(10_100)
    assert q.expire(10_150)


# -- max-length and overflow ------------------------------------------------------------------------

def test_drop_head_by_count_dead_letters_maxlen():
    q = ClassicQueue("q", arguments={"x-max-length": 2, **DLX})
    fill(q, 4)
    assert q.message_count == 2
    assert [(d.message.body, d.reason) for d in q.take_dead_letters()] == [(b"m0", "maxlen"),
                                                                          (b"m1", "maxlen")]
    q.add_consumer(consumer("c"), 0)
    assert bodies(q.dispatch(0)) == [b"m2", b"m3"]


def test_drop_head_by_bytes():
    q = ClassicQueue("q", arguments={"x-max-length-bytes": 10})
    for b in (b"aaaa", b"bbbb", b"cccc"):
        assert q.publish(msg(b), 0)
    assert q.message_count == 2 and q.message_bytes == 8


def test_max_length_counts_ready_only():
    q = ClassicQueue("q", arguments={"x-max-length": 1})
    q.publish(msg(b"a"), 0)
    q.add_consumer(consumer("c", prefetch=1), 0)
    q.dispatch(0)
    assert q.publish(msg(b"b"), 0)
    assert q.message_count == 1 and q.unacked_count == 1


def test_reject_publish_refuses_without_dead_letter():
    q = ClassicQueue("q", arguments={"x-max-length": 1, "x-overflow": "reject-publish", **DLX})
    assert q.publish(msg(b"a"), 0)
    assert not q.publish(msg(b"b"), 0)
    assert q.message_count == 1 and q.take_dead_letters() == []


def test_reject_publish_by_bytes():
    q = ClassicQueue("q", arguments={"x-max-length-bytes": 5, "x-overflow": "reject-publish"})
    assert q.publish(msg(b"abc"), 0)
    assert not q.publish(msg(b"abc"), 0)
    assert q.publish(msg(b"ab"), 0)


def test_reject_publish_dlx_refuses_and_dead_letters():
    q = ClassicQueue("q", arguments={"x-max-length": 0, "x-overflow": "reject-publish-dlx", **DLX})
    assert not q.publish(msg(b"a"), 0)
    assert [(d.message.body, d.reason) for d in q.take_dead_letters()] == [(b"a", "maxlen")]


def test_requeue_over_max_length_drops_head():
    q = ClassicQueue("q", arguments={"x-max-length": 2})
    fill(q, 2)
    q.add_consumer(consumer("c", prefetch=1), 0)
    (d,) = q.dispatch(0)
    q.publish(msg(b"m2"), 0)
    q.requeue([d.entry.msg_id])  # 3 ready > 2: the oldest (the requeued m0) goes
    q.remove_consumer("c", "c", 0)
    assert [q.get(0, True).message.body for _ in range(2)] == [b"m1", b"m2"]


# -- reject / purge / delete --------------------------------------------------------------------------

def test_discard_dead_letters_rejected():
    q = ClassicQueue("q", arguments=DLX)
    fill(q, 1)
    e = q.get(0, no_ack=False)
    q.discard([e.msg_id])
    assert [(d.reason, d.redelivered) for d in q.take_dead_letters()] == [("rejected", False)]
    assert q.unacked_count == 0


def test_purge_keeps_unacked_and_delete_drops_everything():
    q = ClassicQueue("q")
    fill(q, 3)
    e = q.get(0, no_ack=False)
    assert q.purge() == 2
    assert (q.message_count, q.unacked_count) == (0, 1)
    q.requeue([e.msg_id])
    q.add_consumer(consumer("c"), 0)
    assert q.delete() == 1
    assert (q.message_count, q.unacked_count, q.consumer_count) == (0, 0, 0)


# -- journal --------------------------------------------------------------------------------------------

class FakeJournal:
    def __init__(self):
        self.log = []

    def enqueued(self, queue, msg_id, message):
        self.log.append(("enq", msg_id))
        return len(self.log)

    def delivered(self, queue, msg_ids):
        self.log.append(("dlv", tuple(msg_ids)))
        return len(self.log)

    def removed(self, queue, msg_ids):
        self.log.append(("rm", tuple(msg_ids)))
        return len(self.log)

    def drop_queue(self, queue):
        self.log.append(("drop", queue))
        return len(self.log)


def test_journal_sees_persistent_messages_of_durable_queues_only():
    j = FakeJournal()
    q = ClassicQueue("q", durable=True, journal=j, arguments={"x-max-length": 2})
    q.publish(msg(b"t"), 0)  # transient: not journaled
    q.publish(msg(b"p1", persistent=True), 0)  # id 2
    q.publish(msg(b"p2", persistent=True), 0)  # id 3; drops "t" (transient: no record)
    assert j.log == [("enq", 2), ("enq", 3)]
    q.add_consumer(consumer("c", prefetch=1), 0)
    (d,) = q.dispatch(0)
    assert j.log[-1] == ("dlv", (2,))  # first delivery is recorded once
    q.requeue([d.entry.msg_id])
    e = q.get(0, no_ack=False)
    assert e.msg_id == 2 and len(j.log) == 3  # second delivery: nothing new
    q.settle([2])
    q.purge()
    assert j.log[-2:] == [("rm", (2,)), ("rm", (3,))]
    transient_q = ClassicQueue("t", durable=False, journal=j)
    transient_q.publish(msg(persistent=True), 0)
    assert len(j.log) == 5


def test_journal_removed_on_no_ack_expiry_and_delete():
    j = FakeJournal()
    q = ClassicQueue("q", durable=True, journal=j, arguments={"x-message-ttl": 10})
    for i in range(3):
        q.publish(msg(b"%d" % i, persistent=True), 0)
    assert q.get(0, no_ack=True).msg_id == 1
    assert j.log[-1] == ("rm", (1,))
    q.get(0, no_ack=False)
    q.expire(11)
    assert j.log[-1] == ("rm", (3,))
    q.delete()
    assert j.log[-1] == ("drop", q.key)


# -- while it becomes mirrored (server/mirror_convert.py) ------------------------------------
class _Sink:
    def __init__(self) -> None:
        self.settled: list[tuple[int, bool]] = []

    def settle(self, seq: int, ok: bool) -> None:
        self.settled.append((seq, ok))


def test_a_paused_queue_delivers_nothing_and_gets_nothing():
    q = ClassicQueue("q")
    fill(q, 3)
    q.add_consumer(consumer("c"), 0)
    q.paused = True
    assert q.dispatch(0) == [] and q.get(0, True) is None
    assert q.message_count == 3
    q.paused = False
    assert bodies(q.dispatch(0)) == [b"m0", b"m1", b"m2"]


def test_held_publishes_are_not_queued_nor_confirmed_until_released():
    q = ClassicQueue("q", durable=True)
    fill(q, 1)
    q.held = []
    sink = _Sink()
    assert q.publish(msg(b"late", persistent=True), 5, (sink, 1))
    assert q.message_count == 1 and sink.settled == []
    held = q.release_held()
    assert [(m.body, now, c) for m, now, c in held] == [(b"late", 5, (sink, 1))]
    assert q.held is None and q.release_held() == []


def test_ready_entries_are_in_delivery_order_across_priority_levels():
    q = ClassicQueue("q", arguments={"x-max-priority": 5})
    for body, prio in ((b"low0", 0), (b"hi0", 5), (b"mid", 3), (b"low1", 0), (b"hi1", 5)):
        q.publish(msg(body, priority=prio), 0)
    order = [e.message.body for e in q.ready_entries()]
    q.add_consumer(consumer("c"), 0)
    assert order == bodies(q.dispatch(0)) == [b"hi0", b"hi1", b"mid", b"low0", b"low1"]
