"""The quorum queue's ready messages and live indexes, packed (`quorum.packed.ColumnFifo`).

A backlog of millions of messages costs about 20 bytes a message here instead of a `Message`
object each, past the first couple of thousand (kept as objects, so that a short queue pays
nothing for packing).  `PackedMessages` offers
the part of `collections.deque` that `ReadyQueue` and `PartitionedReady` use; `PackedInts` the
part `LiveIndexes` uses.  Used only by `messages.py` and `partitioned.py`.
"""
from __future__ import annotations

from collections import deque
from itertools import chain
from typing import Iterator

from quorum.packed import ColumnFifo

__all__ = ["PackedMessages", "PackedInts"]

_NO_EXPIRY = -1   # expiries are leader times in ms, always positive
_COUNT_MAX = 2 ** 32 - 1   # delivery counts saturate (they never get near it)
# index, size (bodies are far below 4 GiB), expiry, acquired, delivery_failed, persistent
_TYPES = "qIqIIb"
_DEFAULTS = (None, None, _NO_EXPIRY, 0, 0, 1)
_INDEX = 0
_HOT = 2048      # oldest messages kept as objects
_REFILL = 1024   # unpacked at a time when those run out
_BATCH = 1024    # newest messages kept as objects until this many are packed at once


class PackedMessages:
    """A FIFO of message headers (`messages.Message`) of one level or one partition: every
    message pushed here has the same `hi` and `part`, given once. The oldest `_HOT` are kept
    as objects in the deque `hot` (a queue that consumers keep up with never packs anything,
    and costs what a deque costs); behind them the rest are packed, column by column
    `_BATCH` at a time (the newest wait as objects in `_tail` until there are that many), and
    unpacked `_REFILL` at a time as `hot` runs out. `hot` is empty only when the FIFO is: test
    `fifo.hot` and read `fifo.hot[0]` on hot paths (a deque's own truth test, no Python call)."""
    __slots__ = ("hot", "_rows", "_tail", "_hi", "_part", "_make")

    def __init__(self, make, hi=False, part: int | None = None) -> None:
        self.hot: deque = deque()
        self._rows = ColumnFifo(_TYPES, _DEFAULTS)
        self._tail: list = []
        self._hi = hi
        self._part = part
        self._make = make   # the Message class (messages.py imports this module)

    def __len__(self) -> int:
        return len(self.hot) + len(self._rows) + len(self._tail)

    def __bool__(self) -> bool:
        return bool(self.hot)

    def append(self, msg) -> None:
        tail = self._tail
        if tail or self._rows or len(self.hot) >= _HOT:
            tail.append(msg)
            if len(tail) >= _BATCH:
                self._pack_tail()
        else:
            self.hot.append(msg)

    def extend(self, msgs) -> None:
        for m in msgs:
            self.append(m)

    def _pack_tail(self) -> None:
        tail, self._tail = self._tail, []
        self._rows.extend_columns(_columns(tail))

    def _message(self, row: tuple):
        index, size, expiry, acquired, failed, persistent = row
        return self._make(index, size, None if expiry == _NO_EXPIRY else expiry, self._hi,
                          bool(persistent), acquired, failed, self._part)

    def _refill(self) -> None:
        """`hot` ran out: the next packed rows become objects, else the tail moves up."""
        rows, hot = self._rows, self.hot
        if rows:
            make, hi, part = self._make, self._hi, self._part
            index, size, expiry, acquired, failed, persistent = rows.pop_columns(_REFILL)
            hot.extend([make(i, n, None if e == _NO_EXPIRY else e, hi, p == 1, a, f, part)
                        for i, n, e, a, f, p in zip(index, size, expiry, acquired, failed,
                                                     persistent)])
        elif self._tail:
            hot.extend(self._tail)
            self._tail = []

    def popleft(self):
        hot = self.hot
        msg = hot.popleft()
        if not hot:
            self._refill()
        return msg

    def appendleft(self, msg) -> None:
        self.hot.appendleft(msg)

    def index_at(self, i: int) -> int:
        """The log index of the i-th message (0 = head, -1 = tail), without making a `Message`."""
        n, r = len(self.hot), len(self._rows)
        if i < 0:
            i += n + r + len(self._tail)
        if i < n:
            return self.hot[i].index
        return self._rows.value(i - n, _INDEX) if i < n + r else self._tail[i - n - r].index

    def __getitem__(self, i: int):
        n, r = len(self.hot), len(self._rows)
        if i < 0:
            i += n + r + len(self._tail)
        if i < n:
            return self.hot[i]
        return self._message(self._rows[i - n]) if i < n + r else self._tail[i - n - r]

    def __iter__(self) -> Iterator:
        return chain(self.hot, map(self._message, self._rows), list(self._tail))

    def clear(self) -> None:
        self.hot.clear()
        self._rows.clear()
        self._tail = []

    def total_size(self) -> int:
        return (sum(m.size for m in self.hot) + self._rows.column_sum(1)
                + sum(m.size for m in self._tail))

    def to_wire(self) -> list[bytes]:
        """The columns of every message, head first (the deque's and the tail's packed around
        the rest)."""
        return ColumnFifo.concat_wire(_packed(self.hot), self._rows, _packed(self._tail))

    def load_wire(self, w: list) -> None:
        """Replace the contents with a snapshot's: `to_wire`'s columns, or (snapshots from
        before the packed form) one `Message.to_wire` list per message."""
        self.clear()
        if w and not isinstance(w[0], bytes):
            self.extend(self._make(*m) for m in w)
        else:
            self._rows.load_wire(w)
            self._refill()


def _columns(msgs) -> list[list]:
    return [[m.index for m in msgs], [m.size for m in msgs],
            [_NO_EXPIRY if m.expiry is None else m.expiry for m in msgs],
            [min(m.acquired, _COUNT_MAX) for m in msgs],
            [min(m.delivery_failed, _COUNT_MAX) for m in msgs],
            [1 if m.persistent else 0 for m in msgs]]


def _packed(msgs) -> ColumnFifo:
    f = ColumnFifo(_TYPES, _DEFAULTS)
    if msgs:
        f.extend_columns(_columns(msgs))
    return f


class PackedInts:
    """A FIFO of ints (log indexes): append, look at and pop the head, iterate. As
    `PackedMessages`: the oldest `_HOT` in the deque `hot` (empty only when the FIFO is),
    the rest packed `_BATCH` at a time (the newest wait in `_tail`)."""
    __slots__ = ("hot", "_rows", "_tail")

    def __init__(self, items=()) -> None:
        self.hot: deque[int] = deque()
        self._rows = ColumnFifo("q")
        self._tail: list[int] = []
        for i in items:
            self.append(i)

    def __len__(self) -> int:
        return len(self.hot) + len(self._rows) + len(self._tail)

    def __bool__(self) -> bool:
        return bool(self.hot)

    def append(self, v: int) -> None:
        tail = self._tail
        if tail or self._rows or len(self.hot) >= _HOT:
            tail.append(v)
            if len(tail) >= _BATCH:
                self._rows.extend_columns([tail])
                self._tail = []
        else:
            self.hot.append(v)

    def _refill(self) -> None:
        if self._rows:
            self.hot.extend(self._rows.pop_columns(_REFILL)[0])
        elif self._tail:
            self.hot.extend(self._tail)
            self._tail = []

    def head(self) -> int:
        return self.hot[0]

    def popleft(self) -> int:
        hot = self.hot
        v = hot.popleft()
        if not hot:
            self._refill()
        return v

    def __iter__(self) -> Iterator[int]:
        return chain(self.hot, self._rows.column(0), list(self._tail))

    def to_bytes(self) -> bytes:
        head, tail = ColumnFifo("q"), ColumnFifo("q")
        if self.hot:
            head.extend_columns([list(self.hot)])
        if self._tail:
            tail.extend_columns([self._tail])
        return ColumnFifo.concat_wire(head, self._rows, tail)[0]

    @classmethod
    def from_bytes(cls, data: bytes) -> "PackedInts":
        p = cls()
        p._rows.load_wire([data])
        p._refill()
        return p
