"""Delivery rules: FIFO, competing consumers, prefetch/credit, consumer priorities,
cancel, basic.get, credit flow, local delivery effects."""
from quorum.fifo import (NOT_FOUND, UNLIMITED_PREFETCH, CancelReply, Checkout, CheckoutReply, Confirm,
                         Credit, CreditReply, Cancel, Deliver, Dequeue, DequeueReply,
                         Monitor, Settle, Tick)

from .harness import C1, C2, C3, Harness, delivered, effects


def test_single_consumer_gets_messages_in_fifo_order():
    h = Harness()
    h.publish(5)
    a = h(Checkout(C1, prefetch=10))
    got = delivered(a, C1)
    assert [d.index for d in got] == [1, 2, 3, 4, 5]
    assert [d.msg_id for d in got] == [0, 1, 2, 3, 4]
    assert all(not d.redelivered and d.acquired == 0 for d in got)


def test_deliver_is_a_local_effect_naming_the_consumer_node():
    h = Harness()
    h(Checkout(C2, prefetch=1))
    (eff,) = effects(h.publish()[0], Deliver)
    assert eff.local is True and eff.node == "node-b"
    # the second publish exceeds prefetch: no delivery; its confirm goes to every replica,
    # where the publisher's own node answers it (node None)
    second = h.publish()[0]
    assert not effects([second], Deliver)
    assert all(not e.local or (type(e) is Confirm and e.node is None) for e in second.effects)


def test_checkout_reply_and_monitor():
    h = Harness()
    a = h(Checkout(C1, prefetch=3))
    assert a.reply == CheckoutReply(next_msg_id=0, credit=3, num_checked_out=0, active=True)
    assert Monitor("ch-1", "node-a") in a.effects


def test_prefetch_is_never_exceeded_and_settle_gives_credit_back():
    h = Harness()
    h(Checkout(C1, prefetch=2))
    got = delivered(h.publish(5), C1)
    assert [d.index for d in got] == [2, 3]
    assert len(h.q.consumers[C1].checked_out) == 2
    a = h(Settle(C1, (0,)))
    assert [d.index for d in delivered(a)] == [4]
    a = h(Settle(C1, (1, 2)))
    assert [d.index for d in delivered(a)] == [5, 6]


def test_prefetch_zero_means_unlimited_capped_like_rabbitmq():
    h = Harness()
    a = h(Checkout(C1, prefetch=0))
    assert a.reply.credit == UNLIMITED_PREFETCH


def test_competing_consumers_round_robin_and_monotonic():
    h = Harness()
    h(Checkout(C1, prefetch=10))
    h(Checkout(C2, prefetch=10))
    out = h.publish(6)
    one, two = delivered(out, C1), delivered(out, C2)
    assert [d.index for d in one] == [3, 5, 7]
    assert [d.index for d in two] == [4, 6, 8]


def test_higher_priority_consumer_served_first_until_out_of_credit():
    h = Harness()
    h(Checkout(C1, prefetch=10, priority=0))
    h(Checkout(C2, prefetch=2, priority=5))
    out = h.publish(4)
    assert [d.index for d in delivered(out, C2)] == [3, 4]
    assert [d.index for d in delivered(out, C1)] == [5, 6]


def test_settle_of_unknown_consumer_or_id_is_ignored():
    h = Harness()
    assert h(Settle(C1, (7,))).reply == "ok"
    h(Checkout(C1, prefetch=1))
    h.publish()
    a = h(Settle(C1, (99,)))
    assert a.reply == "ok" and len(h.q.consumers[C1].checked_out) == 1


def test_cancel_keeps_unacked_until_settled_then_removes_consumer():
    h = Harness()
    h(Checkout(C1, prefetch=1))
    h.publish(2)
    a = h(Cancel(C1))
    assert a.reply == CancelReply(1)
    assert delivered(h.publish()) == []          # no more deliveries after cancel
    assert C1 in h.q.consumers
    h(Settle(C1, (0,)))
    assert C1 not in h.q.consumers
    assert h.q.messages_ready() == 2


def test_cancel_remove_returns_unacked_to_the_head():
    h = Harness()
    h(Checkout(C1, prefetch=1))
    h.publish(2)
    h(Cancel(C1, remove=True))
    a = h(Checkout(C2, prefetch=5))
    got = delivered(a, C2)
    assert [d.index for d in got] == [2, 3]
    assert got[0].acquired == 1 and got[1].acquired == 0


def test_cancel_unknown_consumer():
    assert Harness()(Cancel(C1)).reply == NOT_FOUND


def test_dequeue_unsettled_then_settle():
    h = Harness()
    h.publish(2)
    a = h(Dequeue(C3))
    assert isinstance(a.reply, DequeueReply) and a.reply.delivery.index == 1
    assert a.reply.ready == 1
    b = h(Dequeue(C3))
    assert b.reply.delivery.index == 2 and b.reply.delivery.msg_id == 1
    h(Settle(C3, (0, 1)))
    assert C3 not in h.q.consumers and h.q.messages_total() == 0


def test_dequeue_settled_and_empty():
    h = Harness()
    h.publish(1)
    a = h(Dequeue(C3, settled=True))
    assert a.reply.delivery.index == 1 and h.q.messages_total() == 0
    assert C3 not in h.q.consumers
    assert h(Dequeue(C3)).reply == DequeueReply(None, 0)


def test_credited_consumer_waits_for_credit_and_drains():
    h = Harness()
    a = h(Checkout(C1, credited=True))
    assert a.reply.credit == 0
    h.publish(3)
    a = h(Credit(C1, credit=2, delivery_count=0))
    assert [d.index for d in delivered(a)] == [2, 3]
    assert a.reply == CreditReply(delivery_count=2, credit=0, available=1, drain=False)
    a = h(Credit(C1, credit=5, delivery_count=2, drain=True))
    assert [d.index for d in delivered(a)] == [4]
    # drain: the remaining credit is used up by advancing the delivery count
    assert a.reply == CreditReply(delivery_count=7, credit=0, available=0, drain=True)


def test_resubscribe_updates_prefetch_counting_unacked():
    h = Harness()
    h(Checkout(C1, prefetch=2))
    h.publish(3)
    a = h(Checkout(C1, prefetch=4))
    assert a.reply.num_checked_out == 2 and a.reply.credit == 2
    assert [d.index for d in delivered(a)] == [4]


def test_tick_with_nothing_to_do():
    h = Harness()
    assert h(Tick()).effects == []
