"""ConfirmTracker (server/confirms.py): every publish confirmed exactly once, coalesced safely.

Pure object, no sockets: a hypothesis model checks that the ack/nack frames sent, read the way
clients read them (multiple=true covers every unconfirmed tag <= N), confirm each sequence number
exactly once with the right outcome.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from amqp_broker.server.confirms import ConfirmTracker


def _client_view(frames, n):
    """Apply frames as pika/aio-pika do; return {seq: ack?} and fail on double confirms."""
    outcome: dict[int, bool] = {}
    for tag, multiple, ack in frames:
        tags = [t for t in range(1, tag + 1) if t not in outcome] if multiple else [tag]
        for t in tags:
            assert t not in outcome, f"tag {t} confirmed twice"
            outcome[t] = ack
    return outcome


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_every_publish_confirmed_once_with_its_outcome(data):
    frames = []
    tracker = ConfirmTracker(lambda t, m, a: frames.append((t, m, a)), lambda: None)
    n = data.draw(st.integers(1, 30))
    expected = {}
    waiting = []
    for _ in range(n):
        seq = tracker.next_seq()
        kind = data.draw(st.sampled_from(["now-ack", "now-nack", "wait"]))
        if kind == "wait":
            queues = data.draw(st.integers(1, 3))
            tracker.wait_for(seq, queues)
            oks = [True] * queues
            if data.draw(st.booleans()):
                oks[0] = data.draw(st.booleans())
            waiting.extend((seq, ok) for ok in oks)
            expected[seq] = all(oks)
        else:
            tracker.decide_now(seq, kind == "now-ack")
            expected[seq] = kind == "now-ack"
        if data.draw(st.booleans()):
            tracker.flush()
    order = data.draw(st.permutations(waiting))
    for seq, ok in order:
        tracker.settle(seq, ok)
        if data.draw(st.booleans()):
            tracker.flush()
    tracker.flush()
    assert _client_view(frames, n) == expected
    assert not tracker.has_unconfirmed()


def test_contiguous_acks_become_one_multiple_ack():
    frames = []
    tracker = ConfirmTracker(lambda t, m, a: frames.append((t, m, a)), lambda: None)
    for _ in range(100):
        tracker.decide_now(tracker.next_seq(), True)
    tracker.flush()
    assert frames == [(100, True, True)]
