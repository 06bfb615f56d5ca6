"""Record checksums: new records carry a CRC-32C (bit 31 of their length set); records written
by earlier versions, with zlib's CRC-32 and no flag, are still read, alone or mixed with new
ones in one file, by the WAL scanner, the segment reader and the journal's framing. A flipped
byte in a record of either kind ends the valid prefix."""

import os
import struct
import zlib

import pytest
from hypothesis import given, settings, strategies as st

from amqp_broker.store import records as journal_records
from quorum.log import checksum as C
from quorum.log import records as R
from quorum.log.disk import OsDisk
from quorum.log.segment import CorruptSegment, read_segment_range, write_segment


def _old_wal_entry(group: bytes, index: int, term: int, payload: bytes) -> bytes:
    body = R.entry_head(R.entry_prefix(group), index, term) + payload
    return struct.pack("<II", len(body), zlib.crc32(body)) + body


def test_checksum_chains_and_verifies_both_kinds():
    assert C.checksum(b"world", C.checksum(b"hello ")) == C.checksum(b"hello world")
    assert C.checksum(b"123456789") == 0xE3069283  # the CRC-32C check value
    new = C.length_field(9)
    assert C.record_length(new) == 9 and C.verify(new, b"123456789", 0xE3069283)
    assert C.verify(9, b"123456789", zlib.crc32(b"123456789"))
    assert not C.verify(9, b"123456789", 0xE3069283)  # unflagged: zlib's, not CRC-32C


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.binary(max_size=300)), min_size=1, max_size=8))
def test_the_wal_scanner_reads_old_and_new_entries_in_one_file(entries):
    data = b"".join(
        _old_wal_entry(b"g", i + 1, 1, p) if old else R.encode_entry(b"g", i + 1, 1, p)
        for i, (old, p) in enumerate(entries))
    recs, end = R.scan(data)
    assert end == len(data)
    assert [(r.index, r.payload) for r in recs] == [(i + 1, p) for i, (_, p) in enumerate(entries)]


def test_a_flipped_byte_ends_the_wal_prefix_in_either_kind():
    first = R.encode_entry(b"g", 1, 1, b"new payload")
    for second in (_old_wal_entry(b"g", 2, 1, b"old payload"),
                   R.encode_entry(b"g", 2, 1, b"new payload")):
        bad = bytearray(first + second)
        bad[-3] ^= 0x01
        recs, end = R.scan(bytes(bad))
        assert [r.index for r in recs] == [1] and end == len(first)


def test_old_segments_are_read_and_checked(tmp_path):
    disk = OsDisk()
    entries = [(i, 2, bytes([i]) * (i * 10)) for i in range(5, 9)]
    seg = write_segment(disk, str(tmp_path), 1, entries)
    assert read_segment_range(disk, seg, 5, 8) == entries
    # the same segment as an earlier version wrote it: zlib's CRC-32, no flag
    path = tmp_path / "old.seg"
    raw = bytearray(open(seg.path, "rb").read())
    pos = 8
    while pos < len(raw):
        field, _ = struct.unpack_from("<II", raw, pos)
        length = C.record_length(field)
        body = bytes(raw[pos + 8 : pos + 8 + length])
        struct.pack_into("<II", raw, pos, length, zlib.crc32(body))
        pos += 8 + length
    path.write_bytes(raw)
    seg.path, seg.offsets, seg.terms = str(path), None, None
    assert read_segment_range(disk, seg, 5, 8) == entries
    raw[-1] ^= 0x01
    path.write_bytes(raw)
    seg.offsets = None
    with pytest.raises(CorruptSegment):
        read_segment_range(disk, seg, 8, 8)


def test_the_journal_framing_reads_old_and_new_records(tmp_path):
    old = [struct.pack(">II", len(p), zlib.crc32(p)) + p for p in (b"a", b"bb")]
    data = old[0] + journal_records.frame(b"new") + old[1]
    payloads, end = journal_records.scan(data)
    assert [bytes(p) for p in payloads] == [b"a", b"new", b"bb"] and end == len(data)
    path = tmp_path / "journal"
    path.write_bytes(data + b"\x00\x00")  # a torn tail
    fd = os.open(path, os.O_RDONLY)
    try:
        frames = journal_records.FileFrames(fd, block=16)
        got = [bytes(f[journal_records.HEADER_SIZE:]) for _, f in frames]
    finally:
        os.close(fd)
    assert got == [b"a", b"new", b"bb"] and frames.valid_end == len(data)
