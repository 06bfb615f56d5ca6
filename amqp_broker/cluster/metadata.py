"""The cluster's metadata as a replicated state machine (like RabbitMQ 4's Khepri).

One Raft group, ``meta``, whose voters are every node of the cluster, holds the durable
topology: exchanges, queues (type, arguments, and for a quorum queue its Raft group and members;
for a classic queue its home node) and bindings. `MetadataMachine` is pure: records keyed by
``(kind, key)`` with put / delete commands; every replica applies the same commands, so every
node has the same records and routes from its own copy. A change reaches the broker of each node
as a `MetaChanged` effect (a `LocalEffect`: run on every replica), applied by the server's
`server/cluster_meta.py`.

Rules that need the whole state are applied here, deterministically: a put with `if_absent`
keeps the first record (two nodes declaring one name at once: the first committed wins; the
reply tells the loser which record won), and deleting a queue or an exchange deletes the
bindings that name it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from quorum.raft import LocalEffect, Meta

__all__ = ["MetadataMachine", "MetaState", "Put", "Delete", "MetaChanged", "encode_meta_command",
           "QUEUE", "EXCHANGE", "BINDING", "META_GROUP"]

META_GROUP = "meta"
QUEUE, EXCHANGE, BINDING = "queue", "exchange", "binding"


class Put(msgspec.Struct, tag="put", array_like=True, frozen=True):
    kind: str
    key: tuple
    value: Any
    if_absent: bool = False


class Delete(msgspec.Struct, tag="del", array_like=True, frozen=True):
    kind: str
    key: tuple


Command = Put | Delete
_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(Command).decode
_decode_snapshot = msgspec.msgpack.Decoder(list).decode


def encode_meta_command(cmd: Command) -> bytes:
    return _encode(cmd)


@dataclass(slots=True, unsafe_hash=True)
class MetaChanged(LocalEffect):
    """Records that changed, in order: (kind, key, new value, old value); new is None when
    deleted, old is None when created. Every command gives one (empty when it changed
    nothing), so every node's handler hears of every applied entry."""

    changes: tuple
    index: int = 0  # the entry's log index
    local = True


class MetaState:
    __slots__ = ("records",)

    def __init__(self) -> None:
        self.records: dict[tuple[str, tuple], Any] = {}

    def get(self, kind: str, key: tuple) -> Any:
        return self.records.get((kind, tuple(key)))

    def items(self, kind: str) -> list[tuple[tuple, Any]]:
        return [(k, v) for (kd, k), v in self.records.items() if kd == kind]


class MetadataMachine:
    """`quorum.raft.machine.StateMachine` over `MetaState`."""

    def init(self) -> MetaState:
        return MetaState()

    def decode(self, data: bytes) -> Command:
        return _decode(data)

    def apply(self, meta: Meta, cmd: Command, state: MetaState) -> tuple[MetaState, Any, list]:
        records = state.records
        key = (cmd.kind, tuple(cmd.key))
        if type(cmd) is Put:
            current = records.get(key)
            if cmd.if_absent and current is not None:
                return state, current, [MetaChanged((), meta.index)]  # nothing changed
            records[key] = cmd.value
            return state, cmd.value, [MetaChanged(((cmd.kind, key[1], cmd.value, current),),
                                                  meta.index)]
        if key not in records:
            return state, None, [MetaChanged((), meta.index)]
        changes = [(cmd.kind, key[1], None, records.pop(key))]
        for bkey in _bindings_naming(records, cmd.kind, key[1]):
            changes.append((BINDING, bkey, None, records.pop((BINDING, bkey))))
        return state, None, [MetaChanged(tuple(changes), meta.index)]

    def snapshot(self, state: MetaState) -> bytes:
        return _encode([[kind, list(key), value] for (kind, key), value in state.records.items()])

    def restore(self, data: bytes) -> MetaState:
        state = MetaState()
        for kind, key, value in _decode_snapshot(data):
            state.records[(kind, tuple(key))] = value
        return state


def _bindings_naming(records: dict, kind: str, key: tuple) -> list[tuple]:
    """Bindings that go with a deleted queue or exchange. A binding key is
    (vhost, source, dest kind, dest, routing key, arguments key)."""
    if kind not in (QUEUE, EXCHANGE):
        return []
    vhost, name = key[0], key[1]
    out = []
    for (kd, bkey) in records:
        if kd != BINDING or bkey[0] != vhost:
            continue
        if kind == QUEUE and bkey[2] == "queue" and bkey[3] == name:
            out.append(bkey)
        elif kind == EXCHANGE and (bkey[1] == name or (bkey[2] == "exchange" and bkey[3] == name)):
            out.append(bkey)
    return out
