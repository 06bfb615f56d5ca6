"""Open a node's log directory: rebuild every group from segments, snapshots and the WAL.

Called once at node start (`open_store`, or `quorum.log.wal.AsyncLog.open`). Layout:

    <dir>/wal/<seq>.wal                     the shared WAL (only the newest one matters)
    <dir>/groups/<hex group id>/<counter>-<first>-<last>.seg
    <dir>/groups/<hex group id>/snapshot

Replay order mirrors the order things happened: segments in creation order (each supersedes
older entries from its first index on), then the WAL files oldest first, each beginning with
the checkpoint (hard state and log end of every group) written when it was started, then the
snapshot file if it is newer than any snapshot record seen. There are two WAL files when the
node stopped during a rollover: the new one takes writes as soon as it exists, and the old one
is deleted only once the segments holding its entries are durable. A torn or corrupt WAL tail
is cut off (truncate + fdatasync) before the newest file is reopened for appends. ``.tmp``
files are leftovers of an interrupted rollover or snapshot and are deleted.
"""

from __future__ import annotations

import logging
import os

from . import records as R
from .disk import OsDisk, is_zero_tail
from .group import GroupLog
from .segment import SegmentInfo, parse_segment_name
from .snapshot import read_snapshot
from .store import LogConfig, LogFailed, LogStore, group_dir_name

__all__ = ["open_store"]

_log = logging.getLogger(__name__)


def open_store(directory: str, config: LogConfig | None = None, disk: OsDisk | None = None) -> LogStore:
    disk = disk or OsDisk()
    store = LogStore(directory, config or LogConfig(), disk)
    fresh = not disk.exists(store.wal_dir)
    for d in (directory, store.wal_dir, store.groups_dir):
        disk.makedirs(d)
    if fresh:  # make the new directories themselves durable, not just their contents
        disk.fsync_dir(directory)
        disk.fsync_dir(os.path.dirname(os.path.abspath(directory)))
    counter = _load_groups(store)
    store._seg_counter = counter
    snaps = {name: read_snapshot(disk, g.directory) for name, g in store.groups.items()}
    deleted = _replay_wal(store)
    for name in deleted:
        snaps.pop(name, None)
        store._deleted.add(name)
    store.remove_files([os.path.join(store.groups_dir, group_dir_name(n)) for n in deleted])
    for name, snap in snaps.items():
        g = store.groups[name]
        if snap is not None and snap.index > g.snap_index:
            g.compact(snap.index, snap.term, discard=False)
    for g in store.groups.values():
        if g.last_index < g.snap_index:
            g.last_index = g.snap_index
        g.hard.commit = max(g.hard.commit, g.snap_index)
    return store


def _load_groups(store: LogStore) -> int:
    """Segments of every group directory; returns the next segment counter."""
    disk = store.disk
    nxt = 0
    for dname in disk.listdir(store.groups_dir):
        try:
            name = bytes.fromhex(dname).decode()
        except ValueError:
            continue
        d = os.path.join(store.groups_dir, dname)
        g = store.groups[name] = GroupLog(name, d)
        segs = []
        for fname in disk.listdir(d):
            if fname.endswith(".tmp"):
                disk.remove(os.path.join(d, fname))
                continue
            parsed = parse_segment_name(fname)
            if parsed is not None:
                path = os.path.join(d, fname)
                segs.append(SegmentInfo(path, *parsed, size=disk.size(path)))
        segs.sort(key=lambda s: s.counter)
        if segs:  # in creation order, each superseding older entries from its first on
            store._throw_away(g.add_segments(segs))
            g.last_index = segs[-1].last_written
            nxt = max(nxt, segs[-1].counter + 1)
    return nxt


def _replay_wal(store: LogStore) -> list[str]:
    """Replay the WAL files; returns the groups they deleted (ids are never reused, so a
    DELETE record is final)."""
    disk = store.disk
    deleted: list[str] = []
    names = []
    for fname in disk.listdir(store.wal_dir):
        if fname.endswith(".tmp"):
            disk.remove(os.path.join(store.wal_dir, fname))
        elif fname.endswith(".wal") and fname[:-4].isdigit():
            names.append(fname)
    names.sort()
    if not names:
        store._start_wal(1, b"")
        return deleted
    # every WAL left is replayed, oldest first: an older one is the WAL of a rollover whose
    # segments were not all durable yet (each begins with a checkpoint, so order is enough)
    for name in names:
        path = os.path.join(store.wal_dir, name)
        end = _replay_file(store, path, deleted)
    disk.fsync_dir(store.wal_dir)
    store._wal_fd = disk.open_log(path)
    store._wal_path = path
    store._wal_seq = int(names[-1][:-4])
    store._wal_size = end
    store._mark_next = True  # what is on disk now is durable
    if len(names) > 1:
        # their entries are in the memory tables now: the next rollover writes them to
        # segments and then deletes them with its garbage; it comes at the first chance
        store._garbage.extend(os.path.join(store.wal_dir, n) for n in names[:-1])
        store._mem_bytes = store.config.mem_max_bytes + 1
    return deleted


def _replay_file(store: LogStore, path: str, deleted: list[str]) -> int:
    """Apply one WAL file's records; cut a torn tail. Returns where its intact records end."""
    disk = store.disk
    data = disk.read_file(path)
    start = len(R.WAL_MAGIC)
    if data[:start] != R.WAL_MAGIC:
        raise OSError(f"{path}: not a WAL file")
    recs, end = R.scan(data, start)
    for rec in recs:
        if isinstance(rec, R.DeleteRec):
            store.groups.pop(rec.group, None)
            deleted.append(rec.group)
        else:
            _apply(store, rec)
    if end < len(data):
        mark = R.mark_after(data, end)
        if mark is not None:
            raise LogFailed(f"WAL {path}: damaged record at offset {end}, before data that was "
                            f"already durable (a commit mark at offset {mark}); refusing to "
                            "start rather than lose or serve damaged entries. Restore the data "
                            "directory from a backup, or replace this node's data from its peers")
        if not is_zero_tail(data, end):  # else space allocated ahead (`OsDisk.open_log`)
            _log.warning("WAL %s: cut a torn or corrupt tail of %d bytes at offset %d (writes "
                         "not yet durable when the node stopped)", path, len(data) - end, end)
        disk.truncate(path, end)
        fd = disk.open_append(path)
        disk.fdatasync(fd)
        disk.close(fd)
    return end


def _apply(store: LogStore, rec: R.Record) -> None:
    g = store._group(rec.group)
    match rec:
        case R.EntryRec(index=index, term=term, payload=payload):
            g.put(index, term, payload)
        case R.TruncateRec(from_index=from_index):
            g.cut(from_index)
        case R.HardStateRec(term=term, vote=vote, commit=commit):
            g.hard.term, g.hard.vote, g.hard.commit = term, vote, commit
        case R.SnapshotRec(index=index, term=term, discard=discard):
            store._throw_away(g.compact(index, term, discard))
