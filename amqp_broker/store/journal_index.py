"""Which enqueue records of the message journal are live, a few bytes per message.

Who uses it: `journal.py` (the live set it keeps while running, and the one it rebuilds when it
recovers a file); `replay` (what a journal's bytes hold, for tests) is built on it. The journal never keeps messages in memory: a
classic queue keeps what it needs (or pages it out), and recovery and compaction read the
records back from the file.

`QueueRecords`: one queue's live records as two `array`s indexed by msg id from `base` (msg ids
are a queue's publish counter, so they are dense and increasing): the frame length (0: no live
record) and the record's position (`UNPLACED` until the batch holding it is taken for writing),
12 bytes a message. A position names the journal's segment file and the offset in it
(`position`, `segment_of`). The records also count their live bytes per segment, for the queue
(`by_segment`) and for the whole index (`JournalIndex.segment_live`), so that the journal knows
which segment files hold nothing live. `JournalIndex.apply` is the one place the meaning of
each record kind lives.
"""

from __future__ import annotations

from array import array
from typing import Iterator

import msgspec

from amqp_broker.queues.message import Message
from amqp_broker.store.journal_codec import (DELIVERED, DROP_QUEUE, ENQUEUE, ENQUEUE_DELIVERED,
                                             REMOVED, decode_enqueue)
from amqp_broker.store.records import HEADER_SIZE, scan

__all__ = ["QueueRecords", "JournalIndex", "UNPLACED", "position", "segment_of", "replay"]


class _Record(msgspec.Struct, array_like=True):
    """The fields every record kind starts with (an enqueue's message after them is skipped)."""
    kind: int
    queue: str = ""
    arg: msgspec.Raw = msgspec.Raw()   # an enqueue's msg id, or a list of msg ids


_records = msgspec.msgpack.Decoder(_Record)
_msg_id = msgspec.msgpack.Decoder(int)
_msg_ids = msgspec.msgpack.Decoder(list[int])
_TRIM_AT = 4096   # dead ids at the front before the arrays are shifted
UNPLACED = 2 ** 64 - 1   # the position of a record still in the pending batch
_SEGMENT_SHIFT = 40      # a position is (segment << 40) | offset: segment files under 1 TiB


def position(segment: int, offset: int) -> int:
    return (segment << _SEGMENT_SHIFT) | offset


def segment_of(pos: int) -> tuple[int, int]:
    """(segment, offset in its file) of a record's position."""
    return pos >> _SEGMENT_SHIFT, pos & ((1 << _SEGMENT_SHIFT) - 1)


class QueueRecords:
    __slots__ = ("base", "lengths", "offsets", "count", "bytes", "_first", "by_segment", "_total")

    def __init__(self, total: dict[int, int] | None = None) -> None:
        self.base = 0
        self.lengths = array("I")
        self.offsets = array("Q")
        self.count = 0     # live records
        self.bytes = 0     # their frame lengths
        self._first = 0    # no live record below this position
        # live bytes of this queue's placed records per segment, and the index's total of them
        self.by_segment: dict[int, int] = {}
        self._total = total

    def _count(self, pos: int, length: int) -> None:
        """`length` live bytes more (or fewer, negative) in the segment of position `pos`."""
        if pos == UNPLACED:
            return
        seg = pos >> _SEGMENT_SHIFT
        by_segment = self.by_segment
        n = by_segment.get(seg, 0) + length
        if n:
            by_segment[seg] = n
        else:
            del by_segment[seg]
        total = self._total
        if total is not None:
            n = total.get(seg, 0) + length
            if n:
                total[seg] = n
            else:
                del total[seg]

    def add(self, msg_id: int, length: int, offset: int = UNPLACED) -> int:
        """Record `msg_id`'s enqueue record; returns how much `bytes` grew."""
        lengths = self.lengths
        if not self.count and not self._first and not lengths:
            self.base = msg_id
        i = msg_id - self.base
        if i == len(lengths):   # the next id (publish order): the common case
            lengths.append(length)
            self.offsets.append(offset)
            self.count += 1
            self.bytes += length
            if offset != UNPLACED:
                self._count(offset, length)
            return length
        if i < 0:   # an id below the first one kept: make room in front (rare)
            self._grow_front(-i)
            lengths = self.lengths   # new arrays
            i = 0
        if i >= len(lengths):
            extra = i + 1 - len(lengths)
            lengths.extend(array("I", [0]) * extra)
            self.offsets.extend(array("Q", [0]) * extra)
        old = lengths[i]
        if not old:
            self.count += 1
        else:   # the same record again (a copy moved to a newer segment, found at recovery)
            self._count(self.offsets[i], -old)
        lengths[i] = length
        self.bytes += length - old
        self.offsets[i] = offset
        self._count(offset, length)
        if i < self._first:
            self._first = i
        return length - old

    def _grow_front(self, n: int) -> None:
        self.lengths = array("I", [0]) * n + self.lengths
        self.offsets = array("Q", [0]) * n + self.offsets
        self.base -= n
        self._first += n

    def remove(self, msg_id: int) -> int:
        """Forget the record of `msg_id`; returns its length (0 if it was not live)."""
        i = msg_id - self.base
        lengths = self.lengths
        if not 0 <= i < len(lengths) or not lengths[i]:
            return 0
        length = lengths[i]
        lengths[i] = 0
        self.count -= 1
        self.bytes -= length
        self._count(self.offsets[i], -length)
        if i == self._first:
            self._trim()
        return length

    def _trim(self) -> None:
        lengths, first = self.lengths, self._first
        while first < len(lengths) and not lengths[first]:
            first += 1
        if first >= _TRIM_AT and 2 * first >= len(lengths):
            del lengths[:first]
            del self.offsets[:first]
            self.base += first
            first = 0
        self._first = first

    def is_live(self, msg_id: int) -> bool:
        i = msg_id - self.base
        return 0 <= i < len(self.lengths) and self.lengths[i] != 0

    def locate(self, msg_id: int) -> tuple[int, int] | None:
        """(frame length, file offset) of a live record, else None."""
        i = msg_id - self.base
        if 0 <= i < len(self.lengths) and self.lengths[i]:
            return self.lengths[i], self.offsets[i]
        return None

    def place(self, msg_id: int, offset: int) -> None:
        """The record of `msg_id` (if still live) is written at position `offset`."""
        i = msg_id - self.base
        if 0 <= i < len(self.lengths) and self.lengths[i]:
            length = self.lengths[i]
            self._count(self.offsets[i], -length)
            self.offsets[i] = offset
            self._count(offset, length)

    def live(self) -> Iterator[tuple[int, int, int]]:
        """(msg_id, frame length, position) of each live record, in msg-id order."""
        lengths, offsets, base = self.lengths, self.offsets, self.base
        for i in range(self._first, len(lengths)):
            if lengths[i]:
                yield base + i, lengths[i], offsets[i]

    def live_in(self, segment: int) -> list[tuple[int, int, int]]:
        """(msg_id, frame length, position) of the live records in `segment`, in msg-id order.
        The scan stops once it has found all of them (`by_segment`): the records of an old
        segment are most often a queue's oldest."""
        want = self.by_segment.get(segment, 0)
        out = []
        lengths, offsets, base = self.lengths, self.offsets, self.base
        i, n = self._first, len(lengths)
        while want > 0 and i < n:
            length = lengths[i]
            if length and offsets[i] != UNPLACED and offsets[i] >> _SEGMENT_SHIFT == segment:
                out.append((base + i, length, offsets[i]))
                want -= length
            i += 1
        return out

    def copy(self) -> "QueueRecords":
        """A snapshot (for recovery's readers), which counts nothing in the index's totals."""
        c = QueueRecords()
        c.base, c._first, c.count, c.bytes = self.base, self._first, self.count, self.bytes
        c.lengths, c.offsets = array("I", self.lengths), array("Q", self.offsets)
        c.by_segment = dict(self.by_segment)
        return c


class JournalIndex:
    """The live records of every queue and the delivered ids, built by applying records in
    file order (`apply`, when recovering a file) or as they are appended."""

    def __init__(self) -> None:
        self.queues: dict[str, QueueRecords] = {}
        self.delivered: dict[str, set[int]] = {}
        self.segment_live: dict[int, int] = {}   # live bytes per segment, every queue's

    def apply(self, payload: bytes | memoryview, offset: int, length: int) -> None:
        r = _records.decode(payload)
        kind = r.kind
        if kind == ENQUEUE:
            self.add(r.queue, _msg_id.decode(r.arg), length, offset)
        elif kind == ENQUEUE_DELIVERED:
            msg_id = _msg_id.decode(r.arg)
            self.add(r.queue, msg_id, length, offset)
            self.mark_delivered(r.queue, (msg_id,))
        elif kind == DELIVERED:
            self.mark_delivered(r.queue, _msg_ids.decode(r.arg))
        elif kind == REMOVED:
            self.remove(r.queue, _msg_ids.decode(r.arg))
        elif kind == DROP_QUEUE:
            self.drop(r.queue)

    def add(self, queue: str, msg_id: int, length: int, offset: int = UNPLACED) -> int:
        """Record an enqueue; returns how much the live bytes grew."""
        return self.records(queue).add(msg_id, length, offset)

    def records(self, queue: str) -> QueueRecords:
        records = self.queues.get(queue)
        if records is None:
            records = self.queues[queue] = QueueRecords(self.segment_live)
        return records

    def mark_delivered(self, queue: str, msg_ids) -> None:
        records = self.queues.get(queue)
        if records is not None:
            live = [i for i in msg_ids if records.is_live(i)]
            if live:
                self.delivered.setdefault(queue, set()).update(live)

    def remove(self, queue: str, msg_ids) -> int:
        """Forget these records; returns the frame bytes they had."""
        records = self.queues.get(queue)
        if records is None:
            return 0
        freed = 0
        for i in msg_ids:
            freed += records.remove(i)
        delivered = self.delivered.get(queue)
        if delivered:
            delivered.difference_update(msg_ids)
        return freed

    def drop(self, queue: str) -> int:
        """Forget a queue; returns the frame bytes its records had."""
        self.delivered.pop(queue, None)
        records = self.queues.pop(queue, None)
        if records is None:
            return 0
        total = self.segment_live
        for seg, n in records.by_segment.items():
            left = total.get(seg, 0) - n
            if left:
                total[seg] = left
            else:
                total.pop(seg, None)
        return records.bytes

    def live_bytes(self) -> int:
        return sum(r.bytes for r in self.queues.values())

    def live_count(self) -> int:
        return sum(r.count for r in self.queues.values())


def replay(data: bytes | list[tuple[int, bytes]]) -> tuple[dict[str, dict[int, tuple[Message, bool]]], int]:
    """What the journal bytes `data` hold (one file's bytes, or each segment's number and
    bytes, oldest first): ({queue: {msg_id: (message, delivered)}} in msg-id order, valid_end
    of the last); bytes after `valid_end` are a torn tail."""
    segments = [(0, data)] if isinstance(data, (bytes, bytearray)) else data
    index = JournalIndex()
    views = {}
    valid_end = 0
    for segment, raw in segments:
        payloads, valid_end = scan(raw)
        views[segment] = memoryview(raw)
        pos = 0
        for payload in payloads:
            length = HEADER_SIZE + len(payload)
            index.apply(payload, position(segment, pos), length)
            pos += length
    out: dict[str, dict[int, tuple[Message, bool]]] = {}
    for queue, records in index.queues.items():
        delivered = index.delivered.get(queue, set())
        msgs = {}
        for msg_id, length, pos in records.live():
            segment, offset = segment_of(pos)
            view = views[segment]
            _, _, message = decode_enqueue(view[offset + HEADER_SIZE:offset + length])
            msgs[msg_id] = (message, msg_id in delivered)
        if msgs:
            out[queue] = msgs
    return out, valid_end
