"""Checksums of framed records: the WAL's and segments' (`records.py`, `segment.py`) and the
message journal's and metadata log's (`amqp_broker.store.records`).

New records carry a CRC-32C (the `crc32c` package: SSE4.2 where the CPU has it, about 4 µs
for 64 KiB against zlib's CRC-32 at about 30 µs), and records written by earlier versions a
zlib CRC-32. Every such record starts with a u32 length; bit 31 of it (`CRC32C`) says which
checksum follows. No record comes near 2 GiB (lengths stop at 1 GiB), so the bit is free, old
files stay readable and one file may hold both kinds.
"""

from __future__ import annotations

import zlib

from crc32c import crc32c as _crc32c

__all__ = ["CRC32C", "checksum", "checksum_payload", "length_field", "record_length", "verify"]

CRC32C = 1 << 31
_LENGTH = CRC32C - 1

# checksum(data, value=0): the CRC-32C of `data` (any bytes-like), continuing from `value` (a
# chain of pieces). The C function itself: it runs for every record, also 16-byte ones.
checksum = _crc32c


def checksum_payload(payload, value: int = 0) -> int:
    """`checksum` of a payload given as its bytes or as a tuple of pieces (`disk.Payload`)."""
    if type(payload) is tuple:
        for piece in payload:
            value = _crc32c(piece, value)
        return value
    return _crc32c(payload, value)


def length_field(length: int) -> int:
    """The length field of a new record of `length` bytes (flagged: its checksum is CRC-32C)."""
    return length | CRC32C


def record_length(field: int) -> int:
    """The length a length field holds, without the flag."""
    return field & _LENGTH


def verify(field: int, data, crc: int) -> bool:
    """Whether `data` matches the checksum `crc` of a record whose length field is `field`."""
    if field & CRC32C:
        return _crc32c(data) == crc
    return zlib.crc32(data) == crc
