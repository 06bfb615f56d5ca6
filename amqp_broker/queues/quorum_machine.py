"""The quorum queue's Raft state machine as the broker runs it: `quorum.fifo` plus body reads.

Used by `quorum.QuorumQueue`, which hands a `QuorumMachine` to the node's
`quorum.driver.NodeDriver`. As rabbit_fifo since RabbitMQ 3.10, the replicated state keeps per
message only its log index and a small header (`quorum.fifo.messages.Message`); the body stays
in the Raft log (WAL, memory table, segment files) and is read back when it is delivered:
- `body(state, index)` finds a message's body: a small read cache of the latest enqueues
  (the head of a queue whose consumers keep up), else the log through `reader` (the driver's
  `entry_data`, set by the adapter);
- snapshots carry no bodies. The log is kept from the oldest live message on by a release
  cursor (`release_cursor`): a snapshot of the state at applied index P is taken and held
  until every message at or below P is settled; only then the driver stores it and the log
  up to P is deleted (segments of settled messages go). Replaying the entries after P
  settles whatever the snapshot still held, so snapshot + tail == full replay, and every
  live body is after the snapshot, where a follower receives it through replication;
- `DeadLettered` effects and `Dequeue` replies read their bodies when the broker asks, before
  the driver compacts (it compacts after the batch's effects ran).
Pure (no IO but `reader`, no clock): apply/snapshot/restore are deterministic like the fifo.

The log payload of an Enqueue is `encode_payload(message)`: exchange, routing key, the raw
property section and the body, length-prefixed.
"""

from __future__ import annotations

import struct
from collections import deque
from functools import partial
from typing import Any, Callable

import msgspec

from quorum.fifo import (DeadLetter, Dequeue, DequeueReply, Enqueue, FifoMachine, Meta,
                         QueueConfig, Requeue)
from quorum.fifo import snapshot as fifo_snapshot
from quorum.fifo import restore as fifo_restore
from quorum.fifo import snapshot_installed_effects

from .message import Message

__all__ = ["QuorumMachine", "QState", "DeadLettered", "BodyCache", "encode_payload",
           "payload_pieces", "decode_payload"]

_HEAD = struct.Struct(">BBI")  # exchange len, routing key len, properties len


def encode_payload(m: Message) -> bytes:
    return b"".join(payload_pieces(m))


def payload_pieces(m: Message) -> tuple[bytes, bytes, bytes]:
    """`encode_payload(m)` as pieces (the body among them, not copied)."""
    ex = m.exchange.encode()
    rk = m.routing_key.encode()
    return _HEAD.pack(len(ex), len(rk), len(m.properties)) + ex + rk, m.properties, m.body


def decode_payload(data: bytes) -> Message:
    el, rl, pl = _HEAD.unpack_from(data, 0)
    p = _HEAD.size
    ex = data[p:p + el].decode()
    p += el
    rk = data[p:p + rl].decode()
    p += rl
    props = data[p:p + pl]
    return Message.from_publish(ex, rk, props, data[p + pl:])


class QState:
    """Replicated state: the fifo's `QueueState`. `legacy` holds the bodies a version-1
    snapshot carried (written before bodies left the state; their log entries are gone),
    until those messages are settled."""

    __slots__ = ("fifo", "legacy")

    def __init__(self, fifo: Any) -> None:
        self.fifo = fifo
        self.legacy: dict[int, Message] = {}


class BodyCache:
    """Bodies of the latest applied enqueues by log index (a `Message`, or the raw payload on
    a replica that did not decode it): the head of a queue whose consumers keep up, delivered
    without a log read. Bounded by bytes and count; a delivery takes its entry out. When it is
    full, entries of messages no longer live go first, and then a new body is not kept: the
    consumers read the queue from its head, so the oldest bodies are the ones they want next
    (dropping those instead, a consumer a few MiB behind missed on every delivery: at 64 KiB
    quorum e2e ran 15-22% faster with this). Not replicated: a miss only costs a read."""

    __slots__ = ("items", "bytes", "max_bytes", "max_count")

    def __init__(self, max_bytes: int, max_count: int) -> None:
        self.items: dict[int, tuple[Any, int]] = {}   # in index order
        self.bytes = 0
        self.max_bytes = max_bytes
        self.max_count = max_count

    def put(self, index: int, value: Any, size: int, smallest_live: Callable[[], int | None]) -> None:
        """Keep the body at `index` if there is room once the entries below the smallest log
        index still live (asked only when full; None: nothing is) are gone."""
        items = self.items
        if self.bytes + size > self.max_bytes or len(items) >= self.max_count:
            live_from = smallest_live()
            if live_from is None:
                live_from = index
            while items:
                oldest = next(iter(items))
                if oldest >= live_from:
                    break
                self.bytes -= items.pop(oldest)[1]   # settled or removed, never delivered
            if self.bytes + size > self.max_bytes or len(items) >= self.max_count:
                return
        items[index] = (value, size)
        self.bytes += size

    def get(self, index: int) -> Any | None:
        hit = self.items.get(index)
        return None if hit is None else hit[0]

    def take(self, index: int) -> Any | None:
        hit = self.items.pop(index, None)
        if hit is None:
            return None
        self.bytes -= hit[1]
        return hit[0]

    def clear(self) -> None:
        self.items.clear()
        self.bytes = 0


class DeadLettered:
    """A fifo `DeadLetter` whose messages are read when first asked for (`messages`, None
    where a body is unknown): by the leader's effect runner, in the same driver pass, before
    any compaction. Not local: like every non-Deliver effect, only the leader runs it."""

    __slots__ = ("effect", "_read", "_messages")
    local = False

    def __init__(self, effect: DeadLetter, read: Callable[[int], Message | None]) -> None:
        self.effect = effect
        self._read = read
        self._messages: list[Message | None] | None = None

    @property
    def messages(self) -> list[Message | None]:
        if self._messages is None:
            self._messages = [self._read(m.index) for m in self.effect.msgs]
        return self._messages


_NEVER = 1 << 62


def _nothing() -> None:
    pass


_enc = msgspec.msgpack.Encoder()
_dec = msgspec.msgpack.Decoder()

# The read cache, per queue: at most this many bytes / messages (a few prefetch windows of
# small ones); an enqueue behind more ready messages than the count is not cached.
CACHE_BYTES = 4 << 20
CACHE_COUNT = 8192
# Once this many body bytes went through a queue, its log compacts (when empty) or takes a
# release cursor early: large bodies let their entries go before `snapshot_every` entries.
CURSOR_BYTES = 16 << 20
# A checkpoint is taken once this many entries, and at least half as many as there are
# messages in the queue, were applied since the last one (or the last snapshot).
CHECKPOINT_EVERY = 32768


class QuorumMachine:
    """`quorum.raft.StateMachine` for the driver; see the module docstring.

    `reader(index) -> command bytes | None` reads a committed entry back from the log (the
    driver's `entry_data`); without one only the read cache serves bodies. The optional
    `range_reader(lo, hi) -> [(index, command bytes)]` reads entries lo..hi in one go (a
    delivery of many messages behind a backlog)."""

    def __init__(self, config: QueueConfig, created_ms: int | None = None,
                 reader: Callable[[int], bytes | None] | None = None,
                 cache_bytes: int = CACHE_BYTES, cache_count: int = CACHE_COUNT,
                 range_reader: Callable[[int, int], list[tuple[int, bytes]]] | None = None
                 ) -> None:
        self._fifo = FifoMachine(config, created_ms)
        self.reader = reader
        self.range_reader = range_reader
        self.cache = BodyCache(cache_bytes, cache_count)
        # the release cursor waiting for its index to fall below the oldest live message:
        # (applied index, snapshot of the state there)
        self.pending: tuple[int, bytes] | None = None
        self.enqueued_bytes = 0  # body bytes applied since the last snapshot was taken
        self.applied_enqueues = 0  # not replicated: the adapter's in-flight publish count
        # not replicated either: `on_wake()` once `applied_enqueues` reaches `wake_at` (the
        # adapter's end of publisher flow)
        self.wake_at = _NEVER
        self.on_wake: Callable[[], None] = _nothing
        self.log_reads = 0  # bodies read back from the log (cache misses)
        # Leader-side shortcut: (log data, Enqueue, message) of this node's proposed
        # Enqueues, in proposal order (= apply order). The entry that carries the very same
        # data object reuses the command and the message instead of decoding them again; the
        # result is the same either way, so replicas stay identical.
        self.outbox: deque[tuple[bytes, Enqueue, Message]] = deque()

    def init(self) -> QState:
        return QState(self._fifo.init())

    def decode(self, data: bytes):
        outbox = self.outbox
        if outbox and outbox[0][0] is data:
            return outbox[0][1]
        return self._fifo.decode(data)

    def apply(self, meta: Meta, cmd: Any, state: QState):
        cls = type(cmd)
        if cls is Enqueue:
            self.applied_enqueues += 1
            if self.applied_enqueues >= self.wake_at:
                self.wake_at = _NEVER
                self.on_wake()
            self.enqueued_bytes += cmd.size
            body = self._cached(cmd)
            # behind a backlog it would be delivered long after the cache let it go
            if len(state.fifo.ready) < self.cache.max_count:
                self.cache.put(meta.index, body, cmd.size, state.fifo.live.smallest)
        elif cls is Requeue:
            self.cache.put(meta.index, cmd.payload, len(cmd.payload), state.fifo.live.smallest)
        _, reply, effects = self._fifo.apply(meta, cmd, state.fifo)
        if cls is Dequeue and isinstance(reply, DequeueReply) and reply.delivery is not None:
            reply = (reply, self.body(state, reply.delivery.index))
        for i, eff in enumerate(effects):
            if type(eff) is DeadLetter:
                effects[i] = DeadLettered(eff, partial(self.body, state))
        return state, reply, effects

    def _cached(self, cmd: Enqueue) -> Any:
        """The leader's own decoded message, else the raw payload (decoded if delivered)."""
        outbox = self.outbox
        if outbox:
            _, sent, msg = outbox.popleft()
            if sent is cmd or sent.payload == cmd.payload:
                return msg
            outbox.clear()  # out of step (cannot happen with one leader): decode from now on
        return cmd.payload

    # -- bodies ----------------------------------------------------------------------------
    def _find(self, state: QState, index: int, keep: bool) -> Any | None:
        cache = self.cache
        got = cache.get(index) if keep else cache.take(index)
        if got is None and state.legacy:
            got = state.legacy.get(index)
        if got is None and self.reader is not None:
            data = self.reader(index)
            if data is not None:
                self.log_reads += 1
                cmd = self._fifo.decode(data)
                got = cmd.payload if type(cmd) in (Enqueue, Requeue) else None
        return got

    def body(self, state: QState, index: int, keep: bool = False) -> Message | None:
        """The message enqueued at `index` (None if unknown). Without `keep` its cache entry
        goes: it is being delivered, a redelivery reads the log."""
        got = self._find(state, index, keep)
        if got is None or type(got) is Message:
            return got
        return decode_payload(got)

    def bodies(self, state: QState, indexes: list[int]) -> list[Message | None]:
        """`body` of each of `indexes` (being delivered), the cache misses read from the log
        in one range when they lie close together."""
        cache = self.cache
        out: list[Any] = [cache.take(i) for i in indexes]
        missing = [k for k, got in enumerate(out) if got is None]
        if missing and self.range_reader is not None and len(missing) > 1 and not state.legacy:
            lo, hi = indexes[missing[0]], indexes[missing[0]]
            for k in missing:
                i = indexes[k]
                lo, hi = min(lo, i), max(hi, i)
            if hi - lo < 4 * len(missing) + 16:
                found = dict(self.range_reader(lo, hi))
                decode = self._fifo.decode
                for k in missing:
                    data = found.get(indexes[k])
                    if data is not None:
                        self.log_reads += 1
                        cmd = decode(data)
                        out[k] = cmd.payload if type(cmd) in (Enqueue, Requeue) else None
                missing = []
        for k in missing:
            out[k] = self._find(state, indexes[k], False)
        return [got if got is None or type(got) is Message else decode_payload(got)
                for got in out]

    def payload(self, state: QState, index: int) -> bytes | None:
        """The log payload of the message at `index` (for a `Requeue` of it)."""
        got = self._find(state, index, True)
        if got is None or type(got) is bytes:
            return got
        return encode_payload(got)

    # -- snapshots -------------------------------------------------------------------------
    def release_cursor(self, state: QState, applied: int, since: int,
                       every: int) -> tuple[int, bytes] | None:
        """Asked by the driver after every pass (`quorum.replica.compaction_point`), `since`
        entries after the last snapshot: the (index, snapshot) to compact to now, if any.
        - an empty queue compacts to `applied` once `every` entries or `CURSOR_BYTES` of
          bodies went through since the last snapshot (a drained backlog lets its log go);
        - otherwise, once `every` entries or `CURSOR_BYTES` of bodies were applied, a
          snapshot at `applied` is taken and held (only one at a time) until the oldest live
          message is past it. (Large bodies: the log then lets settled ones go before a WAL
          rollover would copy them into segments.)"""
        smallest = state.fifo.live.smallest()
        if smallest is None and (since >= every or self.enqueued_bytes >= CURSOR_BYTES):
            self.pending = None
            self.enqueued_bytes = 0
            state.legacy = {}
            return applied, self.snapshot(state)
        held = self.pending
        if held is not None:
            if smallest is None or smallest > held[0]:
                self.pending = None
                return held
            return None
        if since < every and self.enqueued_bytes < CURSOR_BYTES:
            return None
        if state.legacy:
            live = set(state.fifo.live.live())
            state.legacy = {i: m for i, m in state.legacy.items() if i in live}
        self.pending = (applied, self.snapshot(state))
        self.enqueued_bytes = 0
        return None

    def checkpoint(self, state: QState, since: int) -> bytes | None:
        """Asked by the driver when it does not compact (`quorum.replica.checkpoint_due`),
        `since` entries after the last snapshot or checkpoint: a snapshot of the state now,
        kept beside the log so that a restart applies only the entries after it. A queue
        with a deep backlog cannot compact its log (the bodies live there), and applying ten
        million enqueues again takes a minute. A checkpoint costs time in proportion to the
        messages in the queue, so one comes after half as many new entries at least: each
        message is encoded about twice in all, however deep the queue grows."""
        if since < CHECKPOINT_EVERY or 2 * since < state.fifo.messages_total() or state.legacy:
            return None  # (bodies of an old version's snapshot go only in a real snapshot)
        return self.snapshot(state)

    def release_floor(self, state: QState) -> int | None:
        """The highest index the log may be compacted to now (with a checkpoint taken there,
        `quorum.replica.release_floor`): just below the oldest message still held. None
        while the queue is empty (`release_cursor` compacts it) or holds bodies of an old
        version's snapshot (only a real snapshot keeps those)."""
        smallest = state.fifo.live.smallest()
        if smallest is None or state.legacy:
            return None
        return smallest - 1

    def snapshot(self, state: QState) -> bytes:
        return _enc.encode([2, fifo_snapshot(state.fifo)])

    def snapshot_installed(self, state: QState) -> list:
        """After a snapshot received from the leader (`quorum.replica.install_snapshot`): the
        deliveries decided by entries it covers, which this replica never applied, to send
        again (bodies of messages the snapshot holds but later entries settle are gone from
        the log: the effect runner skips those)."""
        self.pending = None  # taken on a log that the snapshot replaced
        return snapshot_installed_effects(state.fifo)

    def restore(self, data: bytes) -> QState:
        w = _dec.decode(data)
        if w[0] == 1:  # bodies in the snapshot (before they moved to the log)
            state = QState(fifo_restore(w[1]))
            state.legacy = {index: decode_payload(payload) for index, payload in w[2]}
            return state
        if w[0] != 2:
            raise ValueError(f"unknown quorum snapshot version {w[0]!r}")
        return QState(fifo_restore(w[1]))
