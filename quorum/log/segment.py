"""Immutable per-group segment files: entries flushed out of the WAL.

Written by `quorum.log.store` when the WAL rolls over (in the WAL writer's worker thread), read
back by `quorum.log.group` when an entry is no longer in memory, found by `quorum.log.recover`.

A segment is written to a ``.tmp`` name, fsynced, renamed into place and its directory fsynced,
so a segment with a final name is always complete. Its name carries a node-wide creation
counter and its index range: ``<counter>-<first>-<last>.seg``. Later segments supersede earlier
ones from their first index on (the same rule as a Raft append), so recovery replays them in
counter order. Records are ``<u32 len><u32 crc><u64 index><u64 term><payload>`` with the
checksum over everything after it: a CRC-32C, bit 31 of the length set (a zlib CRC-32 in
segments of earlier versions: `checksum.py`).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from array import array
from typing import Sequence

from . import checksum as C
from .disk import OsDisk, Pieces, payload_size

__all__ = ["SEG_MAGIC", "SegmentInfo", "CorruptSegment", "segment_name", "parse_segment_name",
           "write_segment", "read_segment_range"]

SEG_MAGIC = b"QSEG0001"
_HEAD = struct.Struct("<IIQQ")  # length of (index, term, payload), crc, index, term
_IT = struct.Struct("<QQ")


class CorruptSegment(Exception):
    """A segment with a final name failed its checksum: the disk lied. The node must stop."""


@dataclass(slots=True)
class SegmentInfo:
    """A segment file holding entries first..last_written. `offsets[i]` and `terms[i]` belong
    to entry `first + i`; they are loaded on first use."""

    path: str
    counter: int
    first: int
    last_written: int
    offsets: Sequence[int] | None = field(default=None, repr=False)
    terms: Sequence[int] | None = field(default=None, repr=False)
    size: int = 0  # bytes on disk

    def term(self, disk: OsDisk, index: int) -> int:
        if self.terms is None:
            self.offsets, self.terms = _load_index(disk, self)
        return self.terms[index - self.first]


def segment_name(counter: int, first: int, last: int) -> str:
    return f"{counter:016d}-{first:016d}-{last:016d}.seg"


def parse_segment_name(name: str) -> tuple[int, int, int] | None:
    if not name.endswith(".seg"):
        return None
    parts = name[:-4].split("-")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        return None
    return int(parts[0]), int(parts[1]), int(parts[2])


def encode_segment(entries: Sequence[tuple[int, int, bytes]]) -> tuple[list, list[int]]:
    """Entries are consecutive (index, term, payload) tuples. Returns the file's bytes as
    pieces for a vectored write (`disk.Pieces`: a segment is never one big copy of its
    payloads) and the offset of each record."""
    out = Pieces(SEG_MAGIC)
    offsets = []
    pos = len(SEG_MAGIC)
    for index, term, payload in entries:
        it = _IT.pack(index, term)
        crc = C.checksum_payload(payload, C.checksum(it))
        size = payload_size(payload)
        out.put(struct.pack("<II", C.length_field(len(it) + size), crc) + it)
        out.put_payload(payload)
        offsets.append(pos)
        pos += 8 + len(it) + size
    return out.done(), offsets


def write_segment(disk: OsDisk, directory: str, counter: int,
                  entries: Sequence[tuple[int, int, bytes]], sync_dir: bool = True) -> SegmentInfo:
    """Write, fsync and rename one segment into place. Runs in the WAL writer's thread."""
    first, last = entries[0][0], entries[-1][0]
    final = os.path.join(directory, segment_name(counter, first, last))
    pieces, offsets = encode_segment(entries)
    size = disk.replace_file(final, pieces, sync_dir)
    return SegmentInfo(final, counter, first, last, array("Q", offsets),
                       array("Q", [e[1] for e in entries]), size)


def _load_index(disk: OsDisk, seg: SegmentInfo) -> tuple[array, array]:
    """Record offsets and terms of a segment, read once on first use."""
    data = disk.read_file(seg.path)
    if data[: len(SEG_MAGIC)] != SEG_MAGIC:
        raise CorruptSegment(seg.path)
    offsets = []
    terms = []
    pos = len(SEG_MAGIC)
    while pos + _HEAD.size <= len(data):
        field, _crc, _i, term = _HEAD.unpack_from(data, pos)
        offsets.append(pos)
        terms.append(term)
        pos += 8 + C.record_length(field)
    if len(offsets) != seg.last_written - seg.first + 1:
        raise CorruptSegment(f"{seg.path}: {len(offsets)} records")
    # kept for the segment's life: 16 bytes an entry, not two int objects and list slots
    # (a backlog of millions of messages is read back through these)
    return array("Q", offsets), array("Q", terms)


def read_segment_range(disk: OsDisk, seg: SegmentInfo, lo: int, hi: int) -> list[tuple[int, int, bytes]]:
    """Entries lo..hi inclusive (which must lie within `seg`), checksums verified."""
    if seg.offsets is None:
        seg.offsets, seg.terms = _load_index(disk, seg)
    offs = seg.offsets
    start = offs[lo - seg.first]
    end_i = hi - seg.first + 1
    if end_i < len(offs):
        end = offs[end_i]
    else:
        end = os.path.getsize(seg.path)
    data = disk.pread(seg.path, start, end - start)
    out = []
    pos = 0
    while pos < len(data):
        field, crc, index, term = _HEAD.unpack_from(data, pos)
        length = C.record_length(field)
        body = memoryview(data)[pos + 8 : pos + 8 + length]
        if not C.verify(field, body, crc):
            raise CorruptSegment(f"{seg.path}: entry {index}")
        out.append((index, term, bytes(body[_IT.size :])))
        pos += 8 + length
    return out
