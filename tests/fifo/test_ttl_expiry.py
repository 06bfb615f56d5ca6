"""Message TTL (queue x-message-ttl and per-message expiration) and queue expiry,
all from the leader timestamps in `meta`."""
from quorum.fifo import (Cancel, Checkout, ConsumerDown, DeadLetter, Dequeue, QueueConfig,
                         QueueExpired, SetTimer, Tick, leader_effects)

from .harness import C1, Harness, delivered, effects

DLX = dict(dead_letter_exchange="dlx")


def test_queue_ttl_expires_at_the_head_and_dead_letters():
    h = Harness(QueueConfig(msg_ttl=100, **DLX), ts=1000)
    a = h.publish()[0]
    assert effects(a, SetTimer) == [SetTimer(1100)]
    h.publish(ts=1050)
    a = h(Tick(), ts=1100)
    (dl,) = effects(a, DeadLetter)
    assert dl.reason == "expired" and [m.index for m in dl.msgs] == [1]
    assert effects(a, SetTimer) == [SetTimer(1150)]
    a = h(Checkout(C1, prefetch=5), ts=1149)
    assert [d.index for d in delivered(a)] == [2]


def test_per_message_ttl_and_the_lower_of_the_two_wins():
    h = Harness(QueueConfig(msg_ttl=500), ts=0)
    h.publish(ttl=50)
    h.publish(ttl=1000)
    assert [m.expiry for m in h.q.ready.lo] == [50, 500]


def test_expiry_is_only_checked_at_the_head():
    h = Harness(QueueConfig(**DLX), ts=0)
    h.publish(ttl=1000)
    h.publish(ttl=10)
    a = h(Tick(), ts=20)
    assert effects(a, DeadLetter) == []      # the short-lived one waits behind the head
    a = h(Tick(), ts=1000)
    assert [m.index for m in effects(a, DeadLetter)[0].msgs] == [1, 2]


def test_ttl_zero_is_delivered_only_if_a_consumer_is_ready():
    h = Harness(ts=0)
    h(Checkout(C1, prefetch=1))
    a = h.publish(ttl=0)[0]
    assert len(delivered(a)) == 1
    h.publish(ttl=0)                          # no credit: stays ready...
    a = h(Tick(), ts=1)                       # ...and expires a millisecond later
    assert h.q.messages_ready() == 0 and effects(a, DeadLetter) == []   # no DLX: dropped


def test_expired_message_is_not_given_to_a_later_consumer_or_get():
    h = Harness(ts=0)
    h.publish(ttl=10)
    a = h(Dequeue(C1), ts=10)
    assert a.reply.delivery is None


def test_queue_expires_when_unused_using_leader_time():
    h = Harness(QueueConfig(name="q", expires=1000), ts=0)
    a = h(Tick(), ts=1000)
    assert effects(a, QueueExpired) == []     # expires strictly after last_active + x
    assert effects(h(Tick(), ts=1001), QueueExpired) == [QueueExpired("q")]


def test_consumers_keep_the_queue_alive_and_last_activity_restarts_the_lease():
    h = Harness(QueueConfig(name="q", expires=1000), ts=0)
    assert leader_effects(h.q)[0] == SetTimer(1001)     # a new leader arms the timer
    assert effects(h(Tick()), SetTimer) == [SetTimer(1001)]
    a = h(Checkout(C1, prefetch=1), ts=10)
    assert effects(a, SetTimer) == [SetTimer(None)]
    assert effects(h(Tick(), ts=5000), QueueExpired) == []
    a = h(ConsumerDown("ch-1"), ts=6000)
    assert effects(a, SetTimer) == [SetTimer(7001)]
    assert effects(h(Tick(), ts=7001), QueueExpired) == [QueueExpired("q")]


def test_cancelled_consumer_leaving_restarts_the_lease():
    h = Harness(QueueConfig(name="q", expires=100), ts=0)
    h(Checkout(C1, prefetch=1), ts=0)
    h(Cancel(C1), ts=50)
    assert effects(h(Tick(), ts=150), QueueExpired) == []
    assert effects(h(Tick(), ts=151), QueueExpired) == [QueueExpired("q")]
