"""Requeue, delivery count and delivery limit (RabbitMQ 4.x rules)."""
from quorum.fifo import (Checkout, ConsumerDown, DeadLetter, Discard, NodeDown, NodeUp,
                         QueueConfig, Requeue, Return, Settle, Unsent, return_commands,
                         suspected_nodes)

from .harness import C1, C2, Harness, delivered, effects

DLX = dict(dead_letter_exchange="dlx", dead_letter_routing_key="dead")


def _return_loop(h, key, times):
    """Return the consumer's only message `times` times; the deliveries seen."""
    seen = []
    for _ in range(times):
        (mid,) = list(h.q.consumers[key].checked_out)
        a = h(Return(key, (mid,)))
        seen.append(a)
    return seen


def test_redelivery_has_delivery_count_and_redelivered():
    h = Harness()
    h(Checkout(C1, prefetch=1))
    first = delivered(h.publish()[0])[0]
    assert first.acquired == 0 and not first.redelivered    # no x-delivery-count header
    again = delivered(h(Return(C1, (first.msg_id,))))[0]
    assert again.acquired == 1 and again.redelivered        # x-delivery-count: 1
    assert again.msg_id == 1 and again.index == first.index


def test_default_delivery_limit_is_20_then_dead_lettered():
    h = Harness(QueueConfig(name="q", **DLX))
    h(Checkout(C1, prefetch=1))
    h.publish()
    outs = _return_loop(h, C1, 21)
    # 1 first delivery + 20 redeliveries; the 21st return exceeds the limit
    assert [d.acquired for d in delivered(outs)] == list(range(1, 21))
    (dl,) = effects(outs, DeadLetter)
    assert dl.reason == "delivery_limit" and dl.exchange == "dlx"
    assert dl.routing_key == "dead" and dl.msgs[0].index == 2
    assert h.q.messages_total() == 0


def test_delivery_limit_without_dlx_drops():
    h = Harness(QueueConfig(delivery_limit=1))
    h(Checkout(C1, prefetch=1))
    h.publish()
    outs = _return_loop(h, C1, 2)
    assert effects(outs, DeadLetter) == [] and h.q.messages_total() == 0


def test_delivery_limit_zero_dead_letters_on_first_return():
    h = Harness(QueueConfig(delivery_limit=0, **DLX))
    h(Checkout(C1, prefetch=1))
    h.publish()
    (a,) = _return_loop(h, C1, 1)
    assert effects(a, DeadLetter)[0].reason == "delivery_limit"


def test_with_limit_returned_message_goes_back_near_the_head():
    h = Harness(QueueConfig(delivery_limit=5))
    h(Checkout(C1, prefetch=1))
    h.publish(3)
    a = h(Return(C1, (0,)))
    assert [d.index for d in delivered(a)] == [2]     # the same message again, first


def test_unlimited_returned_message_goes_to_the_tail():
    h = Harness(QueueConfig(delivery_limit=-1))
    assert h.q.config.delivery_limit is None
    h(Checkout(C1, prefetch=1))
    h.publish(3)
    seen = [d.index for d in delivered(h(Return(C1, (0,))))]
    for _ in range(3):
        (mid,) = list(h.q.consumers[C1].checked_out)
        seen += [d.index for d in delivered(h(Settle(C1, (mid,))))]
    assert seen == [3, 4, 2]


def test_unlimited_never_dead_letters():
    h = Harness(QueueConfig(delivery_limit=None, **DLX))
    h(Checkout(C1, prefetch=1))
    h.publish()
    outs = _return_loop(h, C1, 50)
    assert effects(outs, DeadLetter) == [] and delivered(outs)[-1].acquired == 50


def test_return_commands_become_requeues_when_unlimited():
    h = Harness(QueueConfig(delivery_limit=None))
    h(Checkout(C1, prefetch=2))
    h.publish(2)
    cmds = return_commands(h.q, Return(C1, (1, 0)), lambda i: b"payload-%d" % i)
    assert cmds == [Requeue(C1, 1, b"payload-3"), Requeue(C1, 0, b"payload-2")]
    limited = Harness()
    assert return_commands(limited.q, Return(C1, (0,)), bytes) == [Return(C1, (0,))]


def test_requeue_moves_message_to_a_new_log_index_at_the_tail():
    h = Harness(QueueConfig(delivery_limit=None))
    h(Checkout(C1, prefetch=1))
    h.publish(2)
    a = h(Requeue(C1, 0, b"m1"))        # applied at index 4
    d = delivered(a)[0]
    assert d.index == 3                 # the next message first
    assert h.q.live.smallest() == 3     # entry 2 is no longer referenced
    d2 = delivered(h(Settle(C1, (d.msg_id,))))
    assert [x.index for x in d2] == [4] and d2[0].acquired == 1
    assert h.q.live.smallest() == 4


def test_discard_dead_letters_rejected():
    h = Harness(QueueConfig(**DLX))
    h(Checkout(C1, prefetch=2))
    h.publish(2)
    a = h(Discard(C1, (1, 0)))
    (dl,) = effects(a, DeadLetter)
    assert dl.reason == "rejected" and [m.index for m in dl.msgs] == [3, 2]
    assert h.q.messages_total() == 0


def test_consumer_down_returns_to_the_head_and_counts():
    h = Harness()
    h(Checkout(C1, prefetch=2))
    h(Checkout(C2, prefetch=0, priority=-1))
    h.publish(3)     # C1 gets 3, 4; C2 (lower priority) gets 5
    a = h(ConsumerDown("ch-1"))
    got = delivered(a, C2)
    assert [d.index for d in got] == [3, 4]
    assert all(d.acquired == 1 and d.delivery_failed == 1 for d in got)
    assert C1 not in h.q.consumers


def test_node_down_suspects_consumers_and_node_up_restores():
    h = Harness()
    h(Checkout(C1, prefetch=1))
    h.publish(1)
    assert suspected_nodes(h.q) == set()
    a = h(NodeDown("node-a"))
    assert h.q.consumers[C1].status == "suspected_down"
    assert suspected_nodes(h.q) == {"node-a"}  # what a leader's audit sends NodeUp for
    assert h.q.messages_ready() == 1 and delivered(a) == []
    a = h(NodeUp("node-a"))
    assert [(d.index, d.acquired) for d in delivered(a, C1)] == [(2, 1)]
    assert suspected_nodes(h.q) == set()


def test_unsent_messages_go_back_to_the_head_uncounted_and_in_order():
    """A channel's lookahead (amqp_broker/queues/lookahead.py) gives back what it never
    sent: another consumer gets those messages next, in order, as first deliveries."""
    h = Harness(QueueConfig(name="q", delivery_limit=0))
    h(Checkout(C1, prefetch=4))
    out = delivered(h.publish(6))
    assert [d.acquired for d in out] == [0, 0, 0, 0]
    h(Checkout(C2, prefetch=10))      # gets messages 5 and 6
    h.publish(1)                      # and 7
    again = delivered(h(Unsent(C1, (out[2].msg_id, out[3].msg_id))))
    # no redelivered flag, no x-delivery-count, and not a return: a delivery limit of 0
    # would dead-letter a returned message at once
    assert [(d.index, d.acquired, d.redelivered) for d in again] == \
        [(out[2].index, 0, False), (out[3].index, 0, False)]
    assert {d.msg_id for d in again} <= set(h.q.consumers[C2].checked_out)
    assert len(h.q.consumers[C1].checked_out) == 2
    assert h.q.consumers[C1].credit == 0  # the lookahead ends with a Checkout of prefetch 2
    h(Checkout(C1, prefetch=2))
    assert h.q.consumers[C1].credit == 0 and h.q.messages_total() == 7
    # alone, a consumer gets its unsent messages back first, before later ones
    h2 = Harness()
    h2(Checkout(C1, prefetch=3))
    first = delivered(h2.publish(5))
    h2(Settle(C1, (first[0].msg_id,)))  # the 4th goes out
    assert delivered(h2(Unsent(C1, (first[1].msg_id, first[2].msg_id)))) == []
    back = delivered(h2(Checkout(C1, prefetch=3)))
    assert [(d.index, d.acquired) for d in back] == \
        [(first[1].index, 0), (first[2].index, 0)]


def test_a_channel_closing_with_unsent_messages_keeps_the_queue_order():
    """The channel gives back what it never sent, then goes (ConsumerDown): the messages it
    was sent come back counted and first, the unsent ones after them, uncounted, then the
    rest, as in a queue that had never handed out the unsent ones."""
    h = Harness()
    h(Checkout(C1, prefetch=4))       # prefetch 2 and a lookahead of 2
    out = delivered(h.publish(6))
    h(Unsent(C1, (out[2].msg_id, out[3].msg_id)))
    h(ConsumerDown(C1.pid))
    again = delivered(h(Checkout(C2, prefetch=10)))
    assert [(d.index, d.acquired) for d in again] == \
        [(out[0].index, 1), (out[1].index, 1), (out[2].index, 0), (out[3].index, 0),
         (out[2].index + 2, 0), (out[2].index + 3, 0)]
