"""Publisher confirms and de-duplication; at-least-once dead lettering (dlx sub-state)."""
from quorum.fifo import (DUPLICATE, Cancel, OUT_OF_SEQUENCE, Checkout, Confirm, ConsumerDown,
                         DeadLetter, Discard, DlxSettle, Enqueue, Monitor, QueueConfig,
                         ReleaseCursor, Settle, UpdateConfig)

from .harness import C1, Harness, effects

ALO = QueueConfig(name="q", dead_letter_exchange="dlx", dead_letter_strategy="at-least-once",
                  overflow="reject-publish", max_length=3)


def test_enqueue_confirms_and_monitors_the_publisher():
    h = Harness()
    a = h(Enqueue("ch-9", 1, 5, b"x"))
    assert Monitor("ch-9") in a.effects and effects(a, Confirm) == [Confirm("ch-9", (1,))]


def test_duplicate_resend_is_confirmed_not_enqueued_again():
    h = Harness()
    h(Enqueue("p", 1, 5))
    h(Enqueue("p", 2, 5))
    a = h(Enqueue("p", 1, 5))
    assert a.reply == DUPLICATE and effects(a, Confirm) == [Confirm("p", (1,))]
    assert h.q.messages_ready() == 2


def test_gap_in_sequence_is_not_enqueued():
    h = Harness()
    h(Enqueue("p", 1, 5))
    a = h(Enqueue("p", 3, 5))
    assert a.reply == OUT_OF_SEQUENCE and effects(a, Confirm) == []
    assert h.q.messages_ready() == 1


def test_sequences_start_at_one_so_a_lost_first_entry_is_a_gap():
    h = Harness()
    assert h(Enqueue("p", 2, 5)).reply == OUT_OF_SEQUENCE
    assert h(Enqueue("p", 1, 5)).reply == "ok"


def test_publisher_down_forgets_its_sequence():
    h = Harness()
    h(Enqueue("p", 1, 5))
    h(Enqueue("p", 2, 5))
    h(ConsumerDown("p"))
    assert "p" not in h.q.enqueuers
    assert h(Enqueue("p", 1, 5)).reply == "ok"


def test_untracked_enqueue_has_no_confirm():
    a = Harness()(Enqueue(None, None, 5))
    assert effects(a, Confirm) == []


def test_release_cursor_moves_as_messages_are_settled():
    h = Harness()
    h(Checkout(C1, prefetch=5))
    h.publish(2)
    assert effects(h(Settle(C1, (0,))), ReleaseCursor) == [ReleaseCursor(4, 3)]
    assert effects(h(Settle(C1, (1,))), ReleaseCursor) == [ReleaseCursor(5, None)]


def test_at_least_once_keeps_dead_messages_until_dlx_settle():
    h = Harness(ALO)
    h(Checkout(C1, prefetch=5))
    h.publish(2)
    a = h(Discard(C1, (0, 1)))
    (dl,) = effects(a, DeadLetter)
    assert dl.at_least_once and [m.dlx_id for m in dl.msgs] == [1, 2]
    assert len(h.q.dlx) == 2 and h.q.live.smallest() == 2
    # held dead-lettered messages count against the queue's length limit (3)
    h(Cancel(C1))
    assert [a.reply for a in h.publish(3)] == ["ok", "ok", "reject_publish"]
    a = h(DlxSettle((1, 2)))
    assert a.reply == 2 and len(h.q.dlx) == 0 and h.q.live.smallest() == 6
    assert h.publish(1)[0].reply == "ok"


def test_at_least_once_needs_reject_publish_else_at_most_once():
    cfg = QueueConfig(dead_letter_exchange="dlx", dead_letter_strategy="at-least-once")
    h = Harness(cfg)
    h(Checkout(C1, prefetch=5))
    h.publish(1)
    (dl,) = effects(h(Discard(C1, (0,))), DeadLetter)
    assert not dl.at_least_once and len(h.q.dlx) == 0


def test_switching_to_at_most_once_drops_held_messages():
    h = Harness(ALO)
    h(Checkout(C1, prefetch=5))
    h.publish(1)
    h(Discard(C1, (0,)))
    h(UpdateConfig(QueueConfig(dead_letter_exchange="dlx", overflow="drop-head")))
    assert len(h.q.dlx) == 0 and h.q.messages_total() == 0
