"""Binary records of the shared write-ahead log, and the scanner that finds a torn tail.

Called by `quorum.log.store` (encoding appends) and `quorum.log.recover` (replay). Pure: bytes in,
records out; no files, no clocks.

Every record is framed as ``<u32 length><u32 crc><body>`` where ``crc`` is the CRC-32C of
``body`` (bit 31 of the length set; a zlib CRC-32 in records of earlier versions, bit 31 clear:
`checksum.py`) and ``body`` starts with one kind byte. A record whose header is short, whose length runs past
the end of the data, or whose checksum does not match ends the valid prefix: everything from
its first byte on is a torn or corrupt tail and must be truncated, never replayed.

A commit mark (`COMMIT_MARK`, a record of its own kind with no group) starts every write that
follows a successful fsync, and a new WAL file counts as fsynced: everything before an intact
mark was durable. `mark_after` finds one after a bad record: then the bad record is damage to
data already durable (the node must not start on it), not a torn tail.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import Iterator

from . import checksum as C
from .disk import Payload, Pieces, joined, payload_size

_checksum = C.checksum

__all__ = [
    "WAL_MAGIC",
    "EntryRec",
    "HardStateRec",
    "TruncateRec",
    "SnapshotRec",
    "DeleteRec",
    "Record",
    "encode_entry",
    "entry_head",
    "wal_pieces",
    "entry_prefix",
    "encode_hard_state",
    "encode_truncate",
    "encode_snapshot",
    "encode_delete",
    "scan",
    "COMMIT_MARK",
    "mark_after",
]

WAL_MAGIC = b"QWAL0001"

_FRAME = struct.Struct("<II")  # length of body (bit 31: CRC-32C), checksum of body
_GROUP_LEN = struct.Struct("<H")
_ENTRY = struct.Struct("<QQ")  # index, term
_HARD = struct.Struct("<QQ")  # term, commit
_TRUNC = struct.Struct("<Q")  # drop every entry with index >= this
_SNAP = struct.Struct("<QQB")  # index, term, discard-the-whole-log flag
_NO_VOTE = 0xFFFF

# A length above this cannot be real; treat it as garbage rather than trying to read it.
MAX_RECORD = 1 << 30

_K_ENTRY = 1
_K_HARD = 2
_K_TRUNC = 3
_K_SNAP = 4
_K_DELETE = 5
_K_MARK = 6


@dataclass(frozen=True, slots=True)
class EntryRec:
    group: str
    index: int
    term: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class HardStateRec:
    group: str
    term: int
    vote: str | None
    commit: int


@dataclass(frozen=True, slots=True)
class TruncateRec:
    """Entries with index >= `from_index` are gone (a follower dropping a conflicting suffix)."""

    group: str
    from_index: int


@dataclass(frozen=True, slots=True)
class SnapshotRec:
    """A snapshot at (index, term) is durable in the group's snapshot file. With `discard` the
    whole log was replaced (a follower installing a leader's snapshot), otherwise only the
    prefix up to `index` was compacted."""

    group: str
    index: int
    term: int
    discard: bool


@dataclass(frozen=True, slots=True)
class DeleteRec:
    """The group and all its durable state are deleted. Group ids are never reused."""

    group: str


Record = EntryRec | HardStateRec | TruncateRec | SnapshotRec | DeleteRec


def _frame(body: bytes) -> bytes:
    return _FRAME.pack(C.length_field(len(body)), C.checksum(body)) + body


def _group(group: bytes) -> bytes:
    return _GROUP_LEN.pack(len(group)) + group


def entry_prefix(group: bytes) -> bytes:
    """The constant start of every entry record body of `group` (callers keep it)."""
    return b"\x01" + _GROUP_LEN.pack(len(group)) + group


def entry_head(prefix: bytes, index: int, term: int) -> bytes:
    """The body of an entry record before its payload, unframed; `prefix` is
    `entry_prefix(group)`. The WAL queues ``(head, payload)`` and frames the pair in its writer
    thread (`wal_pieces`), so the trio thread neither computes the payload's crc nor copies it."""
    return prefix + _ENTRY.pack(index, term)


def _framed_entry(head: bytes, payload: Payload) -> bytes:
    return _FRAME.pack((len(head) + payload_size(payload)) | C.CRC32C,
                       C.checksum_payload(payload, _checksum(head))) + head


def encode_entry(group: bytes, index: int, term: int, payload: Payload) -> bytes:
    """`group` is the utf-8 group id (callers cache it)."""
    return _framed_entry(entry_head(entry_prefix(group), index, term), payload) + joined(payload)


def wal_pieces(batch: list, first: bytes = b"") -> list[bytes | bytearray]:
    """The bytes of a WAL batch as pieces for one vectored write: each item is a whole record
    (bytes) or an entry's ``(head, payload)`` (`entry_head`), framed here; a large payload is
    never copied (`disk.Pieces`)."""
    out = Pieces(first)
    for item in batch:
        if type(item) is tuple:
            head, payload = item
            out.put(_framed_entry(head, payload))
            out.put_payload(payload)
        else:
            out.put(item)
    return out.done()


def encode_hard_state(group: bytes, term: int, vote: str | None, commit: int) -> bytes:
    if vote is None:
        v = _GROUP_LEN.pack(_NO_VOTE)
    else:
        raw = vote.encode()
        v = _GROUP_LEN.pack(len(raw)) + raw
    return _frame(b"\x02" + _group(group) + _HARD.pack(term, commit) + v)


def encode_truncate(group: bytes, from_index: int) -> bytes:
    return _frame(b"\x03" + _group(group) + _TRUNC.pack(from_index))


def encode_snapshot(group: bytes, index: int, term: int, discard: bool) -> bytes:
    return _frame(b"\x04" + _group(group) + _SNAP.pack(index, term, int(discard)))


def encode_delete(group: bytes) -> bytes:
    return _frame(b"\x05" + _group(group))


# a constant: framed with zlib's CRC-32 as in every version (no flag), so one mark is the mark
COMMIT_MARK = _FRAME.pack(1, zlib.crc32(bytes((_K_MARK,)))) + bytes((_K_MARK,))


def mark_after(data: bytes, bad: int) -> int | None:
    """The offset of an intact commit mark after the bad record at `bad`, or None. Records
    are skipped by their length field while it is plausible; a length that is not ends the
    search (nothing after it can be framed, so nothing after it can prove damage)."""
    view = memoryview(data)
    end = len(view)
    pos = bad
    while pos + _FRAME.size <= end:
        length = C.record_length(_FRAME.unpack_from(view, pos)[0])
        stop = pos + _FRAME.size + length
        if length == 0 or length > MAX_RECORD or stop > end:
            return None
        if pos > bad and bytes(view[pos:stop]) == COMMIT_MARK:
            return pos
        pos = stop
    return None


def _decode(body: memoryview) -> Record:
    kind = body[0]
    (glen,) = _GROUP_LEN.unpack_from(body, 1)
    group = bytes(body[3 : 3 + glen]).decode()
    pos = 3 + glen
    if kind == _K_ENTRY:
        index, term = _ENTRY.unpack_from(body, pos)
        return EntryRec(group, index, term, bytes(body[pos + _ENTRY.size :]))
    if kind == _K_HARD:
        term, commit = _HARD.unpack_from(body, pos)
        pos += _HARD.size
        (vlen,) = _GROUP_LEN.unpack_from(body, pos)
        vote = None if vlen == _NO_VOTE else bytes(body[pos + 2 : pos + 2 + vlen]).decode()
        return HardStateRec(group, term, vote, commit)
    if kind == _K_TRUNC:
        (from_index,) = _TRUNC.unpack_from(body, pos)
        return TruncateRec(group, from_index)
    if kind == _K_SNAP:
        index, term, discard = _SNAP.unpack_from(body, pos)
        return SnapshotRec(group, index, term, bool(discard))
    if kind == _K_DELETE:
        return DeleteRec(group)
    raise ValueError(f"unknown WAL record kind {kind}")


def scan(data: bytes, start: int = 0) -> tuple[list[Record], int]:
    """Decode records from `data[start:]`; return them and the end offset of the valid prefix.

    Stops at the first short, oversized or checksum-failing record. A record that checksums
    but does not decode (a bug, not a crash) also ends the prefix rather than raising, so a
    node can still start; the caller truncates the file at the returned offset.
    """
    out: list[Record] = []
    view = memoryview(data)
    pos = start
    end = len(data)
    for rec, nxt in _iter(view, pos, end):
        if rec is not None:
            out.append(rec)
        pos = nxt  # past a commit mark too: an intact mark is part of the valid prefix
    return out, pos


def _iter(view: memoryview, pos: int, end: int) -> Iterator[tuple[Record | None, int]]:
    """(record, where the next one starts) for each intact frame; None for a commit mark."""
    while pos + _FRAME.size <= end:
        field, crc = _FRAME.unpack_from(view, pos)
        length = C.record_length(field)
        body_at = pos + _FRAME.size
        if length == 0 or length > MAX_RECORD or body_at + length > end:
            return
        body = view[body_at : body_at + length]
        if not C.verify(field, body, crc):
            return
        if length == 1 and body[0] == _K_MARK:
            pos = body_at + length
            yield None, pos
            continue
        try:
            rec = _decode(body)
        except (ValueError, struct.error, UnicodeDecodeError):
            return
        pos = body_at + length
        yield rec, pos
