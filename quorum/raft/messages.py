"""Raft log entries, persisted state and peer messages, with a compact wire encoding.

Everything the Raft core (`quorum.raft.node`) exchanges with the outside world is defined here:
`Entry` (what the log stores), `HardState` and `Snapshot` (what must be made durable), and the
peer messages that `RaftNode.ready()` hands out and `RaftNode.step()` takes in. The durable log
(`quorum/log/`) stores `Entry` and `HardState`; the transport (`quorum/transport.py`) moves the
bytes made by `encode_message` and gives `decode_message` output back to `step`.

All types are msgspec Structs with ``array_like=True``: encoded as msgpack arrays without field
names, and messages carry a small integer tag so one decoder handles every type. No pickle.
Structs are frozen: the node shares them between its log, `Ready` and the caller.
"""

from __future__ import annotations

from enum import IntEnum

import msgspec

__all__ = [
    "EntryKind",
    "Entry",
    "HardState",
    "ConfigState",
    "SnapshotMeta",
    "Snapshot",
    "Append",
    "AppendResp",
    "Heartbeat",
    "HeartbeatResp",
    "PreVote",
    "PreVoteResp",
    "Vote",
    "VoteResp",
    "InstallSnapshot",
    "TimeoutNow",
    "Message",
    "encode_message",
    "decode_message",
    "encode_entry",
    "entry_pieces",
    "decode_entry",
    "encode_entries",
    "decode_entries",
    "encode_hard_state",
    "decode_hard_state",
    "encode_config",
    "decode_config",
]


class EntryKind(IntEnum):
    """What an entry's `data` means."""

    NORMAL = 0  # an application command: bytes for the state machine
    CONFIG = 1  # a membership change: `data` is `encode_config(ConfigState)`, the whole new config
    NOOP = 2  # appended by each new leader so that older-term entries can commit (Raft section 5.4.2)
    FORWARDED = 3  # a command proposed through another replica: `data` is the driver's envelope


class Entry(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """One log entry. `timestamp` is the leader's clock in ms when the entry was proposed;
    state machines use only this time, never a local clock."""

    index: int
    term: int
    kind: EntryKind
    data: bytes
    timestamp: int = 0


class HardState(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """State that must be durable before any message of the same `Ready` is sent.

    `vote` is the node id voted for in `term` (None if none). `commit` may be persisted lazily:
    losing it is safe, a restarted node learns it again from the leader.
    """

    term: int = 0
    vote: str | None = None
    commit: int = 0


class ConfigState(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """A cluster membership: voters count for elections and commit, learners only replicate.
    `auto_promote` lists the learners that the leader promotes to voters once they have caught
    up. All tuples are sorted so equal configs encode to equal bytes."""

    voters: tuple[str, ...] = ()
    learners: tuple[str, ...] = ()
    auto_promote: tuple[str, ...] = ()


class SnapshotMeta(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """Where a snapshot sits in the log: it replaces entries 1..index, the last of which had
    `term`; `config` is the membership in force at `index`."""

    index: int = 0
    term: int = 0
    config: ConfigState = ConfigState()


class Snapshot(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """A state-machine snapshot: application bytes covering the log up to `meta.index`."""

    meta: SnapshotMeta
    data: bytes = b""


# ---- peer messages ---------------------------------------------------------------------------
# Every message has `to`, `frm` (sender) and `term` (the sender's term, except PreVote which
# carries the term the sender would campaign at). The integer tag identifies the type on the wire.


class Append(msgspec.Struct, array_like=True, frozen=True, gc=False, tag=1):
    """Leader -> follower: entries following (prev_index, prev_term), and the leader's commit."""

    to: str
    frm: str
    term: int
    prev_index: int
    prev_term: int
    entries: tuple[Entry, ...]
    commit: int


class AppendResp(msgspec.Struct, array_like=True, frozen=True, gc=False, tag=2):
    """Follower -> leader. On success `index` is the last index known to match the leader.
    On reject, (`hint_index`, `hint_term`) let the leader skip a whole conflicting term: if
    `hint_term` > 0 the follower's entry at `hint_index` is the first of term `hint_term`,
    otherwise the follower's log ends at `hint_index - 1`."""

    to: str
    frm: str
    term: int
    index: int
    reject: bool = False
    hint_index: int = 0
    hint_term: int = 0


class Heartbeat(msgspec.Struct, array_like=True, frozen=True, gc=False, tag=3):
    """Leader -> follower, every heartbeat_tick. `commit` is min(leader commit, follower match).
    `ctx` is non-empty when the heartbeat confirms leadership for a read (`read_index`)."""

    to: str
    frm: str
    term: int
    commit: int
    ctx: bytes = b""


class HeartbeatResp(msgspec.Struct, array_like=True, frozen=True, gc=False, tag=4):
    """Echoes the heartbeat's `ctx`."""

    to: str
    frm: str
    term: int
    ctx: bytes = b""


class PreVote(msgspec.Struct, array_like=True, frozen=True, gc=False, tag=5):
    """Would you vote for me at `term`? Granting changes nothing on the receiver (thesis 9.6)."""

    to: str
    frm: str
    term: int
    last_index: int
    last_term: int


class PreVoteResp(msgspec.Struct, array_like=True, frozen=True, gc=False, tag=6):
    to: str
    frm: str
    term: int
    granted: bool


class Vote(msgspec.Struct, array_like=True, frozen=True, gc=False, tag=7):
    """RequestVote. `transfer` is set when campaigning after TimeoutNow: it overrides the
    receivers' leader lease."""

    to: str
    frm: str
    term: int
    last_index: int
    last_term: int
    transfer: bool = False


class VoteResp(msgspec.Struct, array_like=True, frozen=True, gc=False, tag=8):
    to: str
    frm: str
    term: int
    granted: bool


class InstallSnapshot(msgspec.Struct, array_like=True, frozen=True, gc=False, tag=9):
    """Leader -> follower whose next entry was compacted away. A large snapshot comes in
    chunks: `snapshot.data` is then the part starting at byte `offset`, and `done` marks the
    last part. The chunks of one snapshot are sent together and in order; a follower that
    misses one drops what it has and waits for the leader to send the snapshot again."""

    to: str
    frm: str
    term: int
    snapshot: Snapshot
    offset: int = 0
    done: bool = True


class TimeoutNow(msgspec.Struct, array_like=True, frozen=True, gc=False, tag=10):
    """Leader -> transfer target: start an election now (leadership transfer, thesis 3.10)."""

    to: str
    frm: str
    term: int


Message = (
    Append
    | AppendResp
    | Heartbeat
    | HeartbeatResp
    | PreVote
    | PreVoteResp
    | Vote
    | VoteResp
    | InstallSnapshot
    | TimeoutNow
)

_encoder = msgspec.msgpack.Encoder()
_message_decoder = msgspec.msgpack.Decoder(Message)
_entry_decoder = msgspec.msgpack.Decoder(Entry)
_entries_decoder = msgspec.msgpack.Decoder(list[Entry])
_hard_state_decoder = msgspec.msgpack.Decoder(HardState)
_config_decoder = msgspec.msgpack.Decoder(ConfigState)
_config_history_decoder = msgspec.msgpack.Decoder(list[tuple[int, ConfigState]])


def encode_message(msg: Message) -> bytes:
    """Compact msgpack bytes for one peer message (tag first, then fields in order)."""
    return _encoder.encode(msg)


def decode_message(data: bytes) -> Message:
    """Inverse of `encode_message`; raises msgspec.DecodeError / ValidationError on bad input."""
    return _message_decoder.decode(data)


def encode_entry(entry: Entry) -> bytes:
    return _encoder.encode(entry)


_SPLIT_FROM = 4096  # data from this size on is left out of the encoding (`entry_pieces`)


def entry_pieces(entry: Entry) -> bytes | tuple[bytes, bytes, bytes]:
    """`encode_entry(entry)`, with large `data` left as it is: (before, data, after), whose
    bytes joined are the encoding, for a log that writes pieces (`quorum.log.disk.Payload`)
    and so never copies a message body into an entry record."""
    data = entry.data
    n = len(data)
    if n < _SPLIT_FROM:
        return _encoder.encode(entry)
    # msgpack: a 5-array of index, term, kind, bin data, timestamp (the Struct's array_like form)
    head = _encoder.encode((entry.index, entry.term, int(entry.kind)))
    binary = b"\xc5" + n.to_bytes(2, "big") if n < 65536 else b"\xc6" + n.to_bytes(4, "big")
    return b"\x95" + head[1:] + binary, data, _encoder.encode(entry.timestamp)


def decode_entry(data: bytes) -> Entry:
    return _entry_decoder.decode(data)


def encode_entries(entries: list[Entry] | tuple[Entry, ...]) -> bytes:
    """One msgpack array of entries: cheaper than encoding each entry on its own."""
    return _encoder.encode(entries)


def decode_entries(data: bytes) -> list[Entry]:
    return _entries_decoder.decode(data)


def encode_hard_state(hs: HardState) -> bytes:
    return _encoder.encode(hs)


def decode_hard_state(data: bytes) -> HardState:
    return _hard_state_decoder.decode(data)


def encode_config(config: ConfigState) -> bytes:
    """The `data` of a CONFIG entry."""
    return _encoder.encode(config)


def decode_config(data: bytes) -> ConfigState:
    return _config_decoder.decode(data)


def encode_config_history(history: list[tuple[int, ConfigState]]) -> bytes:
    """`RaftNode.config_history(...)`, for the meta of a checkpoint."""
    return _encoder.encode(history)


def decode_config_history(data: bytes) -> list[tuple[int, ConfigState]]:
    return _config_history_decoder.decode(data)
