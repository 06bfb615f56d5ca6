"""Length + CRC32 record framing shared by the metadata log and the message journal.

Who calls it: `metadata.py` and `journal.py` (encode when appending, `scan` when recovering).
Pure: bytes in, bytes out.

Frame: ``>II`` header (payload length, CRC32 of the payload) followed by the payload. `scan` stops
at the first frame that is incomplete or whose CRC does not match: everything from there on is a
torn tail left by a crash mid-write, and the caller truncates the file to `valid_end`.
"""

from __future__ import annotations

import struct
import zlib

__all__ = ["HEADER_SIZE", "MAX_RECORD", "frame", "scan", "unpack_header"]

_HEADER = struct.Struct(">II")
HEADER_SIZE = _HEADER.size
MAX_RECORD = 1 << 30  # a length above this is garbage, not a record (bodies are capped far lower)


def frame(payload: bytes) -> bytes:
    """One framed record. Cost: one CRC32 pass over the payload and one concatenation."""
    return _HEADER.pack(len(payload), zlib.crc32(payload)) + payload


def unpack_header(view: memoryview, pos: int) -> tuple[int, int]:
    """(payload length, CRC32) of the frame at `pos`."""
    return _HEADER.unpack_from(view, pos)


def scan(data: bytes | memoryview) -> tuple[list[memoryview], int]:
    """Split `data` into payloads; return (payloads, valid_end).

    `valid_end` is the offset just past the last intact frame. Payloads are zero-copy views.
    """
    view = memoryview(data)
    out: list[memoryview] = []
    pos = 0
    end = len(view)
    while pos + HEADER_SIZE <= end:
        length, crc = _HEADER.unpack_from(view, pos)
        start = pos + HEADER_SIZE
        stop = start + length
        if length > MAX_RECORD or stop > end:
            break
        payload = view[start:stop]
        if zlib.crc32(payload) != crc:
            break
        out.append(payload)
        pos = stop
    return out, pos
