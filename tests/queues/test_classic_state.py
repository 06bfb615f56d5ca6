"""Hypothesis state machine: a classic queue with priorities and a max-length against a tiny model.

The model keeps, per priority level, the sorted set of ready msg ids, plus the unacked set. Every
delivery must be the model's head (highest level, lowest id), so this checks at once: nothing lost,
nothing duplicated, FIFO per priority level, requeue back to the original position, drop-head
dropping the head, and the counters.
"""

import tempfile

from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from amqp_broker.queues import ClassicQueue
from amqp_broker.store.spill import SpillStore

from .helpers import consumer, msg

MAX_PRIORITY = 3
MAX_LENGTH = 6


class ClassicQueueMachine(RuleBasedStateMachine):
    # None: no pager (everything in memory); else the memory budget with a real spill store
    budget: int | None = None

    def __init__(self):
        super().__init__()
        paging = {}
        if self.budget is not None:
            self.spill_dir = tempfile.TemporaryDirectory()
            paging = {"pager": SpillStore(self.spill_dir.name).pager("q"),
                      "memory_budget": self.budget}
        self.q = ClassicQueue("q", arguments={
            "x-max-priority": MAX_PRIORITY, "x-max-length": MAX_LENGTH,
            "x-dead-letter-exchange": "dlx",
        }, **paging)
        self.ready = {level: [] for level in range(MAX_PRIORITY + 1)}
        self.unacked = set()
        self.gone = set()  # settled or dead-lettered: must never reappear
        self.next_id = 1
        self.level_of = {}
        self.consumers = []
        self.tag = 0

    # -- model helpers ----------------------------------------------------------------------
    def _model_pop_head(self):
        for level in range(MAX_PRIORITY, -1, -1):
            if self.ready[level]:
                return self.ready[level].pop(0)
        raise AssertionError("model empty")

    def _model_count(self):
        return sum(len(v) for v in self.ready.values())

    def _model_drop_over_limit(self):
        dropped = []
        while self._model_count() > MAX_LENGTH:
            dropped.append(self._model_pop_head())
        self.gone.update(dropped)
        return dropped

    def _check_dead(self, expected_ids, reason):
        dead = self.q.take_dead_letters()
        assert [d.reason for d in dead] == [reason] * len(expected_ids)
        assert [int(d.message.body) for d in dead] == expected_ids

    # -- rules ------------------------------------------------------------------------------
    @rule(priority=st.integers(0, MAX_PRIORITY + 2))
    def publish(self, priority):
        msg_id = self.next_id
        self.next_id += 1
        assert self.q.publish(msg(b"%d" % msg_id, priority=priority), 0)
        self.level_of[msg_id] = min(priority, MAX_PRIORITY)
        self.ready[self.level_of[msg_id]].append(msg_id)
        self._check_dead(self._model_drop_over_limit(), "maxlen")

    @rule(prefetch=st.none() | st.integers(0, 3), priority=st.integers(0, 1))
    def add_consumer(self, prefetch, priority):
        self.tag += 1
        c = consumer(f"c{self.tag}", prefetch=prefetch, priority=priority)
        self.q.add_consumer(c, 0)
        self.consumers.append(c)

    @precondition(lambda self: self.consumers)
    @rule(data=st.data())
    def cancel(self, data):
        c = data.draw(st.sampled_from(self.consumers))
        self.consumers.remove(c)
        assert self.q.remove_consumer(c.channel, c.tag, 0) is c

    @rule()
    def dispatch(self):
        for d in self.q.dispatch(0):
            expected = self._model_pop_head()
            assert d.entry.msg_id == expected == int(d.entry.message.body)
            self.unacked.add(expected)

    @rule(no_ack=st.booleans())
    def get(self, no_ack):
        entry = self.q.get(0, no_ack)
        if not self._model_count() and entry is None:
            return
        expected = self._model_pop_head()
        assert entry.msg_id == expected
        (self.gone if no_ack else self.unacked).add(expected)

    @precondition(lambda self: self.unacked)
    @rule(data=st.data(), action=st.sampled_from(["ack", "requeue", "discard"]))
    def settle_some(self, data, action):
        ids = data.draw(st.lists(st.sampled_from(sorted(self.unacked)), min_size=1, unique=True))
        self.unacked.difference_update(ids)
        if action == "ack":
            self.q.settle(ids)
            self.gone.update(ids)
        elif action == "discard":
            self.q.discard(ids)
            self.gone.update(ids)
            dead = self.q.take_dead_letters()
            assert sorted(int(d.message.body) for d in dead) == sorted(ids)
        else:
            self.q.requeue(ids)
            for i in ids:
                level = self.level_of[i]
                self.ready[level] = sorted(self.ready[level] + [i])
            self._check_dead(self._model_drop_over_limit(), "maxlen")

    @rule()
    def purge(self):
        assert self.q.purge() == self._model_count()
        for level in self.ready:
            self.gone.update(self.ready[level])
            self.ready[level] = []

    @rule(data=st.data())
    def settle_unknown(self, data):
        self.q.settle([data.draw(st.integers(10_000, 20_000))])

    @invariant()
    def counters_match(self):
        assert self.q.message_count == self._model_count()
        assert self.q.unacked_count == len(self.unacked)
        assert self.q.consumer_count == len(self.consumers)

    @invariant()
    def ready_levels_sorted_and_disjoint(self):
        seen = set()
        for level, paged in enumerate(self.q._levels):
            ids = paged.msg_ids()
            assert ids == sorted(ids) == self.ready[level]
            seen.update(ids)
        assert not seen & self.unacked and not seen & self.gone


    def teardown(self):
        if self.budget is not None:
            self.spill_dir.cleanup()


class PagedClassicQueueMachine(ClassicQueueMachine):
    """The same rules with a budget of about two messages: the rest paged out and back."""
    budget = 600


class LazyClassicQueueMachine(ClassicQueueMachine):
    """Budget 0 (as x-queue-mode lazy): every message is paged out and read back."""
    budget = 0


_SETTINGS = settings(max_examples=60, stateful_step_count=40, deadline=None)
ClassicQueueMachine.TestCase.settings = _SETTINGS
PagedClassicQueueMachine.TestCase.settings = _SETTINGS
LazyClassicQueueMachine.TestCase.settings = _SETTINGS
TestClassicQueueMachine = ClassicQueueMachine.TestCase
TestPagedClassicQueueMachine = PagedClassicQueueMachine.TestCase
TestLazyClassicQueueMachine = LazyClassicQueueMachine.TestCase
