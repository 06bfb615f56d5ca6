"""The replicated state machine interface, and a tiny key-value machine for tests and examples.

The driver applies each committed NORMAL entry: `machine.apply(meta, machine.decode(data),
state) -> (state, reply, effects)`. `meta` carries the entry's index, term and the leader's
timestamp; a machine must use only these, never a local clock or randomness, so that every
replica computes the same state. Effects are data telling the driver what to do afterwards:
by default only the leader runs them (confirms, timers, dead-lettering); an effect that is an
instance of `LocalEffect` is run by every replica (e.g. deliveries to consumers attached to that
replica's node, seed 003). `quorum/fifo.py` is the real machine; `KvMachine` below is the
example used by `tests/raft/` and `tests/sim/`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import msgspec

__all__ = ["Meta", "StateMachine", "LocalEffect", "KvMachine", "KvSet", "KvDelete", "KvChanged"]

S = TypeVar("S")
C = TypeVar("C")


# Not frozen: one is built per applied entry and a frozen __init__ costs ~3x as much
# (~0.45 us vs ~0.15 us). Hashable like before; never change one after it was built.
@dataclass(slots=True, unsafe_hash=True)
class Meta:
    index: int
    term: int
    timestamp: int  # the leader's clock (ms) when the entry was proposed


class LocalEffect:
    """Marker base class: effects of this type are run on every replica, not only the leader."""

    __slots__ = ()


class StateMachine(Protocol, Generic[S, C]):
    def init(self) -> S:
        """The state before any entry is applied."""

    def decode(self, data: bytes) -> C:
        """Entry bytes -> command."""

    def apply(self, meta: Meta, command: C, state: S) -> tuple[S, Any, list[Any]]:
        """Apply one command: the new state (may be `state` mutated in place), the reply for
        the proposer, and effects."""

    def snapshot(self, state: S) -> bytes:
        """Bytes capturing `state` (used with RaftNode.compact)."""

    def restore(self, data: bytes) -> S:
        """Inverse of snapshot."""


# ---- an example: a key-value store ------------------------------------------------------


class KvSet(msgspec.Struct, array_like=True, frozen=True, tag=1):
    key: str
    value: str


class KvDelete(msgspec.Struct, array_like=True, frozen=True, tag=2):
    key: str


@dataclass(frozen=True, slots=True)
class KvChanged(LocalEffect):
    """Every replica notifies local watchers of `key`."""

    key: str
    index: int


_kv_decoder = msgspec.msgpack.Decoder(KvSet | KvDelete)
_state_decoder = msgspec.msgpack.Decoder(dict[str, tuple[str, int]])
_encoder = msgspec.msgpack.Encoder()


class KvMachine:
    """dict key -> (value, timestamp of the write). Replies with the previous value."""

    @staticmethod
    def encode(command: KvSet | KvDelete) -> bytes:
        return _encoder.encode(command)

    def init(self) -> dict[str, tuple[str, int]]:
        return {}

    def decode(self, data: bytes) -> KvSet | KvDelete:
        return _kv_decoder.decode(data)

    def apply(self, meta: Meta, command: KvSet | KvDelete, state: dict) -> tuple[dict, Any, list]:
        old = state.get(command.key)
        if isinstance(command, KvSet):
            state[command.key] = (command.value, meta.timestamp)
        else:
            state.pop(command.key, None)
        reply = old[0] if old else None
        return state, reply, [KvChanged(command.key, meta.index)]

    def snapshot(self, state: dict) -> bytes:
        return _encoder.encode(dict(sorted(state.items())))

    def restore(self, data: bytes) -> dict:
        return dict(_state_decoder.decode(data))
