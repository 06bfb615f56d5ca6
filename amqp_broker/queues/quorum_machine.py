"""The quorum queue's Raft state machine as the broker runs it: `quorum.fifo` plus the bodies.

Used by `quorum.QuorumQueue`, which hands a `QuorumMachine` to the node's
`quorum.driver.NodeDriver`. The fifo keeps only log indexes; this wrapper keeps the message of
every live index in the replicated state too (`QState.bodies`), decoded once when its Enqueue
is applied, so that:
- deliveries never read the log (a Deliver names indexes, the bodies are here);
- a snapshot carries the bodies of live messages, so compacting the log can never delete the
  body of a message still in the queue (the fifo's ReleaseCursor moves the eviction point);
- `DeadLetter` effects and `Dequeue` replies get their messages attached at apply time, before
  a later ReleaseCursor in the same batch evicts them.
Pure (no IO, no clock): apply/snapshot/restore are deterministic like the fifo itself.

The log payload of an Enqueue is `encode_payload(message)`: exchange, routing key, the raw
property section and the body, length-prefixed.
"""

from __future__ import annotations

import struct
from collections import deque
from typing import Any

import msgspec

from quorum.fifo import (DeadLetter, Dequeue, DequeueReply, Enqueue, FifoMachine, Meta,
                         QueueConfig, ReleaseCursor, Requeue)
from quorum.fifo import snapshot as fifo_snapshot
from quorum.fifo import restore as fifo_restore
from quorum.fifo import snapshot_installed_effects

from .message import Message

__all__ = ["QuorumMachine", "QState", "DeadLettered", "encode_payload", "decode_payload"]

_HEAD = struct.Struct(">BBI")  # exchange len, routing key len, properties len


def encode_payload(m: Message) -> bytes:
    ex = m.exchange.encode()
    rk = m.routing_key.encode()
    return b"".join((_HEAD.pack(len(ex), len(rk), len(m.properties)), ex, rk, m.properties,
                     m.body))


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
    """Replicated state: the fifo's `QueueState` plus index -> message for live messages.
    `order` lists the body indexes in increasing order (for eviction from the front)."""

    __slots__ = ("fifo", "bodies", "order")

    def __init__(self, fifo: Any) -> None:
        self.fifo = fifo
        self.bodies: dict[int, Message] = {}
        self.order: deque[int] = deque()

    def add(self, index: int, message: Message) -> None:
        self.bodies[index] = message
        self.order.append(index)

    def prune(self, live: list[int]) -> None:
        """Keep only the bodies of `live` indexes (increasing)."""
        bodies = self.bodies
        self.bodies = {i: bodies[i] for i in live if i in bodies}
        self.order = deque(self.bodies)

    def evict_below(self, smallest_live: int | None) -> None:
        order, bodies = self.order, self.bodies
        while order and (smallest_live is None or order[0] < smallest_live):
            bodies.pop(order.popleft(), None)


class DeadLettered:
    """A fifo `DeadLetter` with its messages attached (None where a body is unknown).
    Not local: like every non-Deliver effect, only the leader runs it."""

    __slots__ = ("effect", "messages")
    local = False

    def __init__(self, effect: DeadLetter, messages: list[Message | None]) -> None:
        self.effect = effect
        self.messages = messages


_enc = msgspec.msgpack.Encoder()
_dec = msgspec.msgpack.Decoder()


class QuorumMachine:
    """`quorum.raft.StateMachine` for the driver; see the module docstring."""

    def __init__(self, config: QueueConfig, created_ms: int | None = None) -> None:
        self._fifo = FifoMachine(config, created_ms)
        self.applied_enqueues = 0  # not replicated: the adapter's in-flight publish count
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
            state.add(meta.index, self._message(cmd))
        elif cls is Requeue:
            state.add(meta.index, decode_payload(cmd.payload))
        _, reply, effects = self._fifo.apply(meta, cmd, state.fifo)
        if cls is Dequeue and isinstance(reply, DequeueReply) and reply.delivery is not None:
            reply = (reply, state.bodies.get(reply.delivery.index))
        for i, eff in enumerate(effects):
            t = type(eff)
            if t is DeadLetter:
                effects[i] = DeadLettered(eff, [state.bodies.get(m.index) for m in eff.msgs])
            elif t is ReleaseCursor:
                state.evict_below(eff.smallest_live)
        return state, reply, effects

    def _message(self, cmd: Enqueue) -> Message:
        outbox = self.outbox
        if outbox:
            _, sent, msg = outbox.popleft()
            if sent is cmd or sent.payload == cmd.payload:
                return msg
            outbox.clear()  # out of step (cannot happen with one leader): decode from now on
        return decode_payload(cmd.payload)

    def compactable(self, state: QState, since: int) -> bool:
        """Snapshots carry live bodies: compact only while they are few compared with the
        entries the snapshot lets go (a deep queue keeps its log until it drains). Asked by
        the driver once `since` entries were applied after the last snapshot; also drops the
        bodies of messages settled above the oldest live one when they are the majority
        (eviction by ReleaseCursor only moves past a message once it is gone)."""
        live = state.fifo.messages_total()
        if len(state.bodies) > 2 * live + 64:
            state.prune(state.fifo.live.live())
        return live * 8 <= since

    def snapshot(self, state: QState) -> bytes:
        bodies = state.bodies
        live = [[i, encode_payload(bodies[i])] for i in state.fifo.live.live() if i in bodies]
        return _enc.encode([1, fifo_snapshot(state.fifo), live])

    def snapshot_installed(self, state: QState) -> list:
        """After a snapshot received from the leader (`quorum.replica.install_snapshot`): the
        deliveries decided by entries it covers, which this replica never applied, to send
        again. (Not reached yet: the broker's groups have one member. A clustered broker's
        channel must drop the msg ids it already delivered.)"""
        return snapshot_installed_effects(state.fifo)

    def restore(self, data: bytes) -> QState:
        w = _dec.decode(data)
        if w[0] != 1:
            raise ValueError(f"unknown quorum snapshot version {w[0]!r}")
        state = QState(fifo_restore(w[1]))
        for index, payload in w[2]:
            state.add(index, decode_payload(payload))
        return state
