"""The replicated state of one quorum queue, its snapshots and read-only queries.

`QueueState` is mutated in place by `apply()` for speed, so snapshots are explicit:
`snapshot(state) -> bytes` and `restore(bytes) -> QueueState` (the Raft log layer stores
the bytes), and `digest(state)` gives a short hash for comparing replicas in tests.
Queries (`overview`, counts) are for the management API and the quorum adapter.
"""
from __future__ import annotations

import hashlib

import msgspec

from .commands import ConsumerKey, QueueConfig
from .consumers import SUSPECTED, UP, QUIESCING, Consumer, Enqueuer, ServiceQueue
from .dlx import DlxState
from .messages import LiveIndexes, ReadyQueue
from .partitioned import PartitionedReady
from .partitions import Partitions

__all__ = ["QueueState", "init", "snapshot", "restore", "digest", "overview",
           "active_consumer", "partition_overview", "handoff_counts"]

_SNAPSHOT_VERSION = 1


class QueueState:
    """All replicated state.  Invariants (checked by tests/fifo):
    every message is in exactly one of ready, a consumer's checked_out or dlx.held;
    `live` holds exactly their log indexes; checked_bytes sums checked-out sizes."""
    __slots__ = ("config", "ready", "consumers", "waiting", "sq", "enqueuers", "dlx",
                 "live", "checked_bytes", "last_active", "timer_at", "released",
                 "publish_blocked", "parts")

    def __init__(self, config: QueueConfig, created_ms: int | None = None) -> None:
        self.config = config.normalise()
        n = self.config.partitions
        # a partitioned queue: ready messages per partition and the partition map
        self.ready = PartitionedReady(n) if n else ReadyQueue()
        self.parts: Partitions | None = Partitions(n) if n else None
        # competing: all consumers; SAC: the active one plus cancelled ones with unacked
        self.consumers: dict[ConsumerKey, Consumer] = {}
        # SAC only: sorted by (up first, priority desc, credit desc, attach order)
        self.waiting: list[Consumer] = []
        self.sq = ServiceQueue()
        self.enqueuers: dict[str, Enqueuer] = {}
        self.dlx = DlxState()
        self.live = LiveIndexes()
        self.checked_bytes = 0
        self.last_active = created_ms      # for x-expires
        self.timer_at: int | None = None   # the last SetTimer emitted
        self.released: int | None = None   # the last ReleaseCursor.smallest_live emitted
        self.publish_blocked = False       # reject-publish: refusing enqueues (delivery.py)

    # counts -----------------------------------------------------------------
    def messages_ready(self) -> int:
        return len(self.ready)

    def messages_checked_out(self) -> int:
        return sum(len(c.checked_out) for c in self.consumers.values())

    def messages_total(self) -> int:
        return len(self.ready) + self.messages_checked_out() + len(self.dlx)

    def find(self, key: ConsumerKey) -> Consumer | None:
        c = self.consumers.get(key)
        if c is None:
            for w in self.waiting:
                if w.key == key:
                    return w
        return c


def init(config: QueueConfig, created_ms: int | None = None) -> QueueState:
    """A new, empty queue.  created_ms (leader time of the declaration) starts x-expires."""
    return QueueState(config, created_ms)


def active_consumer(q: QueueState) -> Consumer | None:
    """SAC: the active consumer (first up or quiescing one)."""
    for c in q.consumers.values():
        if c.status == UP or c.status == QUIESCING:
            return c
    return None


# snapshots ------------------------------------------------------------------

_enc = msgspec.msgpack.Encoder()
_dec = msgspec.msgpack.Decoder()


def _config_to_wire(cfg: QueueConfig) -> list:
    return [cfg.name, cfg.max_length, cfg.max_bytes, cfg.overflow, cfg.delivery_limit,
            cfg.msg_ttl, cfg.expires, cfg.dead_letter_exchange, cfg.dead_letter_routing_key,
            cfg.dead_letter_strategy, cfg.single_active_consumer, cfg.partitions,
            cfg.handoff_timeout, cfg.rebalance_delay]


def _config_from_wire(w: list) -> QueueConfig:
    return QueueConfig(*w)


def snapshot(q: QueueState) -> bytes:
    """Everything apply() depends on, in a canonical order: equal states give equal bytes."""
    return _enc.encode([
        _SNAPSHOT_VERSION,
        _config_to_wire(q.config),
        q.ready.to_wire(),
        [c.to_wire() for c in q.consumers.values()],
        [c.to_wire() for c in q.waiting],
        q.sq.to_wire(),
        [[p, e.next_seq] for p, e in q.enqueuers.items()],
        q.dlx.to_wire(),
        q.live.to_wire(),
        q.checked_bytes, q.last_active, q.timer_at, q.released,
        q.publish_blocked,
        None if q.parts is None else q.parts.to_wire(),
    ])


def restore(data: bytes) -> QueueState:
    w = _dec.decode(data)
    if w[0] != _SNAPSHOT_VERSION:
        raise ValueError(f"unknown fifo snapshot version {w[0]!r}")
    q = QueueState(_config_from_wire(w[1]))
    q.ready = (PartitionedReady.from_wire(w[2]) if q.config.partitions
               else ReadyQueue.from_wire(w[2]))
    q.consumers = {}
    for cw in w[3]:
        c = Consumer.from_wire(cw)
        q.consumers[c.key] = c
    q.waiting = [Consumer.from_wire(cw) for cw in w[4]]
    q.sq = ServiceQueue.from_wire(w[5])
    q.enqueuers = {p: Enqueuer(n) for p, n in w[6]}
    q.dlx = DlxState.from_wire(w[7])
    q.live = LiveIndexes.from_wire(w[8])
    q.checked_bytes, q.last_active, q.timer_at, q.released = w[9:13]
    q.publish_blocked = bool(w[13]) if len(w) > 13 else False  # absent in older snapshots
    q.parts = Partitions.from_wire(w[14]) if len(w) > 14 and w[14] is not None else None
    return q


def digest(q: QueueState) -> str:
    """Short hash of the whole state, for comparing replicas."""
    return hashlib.sha256(snapshot(q)).hexdigest()[:16]


def suspected_nodes(q: QueueState) -> set[str]:
    """Nodes with consumers suspected down (a NodeDown, no NodeUp since)."""
    return {c.key.node for c in (*q.consumers.values(), *q.waiting) if c.status == SUSPECTED}


def overview(q: QueueState) -> dict:
    """Counters for management / list_queues."""
    cfg = q.config
    sac = active_consumer(q) if cfg.single_active_consumer else None
    return {
        "name": cfg.name,
        "messages_ready": len(q.ready),
        "messages_ready_high": len(q.ready.hi),
        "messages_ready_normal": len(q.ready.lo),
        "messages_ready_returned": len(q.ready.returns),
        "messages_unacknowledged": q.messages_checked_out(),
        "messages": q.messages_total(),
        "message_bytes_ready": q.ready.bytes,
        "message_bytes_unacknowledged": q.checked_bytes,
        "messages_dlx": len(q.dlx),
        "message_bytes_dlx": q.dlx.bytes,
        "consumers": sum(1 for c in q.consumers.values() if c.status != SUSPECTED)
        + len(q.waiting),
        "single_active_consumer": sac.key if sac is not None else None,
        "publishers": len(q.enqueuers),
        "delivery_limit": cfg.delivery_limit,
    }


def partition_overview(q: QueueState) -> list[dict] | None:
    """A partitioned queue's partitions for management: owner (a ConsumerKey or None),
    state, ready depth, unacked; and None for other queues."""
    if q.parts is None:
        return None
    unacked = [0] * len(q.parts)
    for c in q.consumers.values():
        for m in c.checked_out.values():
            unacked[m.part] += 1
    return [{"partition": i, "owner": p.owner, "next_owner": p.target, "state": p.state,
             "messages_ready": q.ready.depth(i), "messages_unacknowledged": unacked[i]}
            for i, p in enumerate(q.parts.parts)]


def handoff_counts(q: QueueState) -> dict | None:
    """Replicated handoff counters of a partitioned queue (None for other queues)."""
    ps = q.parts
    if ps is None:
        return None
    return {"started": ps.started, "graceful": ps.graceful, "forced": ps.forced}
