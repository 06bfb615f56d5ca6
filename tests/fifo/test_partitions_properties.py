"""Hypothesis logs of a partitioned queue: consumers join, ack, nack, cancel, die and their
nodes go down while keyed messages arrive and leader time moves on.  After every step:
- one owner per partition: every unacked message is held by its partition's owner;
- per-key order: a partition's messages are handed out oldest first (the ready messages of a
  partition are in publish order and a delivery takes from the front);
- no loss, no duplicates: every published message is ready, unacked or acked, exactly once,
  and a message is delivered again only after it came back (redelivered, as after a forced
  handoff or a nack);
and the snapshot of the state restores to the same state.  At the end, with time run past
every rebalance and deadline, every partition is active while a consumer is up."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings, strategies as st

from quorum.fifo import (Cancel, Checkout, ConsumerDown, ConsumerKey, Deliver, Enqueue, Meta,
                         NodeDown, NodeUp, QueueConfig, Return, Settle, Tick, UpdateConfig,
                         apply, digest, init, restore, snapshot)

from .settings import EXAMPLES

KEYS = [ConsumerKey(f"c{i}", f"ch{i}", f"n{i % 2}") for i in range(4)]

ops = st.one_of(
    st.tuples(st.just("enq"), st.integers(0, 7)),
    st.tuples(st.just("enq"), st.integers(0, 7)),
    st.tuples(st.just("checkout"), st.integers(0, 3), st.integers(1, 4)),
    st.tuples(st.sampled_from(["ack", "ack", "ack", "nack"]), st.integers(0, 3),
              st.booleans()),
    st.tuples(st.sampled_from(["cancel", "down"]), st.integers(0, 3)),
    st.tuples(st.sampled_from(["nodedown", "nodeup"]), st.integers(0, 1)),
    st.tuples(st.just("tick")),
    st.tuples(st.just("config"), st.sampled_from([0, 20, 200]), st.sampled_from([0, 30])),
)
logs = st.lists(st.tuples(st.integers(0, 60), ops), max_size=80)
shapes = st.tuples(st.sampled_from([1, 2, 3, 8]), st.sampled_from([0, 20, 200]),
                   st.sampled_from([0, 30]))


def _command(op, q):
    kind = op[0]
    if kind == "enq":
        return Enqueue(None, None, 10, b"", partition=op[1])
    if kind == "checkout":
        return Checkout(KEYS[op[1]], prefetch=op[2])
    if kind in ("ack", "nack"):
        c = q.consumers.get(KEYS[op[1]])
        if c is None or not c.checked_out:
            return Tick()
        mids = list(c.checked_out)
        mids = mids[:1] if op[2] else mids     # the oldest one, or all it holds
        return Settle(c.key, tuple(mids)) if kind == "ack" else Return(c.key, tuple(mids))
    if kind == "cancel":
        return Cancel(KEYS[op[1]])
    if kind == "down":
        return ConsumerDown(KEYS[op[1]].pid)
    if kind == "nodedown":
        return NodeDown(f"n{op[1]}")
    if kind == "nodeup":
        return NodeUp(f"n{op[1]}")
    if kind == "config":
        return UpdateConfig(QueueConfig(name="pq", delivery_limit=None,
                                        handoff_timeout=op[1], rebalance_delay=op[2]))
    return Tick()


class Ledger:
    def __init__(self) -> None:
        self.published: list[int] = []
        self.acked: set[int] = set()
        self.delivered_once: set[int] = set()

    def check_step(self, q, cmd, meta, applied) -> None:
        if isinstance(cmd, Enqueue):
            self.published.append(meta.index)
        for e in applied.effects:
            if not isinstance(e, Deliver):
                continue
            last: dict[int, int] = {}
            for d in e.msgs:
                part = q.consumers[e.consumer].checked_out[d.msg_id].part
                # oldest first within a partition, in one Deliver and against what is left
                assert d.index > last.get(part, -1)
                last[part] = d.index
                rest = q.ready.parts[part]
                assert not rest or rest[0].index > d.index
                if d.acquired == 0:
                    assert d.index not in self.delivered_once, "delivered twice"
                    self.delivered_once.add(d.index)
                else:
                    assert d.redelivered

    def check_state(self, q) -> None:
        ps = q.parts
        held: dict[int, str] = {}
        for c in q.consumers.values():
            for m in c.checked_out.values():
                assert ps.parts[m.part].owner == c.key, "a holder that is not the owner"
                held[m.index] = "held"
        for dq in q.ready.parts:
            idx = [m.index for m in dq]
            assert idx == sorted(idx)
            for i in idx:
                assert i not in held
                held[i] = "ready"
        for i in self.acked:
            assert i not in held
        assert set(held) | self.acked == set(self.published)
        assert len(held) + len(self.acked) == len(self.published)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(shape=shapes, log=logs)
def test_partition_invariants_after_every_step(shape, log):
    n, timeout, delay = shape
    cfg = QueueConfig(name="pq", partitions=n, handoff_timeout=timeout, rebalance_delay=delay,
                      delivery_limit=None)
    q = init(cfg, 0)
    ledger = Ledger()
    ts = 0
    index = 0
    for dt, op in log:
        ts += dt
        index += 1
        cmd = _command(op, q)
        acked = []
        if isinstance(cmd, Settle) and cmd.consumer in q.consumers:
            c = q.consumers[cmd.consumer]
            acked = [c.checked_out[m].index for m in cmd.msg_ids]
        meta = Meta(index, 1, ts)
        applied = apply(meta, cmd, q)
        ledger.acked.update(acked)
        ledger.check_step(q, cmd, meta, applied)
        ledger.check_state(q)
        assert digest(restore(snapshot(q))) == digest(q)
    # liveness: past every rebalance and deadline, a consumer that is up gets partitions
    for later in (10_000, 20_000):   # the rebalance, then the deadline of what it moved
        index += 1
        apply(Meta(index, 1, ts + later), Tick(), q)
    if q.parts.members:
        assert all(p.state == "active" and p.owner in q.parts.members for p in q.parts.parts)
    ledger.check_state(q)
