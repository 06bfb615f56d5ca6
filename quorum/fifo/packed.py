"""The quorum queue's ready messages and live indexes, packed (`quorum.packed.ColumnFifo`).

A backlog of millions of messages costs about 21 bytes a message here instead of a `Message`
object each; a `Message` is made only when one is taken or looked at.  `PackedMessages` offers
the part of `collections.deque` that `ReadyQueue` and `PartitionedReady` use; `PackedInts` the
part `LiveIndexes` uses.  Used only by `messages.py` and `partitioned.py`.
"""
from __future__ import annotations

from typing import Iterator

from quorum.packed import ColumnFifo

__all__ = ["PackedMessages", "PackedInts"]

_NO_EXPIRY = -1   # expiries are leader times in ms, always positive
_COUNT_MAX = 2 ** 32 - 1   # delivery counts saturate (they never get near it)
# index, size (bodies are far below 4 GiB), expiry, acquired, delivery_failed, persistent
_TYPES = "qIqIIb"
_DEFAULTS = (None, None, _NO_EXPIRY, 0, 0, 1)
_INDEX = 0


class PackedMessages:
    """A FIFO of message headers (`messages.Message`) of one level or one partition: every
    message pushed here has the same `hi` and `part`, given once."""
    __slots__ = ("_rows", "_hi", "_part", "_make")

    def __init__(self, make, hi=False, part: int | None = None) -> None:
        self._rows = ColumnFifo(_TYPES, _DEFAULTS)
        self._hi = hi
        self._part = part
        self._make = make   # the Message class (messages.py imports this module)

    def __len__(self) -> int:
        return len(self._rows)

    def __bool__(self) -> bool:
        return bool(self._rows)

    def append(self, msg) -> None:
        self._rows.append((msg.index, msg.size,
                           _NO_EXPIRY if msg.expiry is None else msg.expiry,
                           min(msg.acquired, _COUNT_MAX), min(msg.delivery_failed, _COUNT_MAX),
                           1 if msg.persistent else 0))

    def extend(self, msgs) -> None:
        for m in msgs:
            self.append(m)

    def _message(self, row: tuple):
        index, size, expiry, acquired, failed, persistent = row
        return self._make(index, size, None if expiry == _NO_EXPIRY else expiry, self._hi,
                          bool(persistent), acquired, failed, self._part)

    def popleft(self):
        return self._message(self._rows.popleft())

    def appendleft(self, msg) -> None:
        """Rare (a partition's returned message older than all it holds): rebuilds."""
        items = [msg, *self]
        self.clear()
        self.extend(items)

    def index_at(self, i: int) -> int:
        """The log index of the i-th message (0 = head, -1 = tail), without making a `Message`."""
        return self._rows.value(i, _INDEX)

    def __getitem__(self, i: int):
        return self._message(self._rows[i])

    def __iter__(self) -> Iterator:
        return map(self._message, self._rows)

    def clear(self) -> None:
        self._rows.clear()

    def total_size(self) -> int:
        return self._rows.column_sum(1)

    def to_wire(self) -> list[bytes]:
        return self._rows.to_wire()

    def load_wire(self, w: list) -> None:
        """Replace the contents with a snapshot's: `to_wire`'s columns, or (snapshots from
        before the packed form) one `Message.to_wire` list per message."""
        if w and not isinstance(w[0], bytes):
            self.clear()
            self.extend(self._make(*m) for m in w)
        else:
            self._rows.load_wire(w)


class PackedInts:
    """A FIFO of ints (log indexes): append, look at and pop the head, iterate."""
    __slots__ = ("_rows",)

    def __init__(self, items=()) -> None:
        self._rows = ColumnFifo("q")
        for i in items:
            self._rows.append((i,))

    def __len__(self) -> int:
        return len(self._rows)

    def __bool__(self) -> bool:
        return bool(self._rows)

    def append(self, v: int) -> None:
        self._rows.append((v,))

    def head(self) -> int:
        return self._rows.value(0, 0)

    def popleft(self) -> int:
        return self._rows.popleft()[0]

    def __iter__(self) -> Iterator[int]:
        return self._rows.column(0)

    def to_bytes(self) -> bytes:
        return self._rows.to_wire()[0]

    @classmethod
    def from_bytes(cls, data: bytes) -> "PackedInts":
        p = cls()
        p._rows.load_wire([data])
        return p
