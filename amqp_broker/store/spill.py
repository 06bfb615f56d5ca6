"""Scratch files for the messages classic queues page out of memory (not durable).

Who calls it: `server/node.py` opens one `SpillStore` per node under `<data_dir>/spill` (wiped
at every start: the journal, not this, keeps persistent messages across restarts) and hands each
classic queue its own `QueueSpill` (the `queues.base.QueuePager` protocol), which
`queues/paging.py` writes past the queue's memory budget and reads back, in order, on demand.

A queue's spill is a stream of records in segment files of `SEGMENT_BYTES` under its own
directory, each named by the stream position it starts at. A record is
``>BBII`` (exchange, routing key, properties and body lengths) then those bytes; a message is
known by (position, length). A record never spans two files: when it would not fit, the stream
skips to the next segment boundary (a record larger than a segment gets a file to itself). A file
is deleted once every record in it was released (read back, purged, expired, dropped) and it is
no longer written. Writes are buffered up to `WRITE_BUFFER` bytes and flushed before a read
needs them; nothing is fsynced.

A failed write raises `OSError` (the caller keeps that message in memory); a failed or short
read raises `StoreFatalError` (the message would be lost: stop the node).
"""

from __future__ import annotations

import itertools
import logging
import os
import shutil
import struct
from typing import Sequence

from amqp_broker.queues.message import Message
from amqp_broker.store.errors import StoreFatalError

__all__ = ["SpillStore", "QueueSpill", "SEGMENT_BYTES"]

_log = logging.getLogger(__name__)
SEGMENT_BYTES = 16 << 20
WRITE_BUFFER = 64 << 10
_HEAD = struct.Struct(">BBII")


class SpillStore:
    """The node's spill directory; `pager(key)` gives a queue its own spill."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        shutil.rmtree(directory, ignore_errors=True)   # what an earlier run paged out is stale
        os.makedirs(directory, exist_ok=True)
        self._ids = itertools.count(1)

    def pager(self, queue_key: str) -> "QueueSpill":
        return QueueSpill(os.path.join(self.directory, f"q{next(self._ids)}"), queue_key)


class QueueSpill:
    """One queue's spill stream (see the module docstring)."""

    def __init__(self, directory: str, name: str) -> None:
        self._dir = directory
        self._name = name
        self._pos = 0               # where the next record goes
        self._flushed = 0           # stream position up to which records are in files
        self._buffer: list[bytes] = []
        self._seg = -1              # start of the segment being written, -1: none
        self._fd: int | None = None
        self._live: dict[int, int] = {}   # segment start -> records not yet released
        self.bytes_on_disk = 0

    # -- writing -----------------------------------------------------------------------------
    def write(self, message: Message) -> tuple[int, int]:
        ex, rk = message.exchange.encode(), message.routing_key.encode()
        head = _HEAD.pack(len(ex), len(rk), len(message.properties), len(message.body))
        length = _HEAD.size + len(ex) + len(rk) + len(message.properties) + len(message.body)
        pos = self._pos
        if self._seg < 0 or (pos + length > self._seg + SEGMENT_BYTES and pos > self._seg):
            self._start_segment(_round_up(pos))
            pos = self._pos
        self._buffer += (head, ex, rk, message.properties, message.body)
        self._pos = pos + length
        self._live[self._seg] = self._live.get(self._seg, 0) + 1
        if self._pos - self._flushed >= WRITE_BUFFER:
            self._flush()
        return pos, length

    def _start_segment(self, start: int) -> None:
        self._flush()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
            if not self._live.get(self._seg):
                self._delete(self._seg)
        os.makedirs(self._dir, exist_ok=True)
        self._fd = os.open(self._path(start), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._seg = self._pos = self._flushed = start

    def _flush(self) -> None:
        if self._buffer:
            data = b"".join(self._buffer)
            self._buffer.clear()
            done = 0
            while done < len(data):
                done += os.write(self._fd, data[done:])  # type: ignore[arg-type]
            self._flushed = self._pos
            self.bytes_on_disk += len(data)

    # -- reading back and releasing ------------------------------------------------------------
    def read(self, refs: Sequence[tuple[int, int]]) -> list[Message]:
        """The messages at `refs` (positions in one stream, in order), one read per run of
        adjacent records in one file."""
        if refs and refs[-1][0] >= self._flushed:
            self._flush_or_fail()
        out: list[Message] = []
        i = 0
        while i < len(refs):
            start, length = refs[i]
            seg = start - start % SEGMENT_BYTES
            j, end = i + 1, start + length
            while j < len(refs) and refs[j][0] == end and refs[j][0] - seg < SEGMENT_BYTES:
                end += refs[j][1]
                j += 1
            data = self._pread(seg, start, end - start)
            view = memoryview(data)
            pos = 0
            for _ in range(j - i):
                out.append(_decode(view, pos))
                pos += _record_length(view, pos)
            i = j
        return out

    def _flush_or_fail(self) -> None:
        try:
            self._flush()
        except OSError as exc:
            raise StoreFatalError(f"spill of queue {self._name}: write failed") from exc

    def _pread(self, seg: int, start: int, n: int) -> bytes:
        try:
            fd = os.open(self._path(seg), os.O_RDONLY)
            try:
                data = os.pread(fd, n, start - seg)
            finally:
                os.close(fd)
        except OSError as exc:
            raise StoreFatalError(f"spill of queue {self._name}: read failed") from exc
        if len(data) != n:
            raise StoreFatalError(f"spill of queue {self._name}: short read in {self._path(seg)}")
        return data

    def release(self, position: int) -> None:
        """The record at `position` is no longer needed (read back into memory, or gone)."""
        seg = position - position % SEGMENT_BYTES
        left = self._live[seg] - 1
        if left:
            self._live[seg] = left
            return
        del self._live[seg]
        if seg != self._seg:
            self._delete(seg)
        elif self._pos - seg > SEGMENT_BYTES // 2:   # the written one, emptied: start afresh
            self._start_segment(_round_up(self._pos))

    def drop(self) -> None:
        """The queue is gone: every file goes."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._buffer.clear()
        self._live.clear()
        self._seg = -1
        shutil.rmtree(self._dir, ignore_errors=True)

    def _delete(self, seg: int) -> None:
        try:
            os.unlink(self._path(seg))
        except FileNotFoundError:
            pass
        except OSError:
            _log.warning("spill of queue %s: could not delete %s", self._name, self._path(seg))

    def _path(self, seg: int) -> str:
        return os.path.join(self._dir, f"{seg:016x}.spill")


def _round_up(pos: int) -> int:
    return -(-pos // SEGMENT_BYTES) * SEGMENT_BYTES


def _record_length(view: memoryview, pos: int) -> int:
    a, b, c, d = _HEAD.unpack_from(view, pos)
    return _HEAD.size + a + b + c + d


def _decode(view: memoryview, pos: int) -> Message:
    a, b, c, d = _HEAD.unpack_from(view, pos)
    p = pos + _HEAD.size
    ex = bytes(view[p:p + a]).decode()
    p += a
    rk = bytes(view[p:p + b]).decode()
    p += b
    props = bytes(view[p:p + c])
    p += c
    return Message.from_publish(ex, rk, props, bytes(view[p:p + d]))
