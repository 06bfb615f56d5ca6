"""x-max-length / x-max-length-bytes with overflow drop-head, reject-publish and
reject-publish-dlx (treated as drop-head)."""
from quorum.fifo import (REJECTED, Checkout, Confirm, DeadLetter, Dequeue, QueueConfig,
                         RejectPublish, Settle, UpdateConfig, restore, snapshot)

from .harness import C1, Harness, effects

DLX = dict(dead_letter_exchange="dlx")


def test_drop_head_dead_letters_the_oldest_with_reason_maxlen():
    h = Harness(QueueConfig(max_length=2, **DLX))
    outs = h.publish(3)
    (dl,) = effects(outs, DeadLetter)
    assert dl.reason == "maxlen" and [m.index for m in dl.msgs] == [1]
    assert [m.index for m in h.q.ready.lo] == [2, 3]
    assert effects(outs[2], Confirm)                    # the new one is still confirmed


def test_drop_head_by_bytes():
    h = Harness(QueueConfig(max_bytes=25, **DLX))
    h.publish(2, size=10)
    a = h.publish(1, size=10)[0]
    assert [m.index for m in effects(a, DeadLetter)[0].msgs] == [1]
    assert h.q.ready.bytes == 20


def test_limit_counts_ready_messages_not_unacked_ones():
    h = Harness(QueueConfig(max_length=1, **DLX))
    h(Checkout(C1, prefetch=2))
    outs = h.publish(3)
    assert effects(outs, DeadLetter) == []
    assert h.q.messages_checked_out() == 2 and h.q.messages_ready() == 1


def test_reject_publish_nacks_once_over_the_limit():
    h = Harness(QueueConfig(max_length=2, overflow="reject-publish"))
    outs = h.publish(4)
    # like RabbitMQ the check is "already over the limit": max-length + 1 get in
    assert [a.reply for a in outs] == ["ok", "ok", "ok", REJECTED]
    assert effects(outs[3], RejectPublish) == [RejectPublish("pub", (4,))]
    assert effects(outs[3], Confirm) == [] and h.q.messages_ready() == 3


def test_reject_publish_accepts_again_once_consumed():
    h = Harness(QueueConfig(max_length=1, overflow="reject-publish"))
    h.publish(3)
    h(Checkout(C1, prefetch=10))
    h(Settle(C1, (0, 1)))
    assert h.publish()[0].reply == "ok"


def test_reject_publish_stays_blocked_until_80_percent():
    # RabbitMQ 3.10 (measured): max-length 2, m1..m3 confirmed, m4 nacked; after one get m5
    # is still nacked (2 ready > 1 = 80% of 2); after another get m6 is accepted.
    h = Harness(QueueConfig(max_length=2, overflow="reject-publish"))
    assert [a.reply for a in h.publish(4)] == ["ok", "ok", "ok", REJECTED]
    h(Checkout(C1, prefetch=10))   # takes all three: 0 ready, unblocked at once
    assert h.publish()[0].reply == "ok"
    h2 = Harness(QueueConfig(max_length=2, overflow="reject-publish"))
    h2.publish(3)
    h2(Dequeue(C1, settled=True))
    assert h2.q.publish_blocked and h2.publish()[0].reply == REJECTED
    h2(Dequeue(C1, settled=True))
    assert not h2.q.publish_blocked and h2.publish()[0].reply == "ok"
    assert restore(snapshot(h2.q)).publish_blocked == h2.q.publish_blocked


def test_reject_publish_dlx_behaves_as_drop_head():
    h = Harness(QueueConfig(max_length=1, overflow="reject-publish-dlx", **DLX))
    outs = h.publish(2)
    assert [a.reply for a in outs] == ["ok", "ok"]
    assert effects(outs, DeadLetter)[0].reason == "maxlen"


def test_lowering_the_limit_by_policy_drops_at_once():
    h = Harness(QueueConfig(**DLX))
    h.publish(5)
    a = h(UpdateConfig(QueueConfig(max_length=2, **DLX)))
    assert [m.index for m in effects(a, DeadLetter)[0].msgs] == [1, 2, 3]
    assert h.q.messages_ready() == 2
