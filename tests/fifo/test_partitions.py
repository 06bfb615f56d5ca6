"""Partitioned queues in the fifo machine: one table per rule (joins, leaves, timeouts, a
leader change mid-handoff, more consumers than partitions), each row a command list in and
the partition map / deliveries asserted."""
from __future__ import annotations

import pytest

from quorum.fifo import (Cancel, Checkout, ConsumerDown, ConsumerKey, Enqueue, NodeDown,
                         NodeUp, QueueConfig, Return, Settle, Tick, UNSUPPORTED, Dequeue,
                         Meta, apply, partition_overview, handoff_counts, restore, snapshot)
from quorum.fifo.partitions import Partitions, assignment

from .harness import Harness, delivered

A = ConsumerKey("a", "ch-a", "n1")
B = ConsumerKey("b", "ch-b", "n1")
C = ConsumerKey("c", "ch-c", "n2")
D = ConsumerKey("d", "ch-d", "n2")


def harness(n=4, timeout=100, delay=0) -> Harness:
    return Harness(QueueConfig(name="pq", partitions=n, handoff_timeout=timeout,
                               rebalance_delay=delay, delivery_limit=None))


def owners(h: Harness) -> list:
    return [p["owner"].tag if p["owner"] else None for p in partition_overview(h.q)]


def states(h: Harness) -> list:
    return [p["state"] for p in partition_overview(h.q)]


def enq(h: Harness, part: int, ts=None):
    h.seq += 1
    return h(Enqueue("pub", h.seq, 10, b"m", partition=part), ts)


def held_parts(h: Harness, key) -> list[int]:
    c = h.q.consumers.get(key)
    return sorted(m.part for m in c.checked_out.values()) if c else []


# joins ------------------------------------------------------------------------------------

JOINS = [
    # (partitions, consumers joining in order, expected owners by tag)
    (4, [A], ["a", "a", "a", "a"]),
    (4, [A, B], ["a", "a", "b", "b"]),
    (4, [A, B, C], ["a", "a", "b", "c"]),
    (3, [A, B], ["a", "a", "b"]),
    (1, [A, B], ["a", None]),          # a second consumer: standby
]


@pytest.mark.parametrize("n,joins,expected", JOINS)
def test_joins_balance_and_move_only_the_surplus(n, joins, expected):
    h = harness(n)
    for k in joins:
        h(Checkout(k, prefetch=10))
    got = owners(h)[:len(expected)] if n > 1 else owners(h)
    if n == 1:
        assert got == ["a"]
        assert h.q.parts.members == [A, B]
    else:
        assert sorted(got, key=str) == sorted(expected, key=str)
        counts = {t: got.count(t) for t in got}
        assert max(counts.values()) - min(counts.values()) <= 1
    assert all(s == "active" for s in states(h))


def test_join_moves_partitions_only_after_old_owner_acks():
    h = harness(2, timeout=1000)
    h(Checkout(A, prefetch=10))
    enq(h, 0)
    enq(h, 1)
    assert held_parts(h, A) == [0, 1]
    h(Checkout(B, prefetch=10))
    moved = [i for i, p in enumerate(h.q.parts.parts) if p.state == "handing-off"]
    assert len(moved) == 1 and h.q.parts.parts[moved[0]].target == B
    # more messages of the moving partition are held back (step 1)
    a = enq(h, moved[0])
    assert delivered(a) == []
    # the owner acks what it held of it (step 2): B gets the partition (steps 3, 4)
    mid = next(i for i, m in h.q.consumers[A].checked_out.items() if m.part == moved[0])
    a = h(Settle(A, (mid,)))
    assert [d.index for d in delivered(a, B)] == [h.index - 1]
    assert h.q.parts.parts[moved[0]].owner == B
    assert handoff_counts(h.q) == {"started": 1, "graceful": 1, "forced": 0}


def test_rebalance_delay_coalesces_a_burst_of_joins():
    h = harness(4, delay=50)
    h(Checkout(A, prefetch=10), ts=1000)
    assert owners(h) == [None] * 4
    h(Checkout(B, prefetch=10), ts=1020)
    h(Checkout(C, prefetch=10), ts=1040)
    assert owners(h) == [None] * 4
    h(Tick(), ts=1050)
    assert None not in owners(h) and set(owners(h)) == {"a", "b", "c"}
    assert handoff_counts(h.q)["started"] == 0   # one assignment, no handoff


# leaves -----------------------------------------------------------------------------------

LEAVES = [
    # how the owner goes, whether it may still ack
    ("cancel", True),
    ("channel-close", False),
    ("node-down", False),
]


@pytest.mark.parametrize("how,may_ack", LEAVES)
def test_leave_hands_partitions_to_the_remaining_consumer(how, may_ack):
    h = harness(2, timeout=1000)
    h(Checkout(A, prefetch=10))
    h(Checkout(B, prefetch=10))
    a_part = owners(h).index("a")
    enq(h, a_part)
    assert held_parts(h, A) == [a_part]
    if how == "cancel":
        h(Cancel(A))
    elif how == "channel-close":
        h(ConsumerDown("ch-a"))
    else:
        h(NodeDown("n1"))
    if how == "node-down":          # B is on n1 too: nobody is left
        assert owners(h) == [None, None]
        h(NodeUp("n1"))
        assert set(owners(h)) == {"a", "b"}
        return
    if may_ack:
        # paused while A may still ack
        assert h.q.parts.parts[a_part].state == "handing-off"
        mid = next(iter(h.q.consumers[A].checked_out))
        h(Settle(A, (mid,)))
    assert owners(h) == ["b", "b"]
    enq(h, a_part)
    assert held_parts(h, B) == [a_part] * (1 if may_ack else 2)


# timeouts ---------------------------------------------------------------------------------

TIMEOUTS = [
    # handoff timeout, time of the tick after the join, forced?
    (100, 1050, False),
    (100, 1100, True),
    (0, 1000, True),
]


@pytest.mark.parametrize("timeout,tick_at,forced", TIMEOUTS)
def test_deadline_returns_unacked_in_order_redelivered(timeout, tick_at, forced):
    h = harness(1, timeout=timeout)
    h(Checkout(A, prefetch=10), ts=1000)
    for _ in range(3):
        enq(h, 0, ts=1000)
    first = [m.index for m in h.q.consumers[A].checked_out.values()]
    h(Cancel(A), ts=1000)
    h(Checkout(B, prefetch=10), ts=1000)
    a = h(Tick(), ts=tick_at)
    if not forced:
        assert h.q.parts.parts[0].state == "handing-off"
        assert delivered(a) == []
        return
    # (timeout 0: forced at once, when B joined)
    got = [d for e in _all_delivers(h, B) for d in e.msgs]
    assert [d.index for d in got] == first
    assert all(d.redelivered for d in got)
    assert handoff_counts(h.q)["forced"] == 1
    assert A not in h.q.consumers     # the cancelled consumer had nothing left


def _all_delivers(h: Harness, key):
    # replay the log on a fresh queue and collect the Deliver effects to `key`
    from quorum.fifo import Deliver, init
    q = init(h.config, h.created)
    out = []
    for meta, cmd in h.log:
        out += [e for e in apply(meta, cmd, q).effects
                if isinstance(e, Deliver) and e.consumer == key]
    return out


def test_a_late_ack_after_a_forced_handoff_is_ignored():
    h = harness(1, timeout=10)
    h(Checkout(A, prefetch=10), ts=1000)
    enq(h, 0, ts=1000)
    mid = next(iter(h.q.consumers[A].checked_out))
    h(Checkout(B, prefetch=10), ts=1000)   # standby: one partition
    h(Cancel(A), ts=1000)
    h(Tick(), ts=1010)
    assert held_parts(h, B) == [0]
    h(Settle(A, (mid,)), ts=1011)
    assert held_parts(h, B) == [0]


def test_nack_requeue_keeps_key_order():
    h = harness(1)
    h(Checkout(A, prefetch=2))
    for _ in range(4):
        enq(h, 0)
    mids = list(h.q.consumers[A].checked_out)
    idx = [m.index for m in h.q.consumers[A].checked_out.values()]
    a = h(Return(A, (mids[1], mids[0])))   # a nack of both, listed out of order
    assert [d.index for d in delivered(a, A)] == idx   # 1 and 2 again, before 3 and 4


# a leader change mid-handoff ---------------------------------------------------------------

def test_leader_change_mid_handoff_keeps_the_deadline():
    """A new leader restores the same state (snapshot or log) and re-arms the timer from it:
    the deadline is leader time in the state, not a local timer."""
    from quorum.fifo import leader_effects, SetTimer
    h = harness(2, timeout=500)
    h(Checkout(A, prefetch=10), ts=1000)
    enq(h, 0, ts=1000)
    enq(h, 1, ts=1000)
    h(Checkout(B, prefetch=10), ts=1100)
    moving = [i for i, p in enumerate(h.q.parts.parts) if p.state == "handing-off"]
    assert len(moving) == 1 and h.q.parts.parts[moving[0]].deadline == 1600
    new_leader = restore(snapshot(h.q))
    assert [e for e in leader_effects(new_leader) if isinstance(e, SetTimer)] == [SetTimer(1600)]
    # the new leader's Tick, applied on both replicas, forces the same handoff
    a1 = apply(Meta(h.index + 1, 2, 1600), Tick(), h.q)
    a2 = apply(Meta(h.index + 1, 2, 1600), Tick(), new_leader)
    assert a1 == a2 and snapshot(h.q) == snapshot(new_leader)
    assert held_parts(h, B) == [moving[0]]
    assert held_parts(h, A) == [1 - moving[0]]


# more consumers than partitions ------------------------------------------------------------

def test_standby_takes_over_when_an_owner_leaves():
    h = harness(2)
    for k in (A, B, C, D):
        h(Checkout(k, prefetch=5))
    assert sorted(filter(None, owners(h))) == ["a", "b"]
    h(ConsumerDown("ch-a"))
    got = owners(h)
    assert "a" not in got and None not in got and got.count("b") == 1


def test_basic_get_is_refused():
    h = harness(2)
    assert h(Dequeue(A)).reply == UNSUPPORTED


ASSIGN = [
    # partitions, members, current intended owners, expected counts per member
    (16, [A, B, C, D], [None] * 16, {A: 4, B: 4, C: 4, D: 4}),
    (5, [A, B], [A] * 5, {A: 3, B: 2}),
    (2, [A, B, C], [C, C], {C: 1}),
]


@pytest.mark.parametrize("n,members,current,counts", ASSIGN)
def test_assignment_is_balanced_and_sticky(n, members, current, counts):
    ps = Partitions(n)
    ps.members = members
    for p, k in zip(ps.parts, current):
        p.owner, p.state = k, ("active" if k else "unassigned")
    out = assignment(ps)
    got = {k: out.count(k) for k in members if out.count(k)}
    for k, v in counts.items():
        assert got[k] == v
    # sticky: a partition stays with its owner while that owner is within its quota
    kept = sum(1 for k0, k1 in zip(current, out) if k0 is not None and k0 == k1)
    assert kept == min(sum(1 for k in current if k), sum(
        min(current.count(k), got.get(k, 0)) for k in members))


def test_codec_carries_the_partition_and_the_partition_settings():
    from quorum.fifo import UpdateConfig, decode_command, encode_command
    e = Enqueue("pub", 1, 10, b"x", partition=7)
    assert decode_command(encode_command(e)).partition == 7
    cfg = QueueConfig(name="pq", partitions=16, handoff_timeout=3, rebalance_delay=4)
    assert decode_command(encode_command(UpdateConfig(cfg))).config == cfg
    # an Enqueue written before partitions existed still decodes
    import msgspec
    old = msgspec.msgpack.encode((0, "pub", 1, 10, b"x", None, None, True))
    assert decode_command(old).partition is None
