"""`LogStore`: the synchronous core of the node's durable log (one shared WAL, many groups).

Used directly by tests and by `quorum.log.wal.AsyncLog`, which runs the IO steps in a worker
thread. Writes update the in-memory view at once (so reads see them) and queue an encoded WAL
record; nothing is durable until a batch has been written and fdatasynced:

    token = store.append("q1", [(1, 1, b"cmd")])    # in memory now
    batch, upto = store.take_batch()                  # every record queued by any group
    store.write_batch(batch)                          # IO: vectored writes + one fdatasync
    store.mark_durable(upto)                          # tokens <= upto are durable

`sync()` does those three steps (and a rollover when due) in one call. When the WAL grows past
`wal_max_size_bytes`, or the entries appended to memory tables since the last rollover pass
`mem_max_bytes` (payloads plus a per-entry overhead; memory tables hold every payload until then: quorum queue bodies stay in the
log, so this bounds what a backlog costs in memory), `begin_rollover()` freezes every group's memory table,
`switch_wal()` (IO) starts a new WAL that begins with a checkpoint of every group's hard state
and log end (later batches go to it), `write_segments()` (IO, may run beside those batches)
writes the frozen tables to segment files, `finish_rollover()` swaps the in-memory view over and
`drop_old_wal()` (IO) deletes the old WAL, which recovery replays until then. Any IO error puts the store in a failed state: every later call raises
`LogFailed`, and the node must stop (a write whose fate is unknown must not be built upon).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import Iterable

from . import records as R
from .disk import CacheTrail, OsDisk, payload_size
from .group import GroupLog, LogError, Mem
from .segment import SegmentInfo, write_segment
from .snapshot import (SNAPSHOT_FILE, StoredSnapshot, checkpoint_name, parse_checkpoint_name,
                       read_snapshot, write_snapshot)

__all__ = ["LogConfig", "LogStore", "LogFailed", "LogError", "GroupState"]

MAX_SEGMENT_ENTRIES = 65535
# What one entry in a memory table costs besides its payload (tuple, list slot, bytes header):
# counted towards `mem_max_bytes` so that many small entries roll the WAL over too.
_ENTRY_OVERHEAD = 128


class LogFailed(Exception):
    """A write or fsync failed; the log refuses all further work. Stop the node."""


@dataclass(frozen=True, slots=True)
class LogConfig:
    wal_max_size_bytes: int = 512 * 1024 * 1024
    segment_max_entries: int = 4096
    mem_max_bytes: int = 32 * 1024 * 1024

    def __post_init__(self) -> None:
        if not 1 <= self.segment_max_entries <= MAX_SEGMENT_ENTRIES:
            raise ValueError(f"segment_max_entries must be 1..{MAX_SEGMENT_ENTRIES}")


@dataclass(frozen=True, slots=True)
class GroupState:
    """What a restarting Raft node needs to know about its group's log."""

    first_index: int
    last_index: int
    last_term: int
    term: int
    vote: str | None
    commit: int
    snapshot_index: int
    snapshot_term: int


@dataclass(slots=True)
class _Rollover:
    frozen: list[tuple[GroupLog, Mem]]
    chunks: list[tuple[GroupLog, int, list[tuple[int, int, bytes]]]]
    checkpoint: bytes
    wal_seq: int
    garbage: list[str] = field(default_factory=list)
    segments: dict[str, list[SegmentInfo]] = field(default_factory=dict)
    old_wal: tuple[int | None, str | None] = (None, None)  # (fd, path) until the segments are durable
    fsyncs: int = 0


def wal_name(seq: int) -> str:
    return f"{seq:016d}.wal"


def group_dir_name(group: str) -> str:
    """Group ids are arbitrary strings; hex keeps them safe as directory names."""
    return group.encode().hex()


class LogStore:
    """See the module docstring. Build with `quorum.log.recover.open_store`."""

    def __init__(self, directory: str, config: LogConfig, disk: OsDisk) -> None:
        self.directory = directory
        self.config = config
        self.disk = disk
        self.groups: dict[str, GroupLog] = {}
        self.wal_dir = os.path.join(directory, "wal")
        self.groups_dir = os.path.join(directory, "groups")
        # whole records (bytes) and entries as (head, payload), framed by `write_batch`
        self._pending: list[bytes | tuple[bytes, bytes]] = []
        self.pending_bytes = 0  # what the next batch writes, about
        self._seq = 0  # token of the latest queued write
        self._durable = 0
        self._wal_fd: int | None = None
        self._wal_path = ""
        self._wal_seq = 0
        self._wal_size = 0
        self._mem_bytes = 0  # payload bytes appended to memory tables since the last rollover
        self._mark_next = False  # the next write starts with a commit mark (records.py)
        self._wal_cache = CacheTrail()  # the WAL is read back only at recovery
        self._seg_counter = 0
        self._garbage: list[str] = []  # files to delete once a rollover checkpoint is durable
        self._garbage_bytes = 0  # their size: past `mem_max_bytes` a rollover is due at once
        self._deleting: list[tuple[int, str]] = []  # (token of the DELETE record, group)
        self._deleted: set[str] = set()  # ids deleted in this process (reuse is refused)
        # held by the worker threads that write a snapshot file or remove deleted groups'
        # directories: a snapshot of a group deleted meanwhile is then either removed with its
        # directory or never written (see write_snapshot_file)
        self._dirs_lock = threading.Lock()
        self._failed: BaseException | None = None
        self._failure = ""
        self.fsyncs = 0
        self.batches = 0

    # -- state -------------------------------------------------------------------------------
    @property
    def durable(self) -> int:
        """Every token <= this is on disk."""
        return self._durable

    @property
    def last_token(self) -> int:
        return self._seq

    @property
    def failed(self) -> BaseException | None:
        return self._failed

    @property
    def failure(self) -> str:
        """What failed, and where (the text of the first `LogFailed`); "" while healthy."""
        return self._failure

    def _fail(self, error: OSError, what: str) -> LogFailed:
        """Enter the failed state; returns the `LogFailed` to raise."""
        self._failed = error
        self._failure = f"{what}: {error!r}"
        return LogFailed(self._failure)

    def _check(self) -> None:
        if self._failed is not None:
            raise self.failed_error() from self._failed

    def failed_error(self) -> LogFailed:
        """The error every call after the failure raises: it repeats what failed, and where."""
        return LogFailed(f"log failed: {self._failure or repr(self._failed)}")

    def _group(self, group: str) -> GroupLog:
        g = self.groups.get(group)
        if g is None:
            if group in self._deleted:
                raise LogError(f"group id {group!r} was deleted; ids must not be reused")
            g = self.groups[group] = GroupLog(group, os.path.join(self.groups_dir, group_dir_name(group)))
        return g

    def hard_state(self, group: str) -> tuple[int, str | None, int]:
        """(term, vote, commit) as last written (durable once its token is)."""
        h = self._group(group).hard
        return h.term, h.vote, h.commit

    def group_names(self) -> list[str]:
        return sorted(self.groups)

    def state(self, group: str) -> GroupState:
        g = self._group(group)
        last_term = g.term(self.disk, g.last_index) or 0
        h = g.hard
        return GroupState(g.first_index, g.last_index, last_term, h.term, h.vote, h.commit,
                          g.snap_index, g.snap_term)

    # -- writes ------------------------------------------------------------------------------
    def _queue(self, rec: bytes) -> int:
        self._pending.append(rec)
        self.pending_bytes += len(rec)
        self._seq += 1
        return self._seq

    def append(self, group: str, entries: Iterable[tuple[int, int, bytes]]) -> int:
        """Write entries (consecutive indexes); the first may overwrite a suffix. Returns a token."""
        self._check()
        g = self._group(group)
        prefix = g.entry_prefix
        head = R.entry_head
        add = self._pending.append
        n = 0
        size = 0
        for index, term, payload in entries:
            if n == 0:
                g.check_append(index)
            elif index != g.last_index + 1:
                raise LogError(f"group {group!r}: entries not consecutive at {index}")
            g.put(index, term, payload)
            add((head(prefix, index, term), payload))  # framed and written by the writer thread
            size += payload_size(payload) + _ENTRY_OVERHEAD
            n += 1
        self._mem_bytes += size
        self.pending_bytes += size
        self._seq += 1
        return self._seq

    def truncate(self, group: str, from_index: int) -> int:
        """Drop entries >= from_index (a follower removing a conflicting suffix)."""
        self._check()
        g = self._group(group)
        if g.deleted:
            raise LogError(f"group {group!r} is deleted")
        if from_index <= g.snap_index:
            raise LogError(f"group {group!r}: truncate at {from_index} below snapshot {g.snap_index}")
        g.cut(from_index)
        return self._queue(R.encode_truncate(g.key, from_index))

    def set_hard_state(self, group: str, term: int, vote: str | None, commit: int) -> int:
        self._check()
        g = self._group(group)
        h = g.hard
        h.term, h.vote, h.commit = term, vote, commit
        return self._queue(R.encode_hard_state(g.key, term, vote, commit))

    def delete_group(self, group: str) -> int:
        """Delete the group and all its durable state. Its files are removed once the DELETE
        record is durable (`take_deletions` / `remove_files`). The id must never be used
        again (give each incarnation of a queue a fresh id, as ra does with its UIDs)."""
        self._check()
        g = self._group(group)
        g.deleted = True
        token = self._queue(R.encode_delete(g.key))
        self._deleting.append((token, group))
        return token

    def take_deletions(self) -> list[str]:
        """Groups whose DELETE record is durable: forget them; returns their directories,
        for `remove_files` (IO)."""
        dirs = []
        keep = []
        for token, name in self._deleting:
            if token <= self._durable:
                g = self.groups.pop(name, None)
                self._deleted.add(name)
                if g is not None:
                    dirs.append(g.directory)
            else:
                keep.append((token, name))
        self._deleting = keep
        return dirs

    def is_deleted(self, group: str) -> bool:
        """Deleted, or its DELETE record is queued."""
        if group in self._deleted:
            return True
        g = self.groups.get(group)
        return g is not None and g.deleted

    def remove_files(self, dirs: list[str]) -> None:
        """IO: remove deleted groups' directories (snapshot, segments)."""
        with self._dirs_lock:
            try:
                for d in dirs:
                    for name in self.disk.listdir(d):
                        self.disk.remove(os.path.join(d, name))
                    if self.disk.exists(d):
                        os.rmdir(d)
                if dirs:
                    self.disk.fsync_dir(self.groups_dir)
            except OSError as e:
                raise self._fail(e, "removing deleted groups failed") from e

    def write_snapshot_file(self, group: str, snap: StoredSnapshot, checkpoint: bool = False) -> None:
        """IO (worker thread in the async log): make the snapshot file (with `checkpoint`, the
        checkpoint file of `snap.index`) durable. Call `note_snapshot` afterwards for a
        snapshot, from the owning thread. Nothing is written for a group deleted meanwhile (a
        queue deleted while its snapshot was on the way): its directory may be gone already,
        and must not come back."""
        self._check()
        d = os.path.join(self.groups_dir, group_dir_name(group))
        name = checkpoint_name(snap.index) if checkpoint else SNAPSHOT_FILE
        with self._dirs_lock:
            if self.is_deleted(group):
                return
            try:
                self._ensure_dir(d)
                write_snapshot(self.disk, d, snap, name)
            except OSError as e:
                raise self._fail(e, f"{name} write failed") from e

    def checkpoint_indexes(self, group: str) -> list[int]:
        """IO: the indexes of the group's checkpoint files, in order."""
        d = os.path.join(self.groups_dir, group_dir_name(group))
        if not self.disk.exists(d):
            return []
        found = (parse_checkpoint_name(name) for name in self.disk.listdir(d))
        return sorted(i for i in found if i is not None)

    def read_checkpoint(self, group: str, index: int) -> StoredSnapshot | None:
        """IO: the checkpoint at `index`, None if missing or damaged."""
        return self.read_snapshot(group, checkpoint_name(index))

    def drop_checkpoints(self, group: str, indexes: list[int]) -> None:
        """IO: remove these checkpoint files of the group (passed by a snapshot, or unusable)."""
        d = os.path.join(self.groups_dir, group_dir_name(group))
        with self._dirs_lock:
            try:
                for index in indexes:
                    self.disk.remove(os.path.join(d, checkpoint_name(index)))
            except OSError as e:
                raise self._fail(e, "checkpoint removal failed") from e

    def note_snapshot(self, group: str, index: int, term: int, discard: bool) -> int:
        """The snapshot file at (index, term) is durable: compact (or with `discard`, replace)
        the group's log and queue the WAL record that says so. For a group deleted meanwhile
        nothing (0): no record may follow its DELETE, and a file written before the deletion
        goes with the group's directory."""
        self._check()
        if self.is_deleted(group):
            return 0
        g = self._group(group)
        self._throw_away(g.compact(index, term, discard))
        return self._queue(R.encode_snapshot(g.key, index, term, discard))

    def _throw_away(self, segments: list[SegmentInfo]) -> None:
        """Segments no longer needed go at the next rollover, once its checkpoint is durable.
        When they add up to more than a rollover's worth of memory tables, that rollover is due
        now: a drained backlog gives its disk back without waiting for more traffic."""
        self._garbage.extend(s.path for s in segments)
        self._garbage_bytes += sum(s.size for s in segments)

    def save_snapshot(self, group: str, snap: StoredSnapshot, discard: bool = False) -> int:
        self.write_snapshot_file(group, snap)
        return self.note_snapshot(group, snap.index, snap.term, discard)

    # -- reads -------------------------------------------------------------------------------
    def entries(self, group: str, lo: int, hi: int) -> list[tuple[int, int, bytes]]:
        """(index, term, payload) for lo..hi inclusive: memory, else segment files."""
        return self._group(group).entries(self.disk, lo, hi)

    def term(self, group: str, index: int) -> int | None:
        return self._group(group).term(self.disk, index)

    def read_snapshot(self, group: str, name: str = SNAPSHOT_FILE) -> StoredSnapshot | None:
        return read_snapshot(self.disk, os.path.join(self.groups_dir, group_dir_name(group)), name)

    # -- batches -----------------------------------------------------------------------------
    def take_batch(self) -> tuple[list, int]:
        """Everything queued since the last batch, and the token it makes durable."""
        batch, self._pending = self._pending, []
        self.pending_bytes = 0
        return batch, self._seq

    def write_batch(self, batch: list, fsync: bool = True) -> None:
        """IO: the records of `batch` (from `take_batch`) framed, written with vectored writes
        and made durable with one fdatasync of the current WAL file. `fsync=False` is for
        crash tests only (written, not durable: a later fdatasync or a crash decides)."""
        self._check()
        # everything before this write was fsynced: it starts with a commit mark
        pieces = R.wal_pieces(batch, R.COMMIT_MARK if self._mark_next else b"")
        try:
            size = self.disk.write_pieces(self._wal_fd, pieces)  # type: ignore[arg-type]
            self._mark_next = False
            if fsync:
                self.disk.fdatasync(self._wal_fd)  # type: ignore[arg-type]
                self._mark_next = True
        except OSError as e:
            raise self._fail(e, f"WAL {self._wal_path} write failed") from e
        self._wal_size += size
        if fsync:
            span = self._wal_cache.advance(self._wal_size)
            if span is not None:
                self.disk.drop_cached(self._wal_fd, *span)  # type: ignore[arg-type]
        self.fsyncs += fsync
        self.batches += 1

    def mark_durable(self, upto: int) -> None:
        self._durable = max(self._durable, upto)

    def sync(self) -> int:
        """Synchronous group commit of everything queued, then a rollover if one is due."""
        self._check()
        batch, upto = self.take_batch()
        if batch or upto > self._durable:
            self.write_batch(batch)
        self.mark_durable(upto)
        if self._deleting:
            self.remove_files(self.take_deletions())
        if self.needs_rollover():
            plan = self.begin_rollover()
            self.run_rollover(plan)
            self.finish_rollover(plan)
        return self._durable

    # -- rollover ----------------------------------------------------------------------------
    @property
    def housekeeping_due(self) -> bool:
        """A rollover, or deleted groups' files to remove (the WAL writer's `_housekeep`)."""
        return bool(self._deleting) or self.needs_rollover()

    def needs_rollover(self) -> bool:
        return (self._wal_size > self.config.wal_max_size_bytes
                or self._mem_bytes > self.config.mem_max_bytes
                or self._garbage_bytes > self.config.mem_max_bytes)

    def begin_rollover(self) -> _Rollover:
        """Freeze every memory table and capture the checkpoint for the next WAL."""
        frozen, chunks, ckpt = [], [], []
        size = self.config.segment_max_entries
        for name in sorted(self.groups):
            g = self.groups[name]
            mem = g.mems[-1]
            g.mems.append(Mem())
            frozen.append((g, mem))
            ents = [e for e in mem.entries() if e[0] > g.snap_index]
            for i in range(0, len(ents), size):
                chunks.append((g, self._seg_counter, ents[i : i + size]))
                self._seg_counter += 1
            h = g.hard
            ckpt.append(R.encode_hard_state(g.key, h.term, h.vote, h.commit))
            ckpt.append(R.encode_truncate(g.key, g.last_index + 1))
        garbage, self._garbage = self._garbage, []
        self._garbage_bytes = 0
        self._mem_bytes = 0
        return _Rollover(frozen, chunks, b"".join(ckpt), self._wal_seq + 1, garbage)

    def _ensure_dir(self, d: str) -> None:
        if not self.disk.exists(d):
            self.disk.makedirs(d)
            self.disk.fsync_dir(os.path.dirname(d))

    def run_rollover(self, plan: _Rollover) -> None:
        """IO, the three steps in a row (`sync`, tests). `AsyncLog` runs `switch_wal` in its
        writer's sequence and the other two beside later WAL batches."""
        self.switch_wal(plan)
        self.write_segments(plan)
        self.drop_old_wal(plan)

    def switch_wal(self, plan: _Rollover) -> None:
        """IO: start the next WAL, its checkpoint first; later batches go to it. The old WAL
        stays until the segments that hold its entries are durable (`drop_old_wal`): until
        then recovery replays both, in order."""
        self._check()
        try:
            plan.old_wal = (self._wal_fd, self._wal_path)
            self._start_wal(plan.wal_seq, plan.checkpoint)
        except OSError as e:
            raise self._fail(e, f"WAL rollover ({self.wal_dir}) failed") from e

    def write_segments(self, plan: _Rollover) -> None:
        """IO: the frozen memory tables to segment files, durable (names and directories
        too). Touches nothing a concurrent `write_batch` does."""
        self._check()
        try:
            dirs = []
            for g, counter, ents in plan.chunks:
                self._ensure_dir(g.directory)
                seg = write_segment(self.disk, g.directory, counter, ents, sync_dir=False)
                plan.segments.setdefault(g.name, []).append(seg)
                if g.directory not in dirs:
                    dirs.append(g.directory)
            for d in dirs:
                self.disk.fsync_dir(d)
            plan.fsyncs = len(plan.chunks)
        except OSError as e:
            raise self._fail(e, f"WAL rollover ({self.wal_dir}) failed") from e

    def drop_old_wal(self, plan: _Rollover) -> None:
        """IO, once the segments are durable: delete the old WAL and the garbage."""
        try:
            old_fd, old_path = plan.old_wal
            if old_fd is not None:
                self.disk.close(old_fd)
            if old_path is not None:
                self.disk.remove(old_path)
            plan.old_wal = (None, None)
            for path in plan.garbage:
                self.disk.remove(path)
            self.disk.fsync_dir(self.wal_dir)
            plan.fsyncs += 1
        except OSError as e:
            raise self._fail(e, f"WAL rollover ({self.wal_dir}) failed") from e

    def _start_wal(self, seq: int, head: bytes) -> None:
        """Create WAL `seq` holding `head`, atomically: tmp, fsync, rename, fsync dir."""
        final = os.path.join(self.wal_dir, wal_name(seq))
        self.disk.replace_file(final, (R.WAL_MAGIC, head))
        self._wal_fd = self.disk.open_log(final)
        self._wal_path, self._wal_seq = final, seq
        self._wal_size = len(R.WAL_MAGIC) + len(head)
        self._wal_cache.restart()
        self._mark_next = True  # the new file is durable as written

    def finish_rollover(self, plan: _Rollover) -> None:
        """Once `write_segments` is done: reads go to the segments, the frozen tables go."""
        self.fsyncs += plan.fsyncs
        for g, mem in plan.frozen:
            g.mems = [m for m in g.mems if m is not mem]
            self._throw_away(g.add_segments(plan.segments.get(g.name, [])))

    # -- lifecycle ---------------------------------------------------------------------------
    def close(self) -> None:
        """Close the WAL file. Queued but unsynced writes are dropped (as in a crash)."""
        if self._wal_fd is not None:
            try:
                self.disk.close(self._wal_fd)
            except OSError:
                pass
            self._wal_fd = None

    def statistics(self) -> dict[str, int]:
        return {"groups": len(self.groups), "wal_size": self._wal_size, "fsyncs": self.fsyncs,
                "batches": self.batches, "durable": self._durable, "queued": self._seq - self._durable,
                "mem_bytes": self._mem_bytes}
