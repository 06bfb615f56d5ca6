"""Two message priority levels served 2:1 (RabbitMQ 4.x quorum queues)."""
from quorum.fifo import Checkout, Settle

from .harness import C1, Harness, delivered


def _drain(h, n):
    a = h(Checkout(C1, prefetch=n))
    return [d.index for d in delivered(a)]


def test_priority_0_to_4_and_unset_are_normal():
    h = Harness()
    for p in (None, 0, 4, 3):
        h.publish(priority=p)
    assert _drain(h, 10) == [1, 2, 3, 4]
    assert len(h.q.ready.hi) == 0


def test_high_served_two_to_one_when_normal_came_first():
    h = Harness()
    h.publish(3, priority=None)     # indexes 1-3 normal
    h.publish(4, priority=9)        # indexes 4-7 high
    assert _drain(h, 10) == [4, 5, 1, 6, 7, 2, 3]


def test_high_published_first_is_always_first():
    h = Harness()
    h.publish(2, priority=5)        # high, indexes 1-2
    h.publish(2, priority=1)        # normal, indexes 3-4
    assert _drain(h, 10) == [1, 2, 3, 4]


def test_counter_persists_across_deliveries():
    h = Harness()
    h(Checkout(C1, prefetch=1))     # index 1
    h.publish(2, priority=None)     # 2 delivered at once, 3 ready
    h.publish(3, priority=9)        # 4, 5, 6
    order = [2]
    for _ in range(5):
        (mid,) = list(h.q.consumers[C1].checked_out)
        order += [d.index for d in delivered(h(Settle(C1, (mid,))))]
    # first pop was normal (counter 0->1), then hi, then normal's turn (2 -> 3 < 6)
    assert order == [2, 4, 3, 5, 6]
