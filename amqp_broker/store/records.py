"""Length + checksum record framing shared by the metadata log and the message journal.

Who calls it: `metadata.py` and `journal.py` (encode when appending, `scan` when recovering a
small file; `FileFrames` streams a large one: the message journal).

Frame: ``>II`` header (payload length, checksum of the payload) followed by the payload. The
checksum is a CRC-32C, bit 31 of the length set; a zlib CRC-32 in records of earlier versions
(`quorum.log.checksum`). `scan` stops
at the first frame that is incomplete or whose CRC does not match: everything from there on is a
torn tail left by a crash mid-write, and the caller truncates the file to `valid_end`.
"""

from __future__ import annotations

import os
import struct
import zlib
from typing import Iterator

from quorum.log import checksum as C
from quorum.log.disk import Payload, Pieces, joined, payload_size  # noqa: F401 (re-exported)

__all__ = ["HEADER_SIZE", "MAX_RECORD", "FileFrames", "Payload", "frame", "frame_pieces", "joined",
           "legacy_frame", "payload_size", "scan", "unpack_header"]

_HEADER = struct.Struct(">II")
HEADER_SIZE = _HEADER.size
MAX_RECORD = 1 << 30  # a length above this is garbage, not a record (bodies are capped far lower)

# A record's payload (`quorum.log.disk.Payload`): its bytes, or (head, body) when a large body
# is kept as it is (written as two pieces, checksummed in a chain, never joined on the way).


def frame(payload: bytes) -> bytes:
    """One framed record. Cost: one checksum pass over the payload and one concatenation."""
    return _HEADER.pack(C.length_field(len(payload)), C.checksum(payload)) + payload


def legacy_frame(payload: bytes) -> bytes:
    """A record framed with zlib's CRC-32 (no flag), as every version writes it: for constant
    records that readers compare byte for byte (commit marks), so that one mark is the mark."""
    return _HEADER.pack(len(payload), zlib.crc32(payload)) + payload


def frame_pieces(payloads: list[Payload], first: bytes = b"") -> list[bytes | bytearray]:
    """The framed records of `payloads` (after the bytes `first`) as pieces for one vectored
    write (`quorum.log.disk.Pieces`: a large payload or body is never copied). Runs in the
    journal's worker thread, where the checksum of a large payload does not hold the GIL."""
    out = Pieces(first)
    for payload in payloads:
        if type(payload) is tuple:
            out.put(_HEADER.pack(C.length_field(payload_size(payload)),
                                 C.checksum_payload(payload)))
            out.put_payload(payload)
        else:
            out.put(_HEADER.pack(C.length_field(len(payload)), C.checksum(payload)))
            out.put(payload)
    return out.done()


def unpack_header(view: memoryview, pos: int) -> tuple[int, int]:
    """(payload length, checksum) of the frame at `pos`."""
    field, crc = _HEADER.unpack_from(view, pos)
    return C.record_length(field), crc


def scan(data: bytes | memoryview) -> tuple[list[memoryview], int]:
    """Split `data` into payloads; return (payloads, valid_end).

    `valid_end` is the offset just past the last intact frame. Payloads are zero-copy views.
    """
    view = memoryview(data)
    out: list[memoryview] = []
    pos = 0
    end = len(view)
    while pos + HEADER_SIZE <= end:
        field, crc = _HEADER.unpack_from(view, pos)
        start = pos + HEADER_SIZE
        stop = start + C.record_length(field)
        if field == 0 or C.record_length(field) > MAX_RECORD or stop > end:
            break  # field 0: zeros, a log file's space allocated ahead (no writer frames b"" so)
        payload = view[start:stop]
        if not C.verify(field, payload, crc):
            break
        out.append(payload)
        pos = stop
    return out, pos


class FileFrames:
    """The intact frames of an open file, read a block at a time (never the whole file).

    Iterating yields (offset of the frame, the frame: header and payload) until the first frame
    that is incomplete or whose CRC does not match; `valid_end` is then the offset just past the last
    intact frame, as `scan` gives it. Reads with `os.pread` (the file position is untouched).
    """

    def __init__(self, fd: int, block: int = 8 << 20) -> None:
        self.fd = fd
        self.block = block
        self.size = os.fstat(fd).st_size
        self.valid_end = 0

    def __iter__(self) -> Iterator[tuple[int, memoryview]]:
        fd, size = self.fd, self.size
        buf = b""
        base = 0          # file offset of buf[0]
        pos = 0           # offset in buf of the next frame
        while True:
            have = len(buf) - pos
            need = HEADER_SIZE if have < HEADER_SIZE else \
                HEADER_SIZE + C.record_length(_HEADER.unpack_from(buf, pos)[0])
            if have < need:
                if need > HEADER_SIZE + MAX_RECORD or base + pos + need > size:
                    break
                start = base + pos
                buf = os.pread(fd, max(self.block, need), start)
                base, pos = start, 0
                if len(buf) < need:
                    break
                continue   # the header may have been all that was missing
            view = memoryview(buf)
            field, crc = _HEADER.unpack_from(view, pos)
            stop = pos + HEADER_SIZE + C.record_length(field)
            if field == 0 or not C.verify(field, view[pos + HEADER_SIZE:stop], crc):
                break  # field 0: zeros, not a record (as in `scan`)
            yield base + pos, view[pos:stop]
            pos = stop
            self.valid_end = base + pos
