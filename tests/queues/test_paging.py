"""Classic queues paging out of memory with a real spill store (`store/spill.py`): order across
page-out and page-in with priorities and requeues, TTL and purge of paged messages, files deleted
once read back, lazy mode by argument and by policy. The model test with paging is in
test_classic_state.py."""

from __future__ import annotations

import os

import pytest

from amqp_broker.queues import ClassicQueue
from amqp_broker.queues.classic import ENTRY_OVERHEAD
from amqp_broker.store import spill
from amqp_broker.store.spill import SpillStore

from .helpers import bodies, consumer, msg


@pytest.fixture
def store(tmp_path):
    return SpillStore(str(tmp_path / "spill"))


def _files(store: SpillStore) -> list[str]:
    return [f for _, _, fs in os.walk(store.directory) for f in fs]


def _queue(store, budget, **args) -> ClassicQueue:
    return ClassicQueue("q", arguments=args, pager=store.pager("q"), memory_budget=budget)


def _drain(q: ClassicQueue, n: int | None = None) -> list[bytes]:
    out = []
    while q.message_count and (n is None or len(out) < n):
        entry = q.get(0, no_ack=True)
        out.append(entry.message.body)
    return out


def test_a_backlog_past_the_budget_is_paged_out_and_comes_back_in_order(store, monkeypatch):
    monkeypatch.setattr(spill, "SEGMENT_BYTES", 64 << 10)   # many segment files
    body = lambda i: b"%06d" % i + b"x" * 1000   # noqa: E731
    q = _queue(store, 20 * (1006 + ENTRY_OVERHEAD))
    for i in range(5000):   # crosses ColumnFifo chunks (2048 rows) too
        q.publish(msg(body(i), persistent=True), 0)
    assert q.message_count == 5000 and q.message_bytes == 5000 * 1006
    assert q.paged_out_count == 4980 and q.paged_out_bytes == 4980 * 1006
    assert len(_files(store)) > 50
    assert _drain(q, 100) == [body(i) for i in range(100)]
    assert q.paged_out_count < 4980
    q.publish(msg(body(5000)), 0)   # joins the paged tail, behind the older ones
    assert _drain(q) == [body(i) for i in range(100, 5001)]
    assert q.paged_out_count == 0 and q.message_bytes == 0
    assert len(_files(store)) <= 1   # only the segment being written may stay


def test_priorities_and_requeues_keep_their_order_across_paging(store):
    q = _queue(store, 3 * (2 + ENTRY_OVERHEAD), **{"x-max-priority": 2})
    for i in range(10):
        q.publish(msg(b"l%d" % i, priority=0), 0)
        q.publish(msg(b"h%d" % i, priority=2), 0)
    assert q.paged_out_count == 17
    c = consumer("c", prefetch=4)
    q.add_consumer(c, 0)
    first = q.dispatch(0)
    assert bodies(first) == [b"h0", b"h1", b"h2", b"h3"]
    q.requeue([d.entry.msg_id for d in first[1:3]])   # back to their places
    c.take_credit.n = 100
    rest = q.dispatch(0)
    assert bodies(rest) == [b"h1", b"h2"] + [b"h%d" % i for i in range(4, 10)] + \
        [b"l%d" % i for i in range(10)]
    assert [d.entry.redelivered for d in rest[:3]] == [True, True, False]


def test_paged_messages_expire_and_are_purged_without_leaving_files(store):
    q = _queue(store, 0, **{"x-message-ttl": 100, "x-dead-letter-exchange": "dlx"})
    for i in range(50):
        q.publish(msg(b"m%d" % i), i)
    assert q.paged_out_count == 50 and q.next_deadline(0) == 101
    assert not q.expire(120)   # those published at 0..19 expire (strictly after 100 ms)
    dead = q.take_dead_letters()
    assert [d.message.body for d in dead] == [b"m%d" % i for i in range(20)]
    assert {d.reason for d in dead} == {"expired"}
    assert q.message_count == 30
    assert q.purge() == 30 and q.paged_out_count == 0
    assert len(_files(store)) <= 1   # only the segment being written may stay
    q.publish(msg(b"after"), 200)
    assert _drain(q) == [b"after"]
    q.delete()
    assert not os.path.exists(os.path.join(store.directory, "q1"))


def test_lazy_mode_pages_every_message_by_argument_and_by_policy(store):
    lazy = _queue(store, 1 << 20, **{"x-queue-mode": "lazy"})
    lazy.publish(msg(b"a"), 0)
    assert lazy.paged_out_count == 1
    q = ClassicQueue("p", pager=store.pager("p"), memory_budget=1 << 20)
    q.publish(msg(b"a"), 0)
    assert q.paged_out_count == 0
    q.apply_policy({"queue-mode": "lazy"})
    q.publish(msg(b"b"), 0)   # in memory "a" stays; "b" goes out
    assert q.paged_out_count == 1
    assert _drain(q) == [b"a", b"b"]


def test_without_a_pager_nothing_is_paged(store):
    q = ClassicQueue("q", memory_budget=0)
    for i in range(10):
        q.publish(msg(b"%d" % i), 0)
    assert q.paged_out_count == 0 and _drain(q) == [b"%d" % i for i in range(10)]


@pytest.mark.parametrize("pad", [0, 70_000])   # large bodies are written uncopied (split records)
def test_a_durable_queue_pages_persistent_messages_out_through_its_journal(store, tmp_path, pad):
    from amqp_broker.store import MessageJournal

    def body(i: int) -> bytes:
        return b"m%d" % i + b"." * pad

    journal = MessageJournal(str(tmp_path / "j"), compact_min_bytes=1)
    journal.open()
    q = ClassicQueue("d", durable=True, journal=journal, pager=store.pager("d"),
                     memory_budget=0)
    for i in range(6):
        q.publish(msg(body(i), persistent=i % 3 != 0), 0)
    assert q.paged_out_count == 6
    spilled = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(store.directory)
                  for f in fs)
    # the 4 persistent ones never go to the spill store; the 2 transient ones wait in its
    # buffer when small, large ones are written at once
    assert spilled == 0 if not pad else 2 * len(body(0)) <= spilled < 3 * len(body(0))
    assert _drain(q, 2) == [body(0), body(1)]      # m1 read from the batch not yet written
    journal.flush_sync()
    assert _drain(q, 2) == [body(2), body(3)]      # m2 from the file
    journal.flush_sync(compact=True)                # the records move to a new file
    assert _drain(q) == [body(4), body(5)]
    journal.close()


def test_a_recovered_durable_backlog_pages_out_from_summaries_as_if_restored_whole(tmp_path):
    """Recovery pages most of a backlog out again without reading the bodies: the queue then
    gives exactly what a queue holding every recovered message in memory gives (order across
    priority levels, redelivered flags, per-message TTLs restarted at recovery, sizes)."""
    import shutil

    from amqp_broker.store import MessageJournal

    args = {"x-max-priority": 2}
    journal = MessageJournal(str(tmp_path / "j"), compact_min_bytes=1 << 40)
    journal.open()
    q = ClassicQueue("d", arguments=args, durable=True, journal=journal, memory_budget=1 << 30)
    for i in range(3000):   # several read runs and ColumnFifo chunks per level
        q.publish(msg(b"%05d" % i + b"y" * (i % 50), persistent=True, priority=i % 3,
                      expiration=500 if i % 7 == 0 else None), 0)
    c = consumer("c", prefetch=40)
    q.add_consumer(c, 0)
    delivered = q.dispatch(0)                  # 40 delivered: recovered as redelivered
    q.settle([d.entry.msg_id for d in delivered[::2]])   # half of them acked
    acked = {d.entry.message.body for d in delivered[::2]}
    requeued = {d.entry.message.body for d in delivered[1::2]}
    journal.flush_sync()
    journal.close()
    shutil.copytree(tmp_path / "j", tmp_path / "j2")

    def recovered_queue(directory: str, budget: int) -> tuple[ClassicQueue, MessageJournal]:
        j = MessageJournal(str(tmp_path / directory), compact_min_bytes=1 << 40)
        rq = ClassicQueue("d", arguments=args, durable=True, journal=j,
                          pager=SpillStore(str(tmp_path / f"spill-{directory}")).pager("d"),
                          memory_budget=budget)
        rq.restore(j.open()[rq.key], 1000)
        return rq, j

    paged, _ = recovered_queue("j", 10 * (60 + ENTRY_OVERHEAD))
    whole, _ = recovered_queue("j2", 1 << 30)
    assert paged.message_count == whole.message_count == 3000 - 20
    assert paged.message_bytes == whole.message_bytes
    assert paged.paged_out_count > 2900 and whole.paged_out_count == 0
    for rq in (paged, whole):
        rq.expire(1400)                         # nothing due yet: deadlines restarted at 1000
        assert rq.message_count == 2980
    # drained after the TTL: expired messages are dropped as they reach the head
    got = [(e.message.body, e.redelivered, e.message.priority) for e in
           iter(lambda: paged.get(1501, no_ack=True), None)]
    want = [(e.message.body, e.redelivered, e.message.priority) for e in
            iter(lambda: whole.get(1501, no_ack=True), None)]
    assert got == want
    live = [b"%05d" % i + b"y" * (i % 50) for i in range(3000) if i % 7]
    assert sorted(b for b, _, _ in got) == sorted(b for b in live if b not in acked)
    assert {b for b, r, _ in got if r} == requeued - {b for b in requeued if int(b[:5]) % 7 == 0}
    assert [p for _, _, p in got] == sorted((p for _, _, p in got), reverse=True)
