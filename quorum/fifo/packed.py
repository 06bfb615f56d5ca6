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


class _HotPacked:
    """The shape both FIFOs share: the oldest `_HOT` items as objects in the deque `hot`
    (a FIFO that consumers keep up with never packs anything, and costs what a deque costs);
    behind them the rest packed in a `ColumnFifo`, column by column `_BATCH` at a time (the
    newest wait as objects in `_tail` until there are that many), and unpacked `_REFILL` at
    a time as `hot` runs out. `hot` is empty only when the FIFO is: test `fifo.hot` and read
    `fifo.hot[0]` on hot paths (a deque's own truth test, no Python call). A subclass gives
    the column types and how items become columns (`_columns`) and back (`_objects`)."""
    __slots__ = ("hot", "_rows", "_tail")
    _types = ""
    _defaults: tuple = ()

    def __init__(self) -> None:
        self.hot: deque = deque()
        self._rows = ColumnFifo(self._types, self._defaults)
        self._tail: list = []

    def _columns(self, items) -> list[list]:
        raise NotImplementedError

    def _objects(self, columns: list[list]) -> list:
        raise NotImplementedError

    def __len__(self) -> int:
        return len(self.hot) + len(self._rows) + len(self._tail)

    def __bool__(self) -> bool:
        return bool(self.hot)

    def append(self, item) -> None:
        tail = self._tail
        if tail or self._rows or len(self.hot) >= _HOT:
            tail.append(item)
            if len(tail) >= _BATCH:
                self._rows.extend_columns(self._columns(tail))
                self._tail = []
        else:
            self.hot.append(item)

    def _refill(self) -> None:
        """`hot` ran out: the next packed rows become objects, else the tail moves up."""
        if self._rows:
            self.hot.extend(self._objects(self._rows.pop_columns(_REFILL)))
        elif self._tail:
            self.hot.extend(self._tail)
            self._tail = []

    def popleft(self):
        hot = self.hot
        item = hot.popleft()
        if not hot:
            self._refill()
        return item

    def clear(self) -> None:
        self.hot.clear()
        self._rows.clear()
        self._tail = []

    def _wire(self) -> list[bytes]:
        """Each column of every item, head first (the deque's and the tail's packed around
        the rest), as `ColumnFifo.to_wire`."""
        return ColumnFifo.concat_wire(self._packed(self.hot), self._rows,
                                      self._packed(self._tail))

    def _packed(self, items) -> ColumnFifo:
        f = ColumnFifo(self._types, self._defaults)
        f.extend_columns(self._columns(items))
        return f


class PackedMessages(_HotPacked):
    """A FIFO of message headers (`messages.Message`) of one level or one partition: every
    message pushed here has the same `hi` and `part`, given once (see `_HotPacked`)."""
    __slots__ = ("_hi", "_part", "_make")
    _types = _TYPES
    _defaults = _DEFAULTS

    def __init__(self, make, hi=False, part: int | None = None) -> None:
        super().__init__()
        self._hi = hi
        self._part = part
        self._make = make   # the Message class (messages.py imports this module)

    def _columns(self, msgs) -> list[list]:
        return [[m.index for m in msgs], [m.size for m in msgs],
                [_NO_EXPIRY if m.expiry is None else m.expiry for m in msgs],
                [min(m.acquired, _COUNT_MAX) for m in msgs],
                [min(m.delivery_failed, _COUNT_MAX) for m in msgs],
                [1 if m.persistent else 0 for m in msgs]]

    def _objects(self, columns: list[list]) -> list:
        make, hi, part = self._make, self._hi, self._part
        return [make(i, n, None if e == _NO_EXPIRY else e, hi, p == 1, a, f, part)
                for i, n, e, a, f, p in zip(*columns)]

    def _message(self, row: tuple):
        index, size, expiry, acquired, failed, persistent = row
        return self._make(index, size, None if expiry == _NO_EXPIRY else expiry, self._hi,
                          bool(persistent), acquired, failed, self._part)

    def extend(self, msgs) -> None:
        for m in msgs:
            self.append(m)

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

    def total_size(self) -> int:
        return (sum(m.size for m in self.hot) + self._rows.column_sum(1)
                + sum(m.size for m in self._tail))

    def to_wire(self) -> list[bytes]:
        """The columns of every message, head first."""
        return self._wire()

    def load_wire(self, w: list) -> None:
        """Replace the contents with a snapshot's: `to_wire`'s columns, or (snapshots from
        before the packed form) one `Message.to_wire` list per message."""
        self.clear()
        if w and not isinstance(w[0], bytes):
            self.extend(self._make(*m) for m in w)
        else:
            self._rows.load_wire(w)
            self._refill()


class PackedInts(_HotPacked):
    """A FIFO of ints (log indexes): append, look at and pop the head, iterate (see
    `_HotPacked`)."""
    __slots__ = ()
    _types = "q"
    _defaults = (None,)

    def __init__(self, items=()) -> None:
        super().__init__()
        for i in items:
            self.append(i)

    def _columns(self, items) -> list[list]:
        return [list(items)]

    def _objects(self, columns: list[list]) -> list:
        return columns[0]

    def head(self) -> int:
        return self.hot[0]

    def __iter__(self) -> Iterator[int]:
        return chain(self.hot, self._rows.column(0), list(self._tail))

    def to_bytes(self) -> bytes:
        return self._wire()[0]

    @classmethod
    def from_bytes(cls, data: bytes) -> "PackedInts":
        p = cls()
        p._rows.load_wire([data])
        p._refill()
        return p
