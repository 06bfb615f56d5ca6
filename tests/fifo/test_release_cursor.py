"""The quorum queue's release cursor (`QuorumMachine.release_cursor` through
`quorum.replica.compaction_point`), over random logs of enqueues (small and large bodies),
gets, settles, returns, requeues and discards:
- the log is never compacted past a live message: every compaction point is below the oldest
  message still held (ready, checked out or held for at-least-once dead lettering);
- the snapshot at a compaction point, plus the entries after it, replays to the very state of
  the full replay, and every live message's body is read back from those entries alone
  (snapshots carry no bodies);
- whatever the sizes, the read cache stays within its bounds;
- a checkpoint (`QuorumMachine.checkpoint` through `quorum.replica.checkpoint_due`, asked when
  no compaction happens), plus the entries after it, replays to that same state; and once the
  release floor (`QuorumMachine.release_floor`) reaches a checkpoint, compacting to it (the
  checkpoint becomes the snapshot) passes no live message either, and is checked as above.
"""

from __future__ import annotations

from hypothesis import event, given, settings, strategies as st

from amqp_broker.queues.message import Message
from amqp_broker.queues import quorum_machine
from amqp_broker.queues.quorum_machine import QuorumMachine, encode_payload
from quorum.fifo import (ConsumerKey, Dequeue, Discard, DlxSettle, Enqueue, Meta, QueueConfig, Return,
                         Settle, encode_command, return_commands)
from quorum.replica import checkpoint_due, compaction_point, release_floor

from .settings import EXAMPLES

GETTER = ConsumerKey("", "getter", "n")
EVERY = 6

_ops = st.lists(st.one_of(
    st.tuples(st.just("enq"), st.sampled_from([1, 16, 1024, 200_000])),
    st.tuples(st.just("enq"), st.sampled_from([1, 16])),
    st.tuples(st.just("get"), st.booleans()),
    st.tuples(st.just("get"), st.just(True)),
    st.tuples(st.just("settle"), st.integers(0, 3)),
    st.tuples(st.just("settle_all"), st.just(0)),
    st.tuples(st.just("return"), st.integers(0, 3)),
    st.tuples(st.just("discard"), st.integers(0, 3)),
    st.tuples(st.just("dlx_settle"), st.just(0)),
), min_size=30, max_size=150)


def _config(draw_limit: bool) -> QueueConfig:
    # unlimited delivery limit: returns become Requeue entries (a copy at a new index)
    return QueueConfig(name="q", delivery_limit=None if draw_limit else 5,
                       dead_letter_exchange="dlx", dead_letter_strategy="at-least-once",
                       overflow="reject-publish")


@settings(max_examples=EXAMPLES * 3, deadline=None)
@given(_ops, st.booleans())
def test_compaction_never_passes_a_live_message_and_snapshot_plus_tail_replays(ops, unlimited):
    every = quorum_machine.CHECKPOINT_EVERY
    quorum_machine.CHECKPOINT_EVERY = 4  # checkpoints within these short logs
    try:
        _compactions_and_checkpoints(ops, unlimited)
    finally:
        quorum_machine.CHECKPOINT_EVERY = every


def _compactions_and_checkpoints(ops, unlimited) -> None:
    config = _config(unlimited)
    log: dict[int, bytes] = {}
    m = QuorumMachine(config, reader=log.get, cache_bytes=300_000, cache_count=4)
    state = m.init()
    snap_index = 0
    snaps: list[tuple[int, bytes]] = []
    checkpoints: list[tuple[int, bytes]] = []
    promoted: list[int] = []
    seq = 0

    def propose(cmd) -> None:
        nonlocal state, snap_index
        index = len(log) + 1
        log[index] = encode_command(cmd)
        state, _, _ = m.apply(Meta(index, 1, index * 10), m.decode(log[index]), state)
        point = compaction_point(m, state, index, index - snap_index, EVERY)
        if point is not None:
            assert point[0] > snap_index
            live = state.fifo.live.live()
            assert not live or min(live) > point[0], "compacted past a live message"
            snap_index = point[0]
            snaps.append(point)
        else:
            # as the driver does: compact to the newest checkpoint the floor allows, if any
            floor = release_floor(m, state)
            usable = [cp for cp in checkpoints if snap_index < cp[0] <= (floor or 0)]
            if usable:
                live = state.fifo.live.live()
                assert not live or min(live) > usable[-1][0], "promoted past a live message"
                snap_index = usable[-1][0]
                snaps.append(usable[-1])
                promoted.append(snap_index)
            since = index - max(snap_index, checkpoints[-1][0] if checkpoints else 0)
            data = checkpoint_due(m, state, since)
            if data is not None:
                checkpoints.append((index, data))
        assert m.cache.bytes <= m.cache.max_bytes and len(m.cache.items) <= m.cache.max_count

    for op, arg in ops:
        checked = state.fifo.consumers.get(GETTER)
        held = sorted(checked.checked_out) if checked is not None else []
        if op == "enq":
            seq += 1
            msg = Message.from_publish("", "q", b"\0\0", b"%d:" % seq + b"x" * arg)
            propose(Enqueue("pub", seq, msg.size, encode_payload(msg)))
        elif op == "get":
            propose(Dequeue(GETTER, settled=arg))
        elif held and op == "settle_all":
            propose(Settle(GETTER, tuple(held)))
        elif op == "dlx_settle" and state.fifo.dlx.held:
            propose(DlxSettle(tuple(state.fifo.dlx.held)))
        elif held and op == "settle":
            propose(Settle(GETTER, (held[arg % len(held)],)))
        elif held and op == "discard":
            propose(Discard(GETTER, (held[arg % len(held)],)))
        elif held and op == "return":
            ret = Return(GETTER, (held[arg % len(held)],))
            for cmd in return_commands(state.fifo, ret, lambda i: m.payload(state, i)):
                propose(cmd)

    event(f"compactions: {min(len(snaps), 3)}+" if len(snaps) >= 3 else f"compactions: {len(snaps)}")
    full = m.snapshot(state)
    live = state.fifo.live.live()
    for index, data in snaps:
        # a replica that restarts from this snapshot: only the entries after it exist
        tail = {i: d for i, d in log.items() if i > index}
        fresh = QuorumMachine(config, reader=tail.get, range_reader=lambda lo, hi: [
            (i, tail[i]) for i in range(lo, hi + 1) if i in tail])
        again = fresh.restore(data)
        for i in range(index + 1, len(log) + 1):
            again, _, _ = fresh.apply(Meta(i, 1, i * 10), fresh.decode(log[i]), again)
        assert fresh.snapshot(again) == full
        fresh.cache.clear()
        expected = [m.body(state, i, keep=True).body for i in live]
        for i, want in zip(live, expected):
            body = fresh.body(again, i, keep=True)
            assert body is not None and body.body == want
        # a delivery's batch read (one range for the cache misses) finds the same
        assert [b.body for b in fresh.bodies(again, live)] == expected
    event(f"checkpoints: {min(len(checkpoints), 3)}")
    event(f"compactions to a checkpoint: {min(len(promoted), 2)}")
    for index, data in checkpoints:
        # a restart from the checkpoint: the whole log is still there, only the entries after
        # it are applied
        fresh = QuorumMachine(config, reader=log.get)
        again = fresh.restore(data)
        for i in range(index + 1, len(log) + 1):
            again, _, _ = fresh.apply(Meta(i, 1, i * 10), fresh.decode(log[i]), again)
        assert fresh.snapshot(again) == full
