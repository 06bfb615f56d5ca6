"""IO-free Raft (etcd RawNode style) for quorum queues and the metadata store.

Public API: `RaftNode` (step / tick / propose / ready / advance, membership, transfer,
compact), `Ready` and `Persisted` (the persistence contract, see ready.py), `RaftOptions`,
the log entry and message types with their wire encoding (messages.py), errors, and the state
machine interface (machine.py). Used by `quorum/driver.py`, `tests/raft/` and `tests/sim/`.
"""

from .errors import ConfigChangeInProgress, NotLeader, ProposalDropped, RaftError
from .machine import KvChanged, KvDelete, KvMachine, KvSet, LocalEffect, Meta, StateMachine
from .log import LogReader
from .membership import make_config
from .messages import (Append, AppendResp, ConfigState, Entry, EntryKind, HardState, Heartbeat,
                       HeartbeatResp, InstallSnapshot, Message, PreVote, PreVoteResp, Snapshot,
                       SnapshotMeta, TimeoutNow, Vote, VoteResp, decode_config,
                       decode_config_history, decode_entries, decode_entry, decode_hard_state,
                       decode_message, encode_config, encode_config_history, encode_entries,
                       encode_entry, encode_hard_state, encode_message, entry_pieces)
from .node import RaftNode
from .options import RaftOptions
from .ready import Persisted, ReadState, Ready, Role

__all__ = [
    "RaftNode", "Ready", "Persisted", "Role", "RaftOptions", "LogReader", "ReadState",
    "RaftError", "NotLeader", "ProposalDropped", "ConfigChangeInProgress",
    "Meta", "StateMachine", "LocalEffect", "KvMachine", "KvSet", "KvDelete", "KvChanged",
    "make_config",
    "Entry", "EntryKind", "HardState", "ConfigState", "SnapshotMeta", "Snapshot", "Message",
    "Append", "AppendResp", "Heartbeat", "HeartbeatResp", "PreVote", "PreVoteResp", "Vote",
    "VoteResp", "InstallSnapshot", "TimeoutNow",
    "encode_message", "decode_message", "encode_entry", "entry_pieces", "decode_entry", "encode_entries",
    "decode_entries", "encode_hard_state", "decode_hard_state", "encode_config", "decode_config",
    "encode_config_history", "decode_config_history",
]
