"""The lookahead's bookkeeping (amqp_broker/queues/lookahead.py): which consumers get credit
beyond their prefetch, what is held for them, and what goes back when they leave. What clients
see of it is in compat_tests/test_quorum_prefetch.py."""

from amqp_broker.queues.lookahead import EXTRA_MAX, Lookahead
from quorum.fifo import ConsumerKey, Delivery

A = ConsumerKey("a", "node/1.1", "node")
B = ConsumerKey("b", "node/1.2", "node")


def _held(ids):
    return [Delivery(i, 100 + i, 10, 0, 0) for i in ids]


def test_only_a_consumer_alone_with_a_prefetch_checks_out_more():
    la = Lookahead()
    assert la.credit(A, 0, True) == 0            # unlimited stays unlimited
    assert la.credit(A, 10, False) == 10 and not la.active
    assert la.credit(A, 10, True) == 20 and la.prefetch(A) == 10
    assert la.credit(B, 5000, True) == 5000 + EXTRA_MAX
    assert la.credit(A, 10, False) == 10 and la.prefetch(A) is None   # checked out again


def test_held_entries_go_out_in_order_up_to_the_room_and_skip_what_was_taken_back():
    la = Lookahead()
    la.credit(A, 3, True)
    la.hold(A, _held([1, 2, 3]))
    la.hold(A, _held([4]))
    assert la.held_count == 4
    assert [d.msg_id for d in la.take(A, 2, {1: 0, 2: 0, 3: 0, 4: 0})] == [1, 2]
    # the fifo took 3 back (its node was thought down): skipped, not sent
    assert [d.msg_id for d in la.take(A, 5, {4: 0})] == [4]
    assert la.held_count == 0 and not la.holds(A)
    la.hold(A, _held([5, 6]))
    assert la.take(A, 0, {5: 0, 6: 0}) == [] and la.held_count == 2
    assert la.take(A, 1, None) == [] and la.held_count == 0   # the consumer is gone


def test_a_leaving_consumer_gives_back_what_it_held():
    la = Lookahead()
    la.credit(A, 2, True)
    la.credit(B, 2, True)
    la.hold(A, _held([7, 8]))
    la.hold(B, _held([1]))
    assert la.end(A) == (7, 8)
    assert la.end(A) == () and la.prefetch(A) is None
    assert la.held_count == 1 and la.keys() == [B]
