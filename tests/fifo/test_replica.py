"""quorum/replica.py, the driver's IO-free apply path, with the real queue machines: which
effects a leader and a follower keep, replies per entry, what installing a received snapshot
gives back, and the compaction gate."""

from __future__ import annotations

from amqp_broker.queues.message import Message
from amqp_broker.queues.quorum_machine import QuorumMachine, encode_payload
from quorum.fifo import (Checkout, Confirm, ConsumerKey, Deliver, Delivery, Dequeue, Enqueue, FifoMachine,
                         QueueConfig, encode_command)
from quorum.raft import Entry, EntryKind
from quorum.replica import (Forward, encode_forward, apply_entries, compaction_due, compaction_point,
                            install_snapshot)

KEY = ConsumerKey("ctag", "ch1", "n2")


def _entries(cmds) -> list[Entry]:
    return [Entry(i + 1, 1, EntryKind.NORMAL, encode_command(c), 1000 + i)
            for i, c in enumerate(cmds)]


def _enqueue(seq: int) -> Enqueue:
    body = b"m%d" % seq
    msg = Message.from_publish("", "q", b"\0\0", body)
    return Enqueue("pub", seq, len(body), encode_payload(msg))


def test_a_leader_keeps_every_effect_a_follower_only_the_local_ones():
    m = FifoMachine(QueueConfig("q"))
    log = _entries([Checkout(KEY, 5), _enqueue(1)])
    _, lead = apply_entries(m, m.init(), log, True)
    _, follow = apply_entries(m, m.init(), log, False)
    # deliveries (run on the consumer's node) and confirms (answered on the publisher's)
    assert [type(e) for e in follow] == [Deliver, Confirm]
    assert Confirm("pub", (1,)) in lead
    assert [e for e in lead if type(e) in (Deliver, Confirm)] == follow


def test_every_entry_gets_its_reply_in_order_a_noop_none():
    m = FifoMachine(QueueConfig("q"))
    enq = encode_command(_enqueue(1))
    log = [Entry(1, 1, EntryKind.NORMAL, enq), Entry(2, 1, EntryKind.NOOP, b""),
           Entry(3, 1, EntryKind.NORMAL, enq)]  # a resend after a leader change
    replies = []
    apply_entries(m, m.init(), log, False, lambda e, r, fw: replies.append((e.index, r, fw)))
    assert replies == [(1, "ok", None), (2, None, None), (3, "duplicate", None)]


def test_a_forwarded_command_is_applied_and_its_envelope_handed_to_the_reply_hook():
    m = FifoMachine(QueueConfig("q"))
    env = Forward("node-b", 7, encode_command(_enqueue(1)))
    log = [Entry(1, 1, EntryKind.FORWARDED, encode_forward(env))]
    replies = []
    state, _ = apply_entries(m, m.init(), log, True, lambda e, r, fw: replies.append((r, fw)))
    assert replies == [("ok", env)] and len(state.ready) == 1


def test_a_received_snapshot_gives_back_the_deliveries_it_covers():
    for m in (FifoMachine(QueueConfig("q")), QuorumMachine(QueueConfig("q"))):
        state, _ = apply_entries(m, m.init(), _entries([Checkout(KEY, 5), _enqueue(1)]), False)
        data = m.snapshot(state)
        restored, effects = install_snapshot(m, data)
        assert effects == [Deliver(KEY, (Delivery(0, 2, 2, 0, 0),))]
        assert m.snapshot(restored) == data


def test_compaction_is_due_after_every_entries_unless_the_machine_says_not_yet():
    plain = FifoMachine(QueueConfig("q"))
    assert not compaction_due(plain, plain.init(), 24, 25)
    assert compaction_due(plain, plain.init(), 25, 25)
    assert compaction_point(plain, plain.init(), 25, 25, 25) == (25, plain.snapshot(plain.init()))


def _gets(first: int, n: int) -> list[Entry]:
    return [Entry(first + i, 1, EntryKind.NORMAL, encode_command(Dequeue(KEY, settled=True)),
                  2000) for i in range(n)]


def test_the_release_cursor_waits_until_no_live_message_is_below_it():
    m = QuorumMachine(QueueConfig("q"))
    log = _entries([_enqueue(i) for i in range(1, 11)])
    state, _ = apply_entries(m, m.init(), log, True)
    assert compaction_point(m, state, 10, 24, 25) is None  # not enough entries yet
    assert compaction_point(m, state, 10, 30, 25) is None  # ten live messages: held back
    held = m.pending
    assert held is not None and held[0] == 10
    more = [Entry(11, 1, EntryKind.NORMAL, encode_command(_enqueue(11)), 1500)] + _gets(12, 10)
    state, _ = apply_entries(m, state, more, True)
    # 1..10 are settled, 11 is live: the snapshot at 10 goes, and replaying 11..21 on it
    # gives the state of the full replay
    assert state.fifo.live.smallest() == 11
    point = compaction_point(m, state, 21, 31, 25)
    assert point == held
    again, _ = apply_entries(m, m.restore(point[1]), more, True)
    assert m.snapshot(again) == m.snapshot(state)


def test_an_empty_queue_compacts_at_once_after_every_entries_or_many_bytes():
    m = QuorumMachine(QueueConfig("q"))
    state, _ = apply_entries(m, m.init(), _entries([_enqueue(1)]) + _gets(2, 1), True)
    assert compaction_point(m, state, 2, 2, 25) is None  # empty, but little went through
    assert compaction_point(m, state, 2, 25, 25)[0] == 2
    big = Message.from_publish("", "q", b"\0\0", b"x" * (17 << 20))
    enq = Enqueue("pub", 2, big.size, encode_payload(big))
    log = [Entry(3, 1, EntryKind.NORMAL, encode_command(enq), 3000)] + _gets(4, 1)
    state, _ = apply_entries(m, state, log, True)
    assert compaction_point(m, state, 4, 2, 25)[0] == 4  # a drained big backlog: at once
