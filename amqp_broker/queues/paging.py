"""One priority level of a classic queue whose messages may be paged out of memory.

Who uses it: `classic.py` only; it decides when to page out and in (its memory budget), this
module holds the two parts of a level and moves messages between them:

- `head`: a deque of `Entry` (bodies in memory), the oldest messages of the level;
- the paged tail: the level's newer messages, each a row of a `quorum.packed.ColumnFifo`
  (msg id, where its copy is, sizes, expiry, flags: 12 to 37 bytes, no body). A persistent message of
  a durable queue is read back from the journal, which has it anyway (paging it out writes
  nothing); any other message's copy is written to the queue's `QueuePager` (`store/spill.py`).

Every paged message is newer than every message of the head (once a level has a paged tail,
new messages join the tail; requeued ones rejoin the head, and were older than any paged one),
so the level in msg-id order is head then tail.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Iterator

from amqp_broker.queues.base import QueueJournal, QueuePager
from amqp_broker.queues.message import Entry
from quorum.packed import ColumnFifo

__all__ = ["PagedLevel"]

_log = logging.getLogger(__name__)

# msg_id, position (of the pager's copy), length, size, expires_at, delivery_count, redelivered,
# persistent; the defaulted columns cost nothing until a row departs from the default, so a
# persistent message of a durable queue (in the journal) costs msg id and size: 12 bytes
_IN_JOURNAL = -1   # the position of a message whose copy is the journal's
_NO_EXPIRY = -1
_TYPES = "qqIIqIbb"
_DEFAULTS = (None, _IN_JOURNAL, 0, None, _NO_EXPIRY, 0, 0, 1)
_ID, _POS, _LEN, _SIZE, _EXPIRES, _COUNT, _REDELIVERED, _PERSISTENT = range(8)


class PagedLevel:
    __slots__ = ("head", "_tail", "_pager", "_journal", "_key", "paged_bytes", "_write_failed")

    def __init__(self, pager: QueuePager | None, journal: QueueJournal | None = None,
                 key: str = "") -> None:
        self.head: deque[Entry] = deque()
        self._tail = ColumnFifo(_TYPES, _DEFAULTS)
        self._pager = pager
        self._journal = journal   # a durable queue's: holds its persistent messages
        self._key = key
        self.paged_bytes = 0   # body bytes of the paged tail
        self._write_failed = False

    def __len__(self) -> int:
        return len(self.head) + len(self._tail)

    def __bool__(self) -> bool:
        return bool(self.head) or bool(self._tail)

    @property
    def paged(self) -> int:
        return len(self._tail)

    def page_out(self, entry: Entry) -> bool:
        """Append `entry` to the paged tail (its body to the pager); False if the pager could
        not take it (the caller keeps it in memory: only allowed while the tail is empty)."""
        assert self._pager is not None
        m = entry.message
        try:
            if m.persistent and self._journal is not None:
                pos, length = _IN_JOURNAL, 0
            else:
                pos, length = self._pager.write(m)
        except OSError as exc:
            if not self._write_failed:
                _log.warning("paging a message out failed (%s); it stays in memory", exc)
                self._write_failed = True
            if self._tail:   # it must not overtake the paged messages: fail stop
                raise
            return False
        self._tail.append((entry.msg_id, pos, length, m.size,
                           _NO_EXPIRY if entry.expires_at is None else entry.expires_at,
                           entry.delivery_count, 1 if entry.redelivered else 0,
                           1 if m.persistent else 0))
        self.paged_bytes += m.size
        return True

    def page_out_journaled(self, msg_ids: list[int], sizes: list[int],
                           expires: list[int | None], redelivered: list[bool]) -> None:
        """Append recovered persistent messages of a durable queue to the paged tail, given
        column by column: their copies are the journal's, so nothing is read or written."""
        assert self._journal is not None
        n = len(msg_ids)
        flags = [1 if r else 0 for r in redelivered]   # delivery count and redelivered alike
        self._tail.extend_columns((
            msg_ids, [_IN_JOURNAL] * n, [0] * n, sizes,
            [_NO_EXPIRY if e is None else e for e in expires], flags, flags, [1] * n))
        self.paged_bytes += sum(sizes)

    def page_in(self, max_bytes: int) -> int:
        """Move paged messages to the head, oldest first, up to `max_bytes` of bodies (at
        least one); returns the body bytes moved."""
        tail, pager = self._tail, self._pager
        rows = []
        total = 0
        while tail and (not rows or total + tail.value(0, _SIZE) <= max_bytes):
            row = tail.popleft()
            rows.append(row)
            total += row[_SIZE]
        if not rows:
            return 0
        self.head.extend(self._entries(rows))
        for row in rows:
            if row[_POS] != _IN_JOURNAL:
                pager.release(row[_POS])  # type: ignore[union-attr]
        self.paged_bytes -= total
        return total

    def _entries(self, rows: list[tuple]) -> list[Entry]:
        """Entries for paged rows, their messages read back from the journal or the pager."""
        from_journal = [r[_ID] for r in rows if r[_POS] == _IN_JOURNAL]
        journal = iter(self._journal.read(self._key, from_journal) if from_journal else ())
        refs = [(r[_POS], r[_LEN]) for r in rows if r[_POS] != _IN_JOURNAL]
        spilled = iter(self._pager.read(refs) if refs else ())  # type: ignore[union-attr]
        return [Entry(r[_ID], next(journal) if r[_POS] == _IN_JOURNAL else next(spilled),
                      None if r[_EXPIRES] == _NO_EXPIRY else r[_EXPIRES], bool(r[_REDELIVERED]),
                      r[_COUNT]) for r in rows]

    def first_expiry(self) -> int | None:
        """The deadline of the level's oldest message, without paging it in."""
        if self.head:
            return self.head[0].expires_at
        if self._tail:
            e = self._tail.value(0, _EXPIRES)
            return None if e == _NO_EXPIRY else e
        return None

    def msg_ids(self) -> list[int]:
        """Every message's id, head then paged tail (no IO)."""
        return [e.msg_id for e in self.head] + list(self._tail.column(_ID))

    def paged_persistent_ids(self) -> Iterator[int]:
        """The msg ids of the paged persistent messages (for the journal on purge)."""
        for row in self._tail:
            if row[_PERSISTENT]:
                yield row[_ID]

    def paged_entries(self) -> list[Entry]:
        """Copies of the paged messages as entries, read back but left paged (listings, the
        conversion to a mirrored queue): costs a read of every paged body."""
        return self._entries(list(self._tail))

    def clear(self) -> None:
        """Forget every message of the level (the caller settles the journal)."""
        self.head.clear()
        if self._tail:
            pager = self._pager
            assert pager is not None
            for pos in self._tail.column(_POS):
                if pos != _IN_JOURNAL:
                    pager.release(pos)
            self._tail.clear()
        self.paged_bytes = 0
