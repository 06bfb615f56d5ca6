"""Hypothesis: random queue activity on durable queues, flushes at random points (with compaction
forced often), then a crash (pending records lost). Recovery must give back exactly what the
queues held at the last flush: the same persistent messages, in msg-id order, redelivered iff
they had been delivered. No acked message comes back; no flushed message is lost."""

import os
import shutil
import tempfile

from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

from amqp_broker.queues import ClassicQueue
from amqp_broker.store import MessageJournal
from amqp_broker.store.journal_index import replay
from amqp_broker.store.spill import SpillStore

from queues.helpers import consumer, msg  # tests/queues (pytest puts tests/ on sys.path)
from store.support import segment_files, whole

QUEUES = ("a", "b")
SEGMENT = 300   # a new segment file every few records: rolls, copies forward and deletions


def durable_contents(q: ClassicQueue) -> list[tuple[int, bytes, bool]]:
    """What the journal must recover for `q`: its persistent ready + unacked messages."""
    entries = q.ready_entries() + list(q._unacked.values())
    return sorted(
        (e.msg_id, e.message.body, e.delivery_count > 0) for e in entries if e.message.persistent
    )


class JournalCrashMachine(RuleBasedStateMachine):
    # None: queues keep every message in memory; else their memory budget (paging out to a
    # spill store, and persistent messages read back from the journal)
    budget: int | None = None

    def __init__(self):
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="h6a-journal-")
        self.journal = MessageJournal(self.dir, compact_min_bytes=1, segment_bytes=SEGMENT)
        self.journal.open()
        self.spill = SpillStore(os.path.join(self.dir, "spill"))
        self.queues = {n: self._queue(n) for n in QUEUES}
        for name, q in self.queues.items():
            q.add_consumer(consumer(name, prefetch=None), 0)
        self.unacked = {n: [] for n in QUEUES}
        self.flushed = {n: [] for n in QUEUES}
        self.counter = 0

    def _queue(self, name: str) -> ClassicQueue:
        if self.budget is None:
            return ClassicQueue(name, durable=True, journal=self.journal)
        return ClassicQueue(name, durable=True, journal=self.journal,
                            pager=self.spill.pager(name), memory_budget=self.budget)

    def teardown(self):
        self.journal.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @rule(name=st.sampled_from(QUEUES), persistent=st.booleans(), size=st.integers(0, 60))
    def publish(self, name, persistent, size):
        self.counter += 1
        body = b"%d:" % self.counter + b"." * size
        self.queues[name].publish(msg(body, persistent=persistent), 0)

    @rule(name=st.sampled_from(QUEUES), n=st.integers(1, 3))
    def deliver(self, name, n):
        q = self.queues[name]
        for _ in range(n):
            entry = q.get(0, no_ack=False)
            if entry is None:
                break
            self.unacked[name].append(entry.msg_id)

    @precondition(lambda self: any(self.unacked.values()))
    @rule(data=st.data(), action=st.sampled_from(["ack", "requeue", "discard"]))
    def settle(self, data, action):
        name = data.draw(st.sampled_from([n for n in QUEUES if self.unacked[n]]))
        ids = data.draw(st.lists(st.sampled_from(self.unacked[name]), min_size=1, unique=True))
        for i in ids:
            self.unacked[name].remove(i)
        q = self.queues[name]
        {"ack": q.settle, "requeue": q.requeue, "discard": q.discard}[action](ids)

    @rule(name=st.sampled_from(QUEUES))
    def get_no_ack(self, name):
        self.queues[name].get(0, no_ack=True)

    @rule(name=st.sampled_from(QUEUES))
    def purge(self, name):
        self.queues[name].purge()

    @rule(compact=st.booleans())
    def flush(self, compact):
        self.journal.flush_sync(compact)
        self.flushed = {n: durable_contents(q) for n, q in self.queues.items()}
        # what a crash right now would recover, without disturbing the running journal
        on_disk, _ = replay(segment_files(self.dir))
        for name, q in self.queues.items():
            msgs = on_disk.get(q.key, {})
            got = [(i, m.body, r) for i, (m, r) in sorted(msgs.items())]
            assert got == self.flushed[name]

    @rule()
    def crash_and_recover(self):
        self.journal.close()  # pending records are lost, as in a crash
        self.journal = MessageJournal(self.dir, compact_min_bytes=1, segment_bytes=SEGMENT)
        recovered = self.journal.open()
        for name in QUEUES:
            q = self.queues[name]
            got = [(i, m.body, r) for i, m, r in whole(recovered.get(q.key, []))]
            assert got == self.flushed[name]
        # carry on with fresh queues built from the recovered state, as the server does
        self.queues = {}
        for name in QUEUES:
            q = self._queue(name)
            q.restore(recovered.get(q.key, []), 0)
            q.add_consumer(consumer(name), 0)
            self.queues[name] = q
        self.unacked = {n: [] for n in QUEUES}
        self.flushed = {n: durable_contents(q) for n, q in self.queues.items()}


JournalCrashMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=40, deadline=None
)
TestJournalCrash = JournalCrashMachine.TestCase


class PagedJournalCrashMachine(JournalCrashMachine):
    """The same with every message paged out (budget 0, as a lazy queue): persistent ones read
    back from the journal (written, still pending, or moved by a compaction), transient ones
    from the spill store."""
    budget = 0


PagedJournalCrashMachine.TestCase.settings = settings(
    max_examples=100, stateful_step_count=40, deadline=None
)
TestPagedJournalCrash = PagedJournalCrashMachine.TestCase
