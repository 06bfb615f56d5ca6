"""One snapshot file per group, replaced atomically.

Called by `quorum.log.store` (save) and `quorum.log.recover` (load). The file is written as
``snapshot.tmp``, fdatasynced, renamed to ``snapshot`` and the directory fsynced, so the name
``snapshot`` always holds a complete snapshot (old or new). Layout:
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

__all__ = ["StoredSnapshot", "write_snapshot", "read_snapshot", "SNAPSHOT_FILE"]

SNAPSHOT_FILE = "snapshot"
_MAGIC = b"QSNP0001"
_HEAD = struct.Struct("<QQII")


@dataclass(frozen=True, slots=True)
class StoredSnapshot:
    index: int
    term: int
    meta: bytes = b""
    data: bytes = b""


def write_snapshot(disk: OsDisk, directory: str, snap: StoredSnapshot) -> None:
    body = struct.pack("<QQ", snap.index, snap.term) + snap.meta + snap.data
    crc = zlib.crc32(body)
    blob = b"".join((_MAGIC, _HEAD.pack(snap.index, snap.term, crc, len(snap.meta)), snap.meta, snap.data))
    disk.replace_file(os.path.join(directory, SNAPSHOT_FILE), (blob,))


def read_snapshot(disk: OsDisk, directory: str) -> StoredSnapshot | None:
    """The group's snapshot, or None. A corrupt file reads as None: it can only be a bug or a
    lying disk, since a torn write never gets the final name."""
    path = os.path.join(directory, SNAPSHOT_FILE)
    if not disk.exists(path):
        return None
    blob = disk.read_file(path)
    if blob[: len(_MAGIC)] != _MAGIC or len(blob) < len(_MAGIC) + _HEAD.size:
        return None
    index, term, crc, mlen = _HEAD.unpack_from(blob, len(_MAGIC))
    rest = blob[len(_MAGIC) + _HEAD.size :]
    if zlib.crc32(struct.pack("<QQ", index, term) + rest) != crc:
        return None
    return StoredSnapshot(index, term, rest[:mlen], rest[mlen:])
