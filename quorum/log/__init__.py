"""Durable log for Raft groups: one shared WAL per node, per-group segments and snapshots.

Public API:
- `open_store(dir, LogConfig, disk) -> LogStore`: the synchronous core (recovers on open).
- `AsyncLog`: the trio wrapper with the single WAL writer task (group commit).
- `OsDisk` / `CrashDisk`: file operations; `CrashDisk` is the crash-and-fault test hook.
"""

from .disk import CrashDisk, OsDisk
from .group import LogError
from .recover import open_store
from .segment import CorruptSegment
from .snapshot import StoredSnapshot
from .store import GroupState, LogConfig, LogFailed, LogStore
from .wal import AsyncLog

__all__ = [
    "AsyncLog",
    "CorruptSegment",
    "CrashDisk",
    "GroupState",
    "LogConfig",
    "LogError",
    "LogFailed",
    "LogStore",
    "OsDisk",
    "StoredSnapshot",
    "open_store",
]
