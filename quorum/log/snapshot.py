"""One snapshot file per group, replaced atomically, and one checkpoint file in the same form.

Called by `quorum.log.store` (save) and `quorum.log.recover` (load). The file is written as
``snapshot.tmp``, fdatasynced, renamed to ``snapshot`` and the directory fsynced, so the name
``snapshot`` always holds a complete snapshot (old or new). A checkpoint (``checkpoint.<index>``,
several per group) is a snapshot that does not compact the log: the state at an applied index,
so that a restart need not replay the whole log, and a later compaction point (a quorum queue
with a deep backlog cannot compact its log until its consumers pass one). Layout:
``QSNP0001 <u64 index><u64 term><u32 crc32><u32 meta length><meta><data>`` with the checksum
over everything after it. `meta` is opaque to the log (the driver stores the Raft membership
there); `data` is the state machine's snapshot.
"""

from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass

from .disk import OsDisk

__all__ = ["StoredSnapshot", "write_snapshot", "read_snapshot", "SNAPSHOT_FILE",
           "checkpoint_name", "parse_checkpoint_name"]

SNAPSHOT_FILE = "snapshot"
_CHECKPOINT = "checkpoint."
_MAGIC = b"QSNP0001"
_HEAD = struct.Struct("<QQII")
_IT = struct.Struct("<QQ")  # the checksum covers index, term, meta and data


@dataclass(frozen=True, slots=True)
class StoredSnapshot:
    index: int
    term: int
    meta: bytes = b""
    data: bytes = b""


def checkpoint_name(index: int) -> str:
    return f"{_CHECKPOINT}{index:020d}"


def parse_checkpoint_name(name: str) -> int | None:
    """The index of a checkpoint file's name, else None (``.tmp`` files included)."""
    if not name.startswith(_CHECKPOINT):
        return None
    rest = name[len(_CHECKPOINT):]
    return int(rest) if rest.isdigit() else None


def write_snapshot(disk: OsDisk, directory: str, snap: StoredSnapshot,
                   name: str = SNAPSHOT_FILE) -> None:
    # the checksum runs over the pieces and they are written as they are: a checkpoint of a
    # deep queue is hundreds of MB, not to be copied twice on its way to disk
    crc = zlib.crc32(snap.data, zlib.crc32(snap.meta, zlib.crc32(_IT.pack(snap.index, snap.term))))
    head = _MAGIC + _HEAD.pack(snap.index, snap.term, crc, len(snap.meta))
    disk.replace_file(os.path.join(directory, name), (head, snap.meta, snap.data))


def read_snapshot(disk: OsDisk, directory: str, name: str = SNAPSHOT_FILE) -> StoredSnapshot | None:
    """The group's snapshot (or checkpoint), or None. A corrupt file reads as None: it can only
    be a bug or a lying disk, since a torn write never gets the final name."""
    path = os.path.join(directory, name)
    if not disk.exists(path):
        return None
    blob = disk.read_file(path)
    if blob[: len(_MAGIC)] != _MAGIC or len(blob) < len(_MAGIC) + _HEAD.size:
        return None
    index, term, crc, mlen = _HEAD.unpack_from(blob, len(_MAGIC))
    rest = memoryview(blob)[len(_MAGIC) + _HEAD.size :]
    if zlib.crc32(rest, zlib.crc32(_IT.pack(index, term))) != crc:
        return None
    return StoredSnapshot(index, term, bytes(rest[:mlen]), bytes(rest[mlen:]))
