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


class PackedMessages:
    """A FIFO of message headers (`messages.Message`) of one level or one partition: every
    message pushed here has the same `hi` and `part`, given once. The oldest `_HOT` are kept
    as objects in the deque `hot` (a queue that consumers keep up with never packs anything,
    and costs what a deque costs); behind them, the rest are packed and unpacked `_REFILL` at
    a time as `hot` runs out. `hot` is empty only when the FIFO is: test `fifo.hot` and read
    `fifo.hot[0]` on hot paths (a deque's own truth test, no Python call)."""
    __slots__ = ("hot", "_rows", "_hi", "_part", "_make")

    def __init__(self, make, hi=False, part: int | None = None) -> None:
        self.hot: deque = deque()
        self._rows = ColumnFifo(_TYPES, _DEFAULTS)
        self._hi = hi
        self._part = part
        self._make = make   # the Message class (messages.py imports this module)

    def __len__(self) -> int:
        return len(self.hot) + len(self._rows)

    def __bool__(self) -> bool:
        return bool(self.hot)

    def append(self, msg) -> None:
        if len(self.hot) < _HOT and not self._rows:
            self.hot.append(msg)
        else:
            self._rows.append(_row(msg))

    def extend(self, msgs) -> None:
        for m in msgs:
            self.append(m)

    def _message(self, row: tuple):
        index, size, expiry, acquired, failed, persistent = row
        return self._make(index, size, None if expiry == _NO_EXPIRY else expiry, self._hi,
                          bool(persistent), acquired, failed, self._part)

    def _refill(self) -> None:
        rows, hot = self._rows, self.hot
        for _ in range(min(_REFILL, len(rows))):
            hot.append(self._message(rows.popleft()))

    def popleft(self):
        hot = self.hot
        msg = hot.popleft()
        if not hot and self._rows:
            self._refill()
        return msg

    def appendleft(self, msg) -> None:
        self.hot.appendleft(msg)

    def index_at(self, i: int) -> int:
        """The log index of the i-th message (0 = head, -1 = tail), without making a `Message`."""
        n = len(self.hot)
        if i < 0:
            i += n + len(self._rows)
        return self.hot[i].index if i < n else self._rows.value(i - n, _INDEX)

    def __getitem__(self, i: int):
        n = len(self.hot)
        if i < 0:
            i += n + len(self._rows)
        return self.hot[i] if i < n else self._message(self._rows[i - n])

    def __iter__(self) -> Iterator:
        return chain(self.hot, map(self._message, self._rows))

    def clear(self) -> None:
        self.hot.clear()
        self._rows.clear()

    def total_size(self) -> int:
        return sum(m.size for m in self.hot) + self._rows.column_sum(1)

    def to_wire(self) -> list[bytes]:
        """The columns of every message, head first (the deque's packed in front of the rest)."""
        head = ColumnFifo(_TYPES, _DEFAULTS)
        for m in self.hot:
            head.append(_row(m))
        return ColumnFifo.concat_wire(head, self._rows)

    def load_wire(self, w: list) -> None:
        """Replace the contents with a snapshot's: `to_wire`'s columns, or (snapshots from
        before the packed form) one `Message.to_wire` list per message."""
        self.clear()
        if w and not isinstance(w[0], bytes):
            self.extend(self._make(*m) for m in w)
        else:
            self._rows.load_wire(w)
            self._refill()


def _row(msg) -> tuple:
    return (msg.index, msg.size, _NO_EXPIRY if msg.expiry is None else msg.expiry,
            min(msg.acquired, _COUNT_MAX), min(msg.delivery_failed, _COUNT_MAX),
            1 if msg.persistent else 0)


class PackedInts:
    """A FIFO of ints (log indexes): append, look at and pop the head, iterate. As
    `PackedMessages`: the oldest `_HOT` in the deque `hot` (empty only when the FIFO is),
    the rest packed."""
    __slots__ = ("hot", "_rows")

    def __init__(self, items=()) -> None:
        self.hot: deque[int] = deque()
        self._rows = ColumnFifo("q")
        for i in items:
            self.append(i)

    def __len__(self) -> int:
        return len(self.hot) + len(self._rows)

    def __bool__(self) -> bool:
        return bool(self.hot)

    def append(self, v: int) -> None:
        if len(self.hot) < _HOT and not self._rows:
            self.hot.append(v)
        else:
            self._rows.append((v,))

    def _refill(self) -> None:
        rows, hot = self._rows, self.hot
        for _ in range(min(_REFILL, len(rows))):
            hot.append(rows.popleft()[0])

    def head(self) -> int:
        return self.hot[0]

    def popleft(self) -> int:
        hot = self.hot
        v = hot.popleft()
        if not hot and self._rows:
            self._refill()
        return v

    def __iter__(self) -> Iterator[int]:
        return chain(self.hot, self._rows.column(0))

    def to_bytes(self) -> bytes:
        head = ColumnFifo("q")
        for v in self.hot:
            head.append((v,))
        return ColumnFifo.concat_wire(head, self._rows)[0]

    @classmethod
    def from_bytes(cls, data: bytes) -> "PackedInts":
        p = cls()
        p._rows.load_wire([data])
        p._refill()
        return p
