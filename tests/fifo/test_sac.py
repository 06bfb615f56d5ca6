"""Single active consumer, with consumer priorities deciding who is active (4.x)."""
from quorum.fifo import (UNSUPPORTED, Cancel, Checkout, ConsumerActive, ConsumerDown,
                         Dequeue, NodeDown, QueueConfig, Settle, active_consumer)

from .harness import C1, C2, C3, Harness, delivered, effects

SAC = QueueConfig(name="q", single_active_consumer=True)


def test_first_consumer_is_active_the_others_wait():
    h = Harness(SAC)
    a = h(Checkout(C1, prefetch=10))
    assert a.reply.active and effects(a, ConsumerActive) == [ConsumerActive(C1, True)]
    b = h(Checkout(C2, prefetch=10))
    assert not b.reply.active
    out = h.publish(3)
    assert [d.index for d in delivered(out, C1)] == [3, 4, 5]
    assert delivered(out, C2) == []


def test_next_waiting_consumer_takes_over_on_cancel_in_attach_order():
    h = Harness(SAC)
    h(Checkout(C1, prefetch=1))
    h(Checkout(C2, prefetch=1))
    h(Checkout(C3, prefetch=1))
    h.publish(2)
    a = h(Cancel(C1))          # C1 keeps its unacked message 4
    assert effects(a, ConsumerActive) == [ConsumerActive(C2, True)]
    assert [d.index for d in delivered(a, C2)] == [5]
    assert active_consumer(h.q).key == C2


def test_consumer_down_returns_messages_and_activates_next():
    h = Harness(SAC)
    h(Checkout(C1, prefetch=5))
    h(Checkout(C2, prefetch=5))
    h.publish(2)
    a = h(ConsumerDown("ch-1"))
    got = delivered(a, C2)
    assert [(d.index, d.acquired) for d in got] == [(3, 1), (4, 1)]


def test_higher_priority_consumer_takes_over_when_active_has_nothing_unacked():
    h = Harness(SAC)
    h(Checkout(C1, prefetch=5, priority=0))
    a = h(Checkout(C2, prefetch=5, priority=10))
    assert effects(a, ConsumerActive) == [ConsumerActive(C1, False), ConsumerActive(C2, True)]
    assert [d.index for d in delivered(h.publish(1), C2)] == [3]


def test_higher_priority_consumer_waits_until_active_drains():
    h = Harness(SAC)
    h(Checkout(C1, prefetch=5, priority=0))
    h.publish(1)                                  # C1 holds index 2
    a = h(Checkout(C2, prefetch=5, priority=10))
    assert effects(a, ConsumerActive) == []
    assert h.q.consumers[C1].status == "quiescing"
    assert delivered(h.publish(1)) == []           # nobody gets index 4 while quiescing
    a = h(Settle(C1, (0,)))
    assert ConsumerActive(C2, True) in a.effects and ConsumerActive(C1, False) in a.effects
    assert [d.index for d in delivered(a, C2)] == [4]


def test_waiting_consumers_are_ordered_by_priority():
    h = Harness(SAC)
    h(Checkout(C1, prefetch=1))
    h.publish(1)                                   # keep C1 busy
    h(Checkout(C2, prefetch=1, priority=1))
    h(Checkout(C3, prefetch=1, priority=3))
    assert [w.key for w in h.q.waiting] == [C3, C2]


def test_node_down_moves_active_to_waiting():
    h = Harness(SAC)
    h(Checkout(C1, prefetch=1))
    h(Checkout(C2, prefetch=1))
    h.publish(1)
    a = h(NodeDown("node-a"))
    assert [d.index for d in delivered(a, C2)] == [3]
    assert [w.key for w in h.q.waiting] == [C1]


def test_basic_get_is_refused():
    h = Harness(SAC)
    h.publish(1)
    assert h(Dequeue(C1)).reply == UNSUPPORTED


def test_cancelled_consumer_resubscribing_waits_then_takes_over():
    h = Harness(SAC)
    h(Checkout(C1, prefetch=1))
    h(Checkout(C2, prefetch=1))
    h.publish(1)                       # C1 holds index 3
    h(Cancel(C1))                      # C2 active, C1 cancelled with its unacked
    a = h(Checkout(C1, prefetch=1))
    assert not a.reply.active and [w.key for w in h.q.waiting] == [C1]
    h(Settle(C1, (0,)))                # the cancelled C1 leaves...
    a = h(Cancel(C2))                  # ...and the waiting C1 becomes active
    assert ConsumerActive(C1, True) in a.effects
    assert [d.index for d in delivered(h.publish(1), C1)] == [8]
