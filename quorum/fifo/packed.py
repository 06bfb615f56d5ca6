"""Compact FIFOs for the bulk of a quorum queue's state: ready message headers and live indexes.

A backlog of millions of messages is held as a few machine words per message in fixed-size
chunks of `array`s, not as one Python object (about 200 bytes with its ints) per message; a
`Message` is made only when one is taken or looked at.  `PackedMessages` offers the part of
`collections.deque` that `ReadyQueue` and `PartitionedReady` use; `PackedInts` the part
`LiveIndexes` uses.  Both encode to bytes for snapshots (little-endian, so every replica
writes the same bytes).  Used only by `messages.py` and `partitioned.py`.
"""
from __future__ import annotations

import sys
from array import array
from collections import deque
from typing import Iterator

__all__ = ["PackedMessages", "PackedInts"]

# messages per chunk: big enough that per-chunk overhead is negligible, small enough that a
# short queue does not reserve much
_CHUNK = 2048
_NO_EXPIRY = -1   # expiries are leader times in ms, always positive
_SWAP = sys.byteorder != "little"


def _le_bytes(a: array) -> bytes:
    if _SWAP:
        a = array(a.typecode, a)
        a.byteswap()
    return a.tobytes()


def _from_le(typecode: str, data: bytes) -> array:
    a = array(typecode)
    a.frombytes(data)
    if _SWAP:
        a.byteswap()
    return a


class _Chunk:
    """Up to `_CHUNK` messages; `start` is the first one not yet taken.  `expiry` is None
    while no message of the chunk has one (most queues have no TTL)."""
    __slots__ = ("index", "size", "expiry", "acquired", "failed", "persistent", "start")

    def __init__(self) -> None:
        self.index = array("q")
        self.size = array("I")       # bodies are far below 4 GiB (max_message_size)
        self.expiry: array | None = None
        self.acquired = array("I")   # delivery counts, saturating at 2^32 - 1
        self.failed = array("I")
        self.persistent = array("b")
        self.start = 0

    def expiries(self) -> array:
        if self.expiry is None:
            self.expiry = array("q", [_NO_EXPIRY]) * len(self.index)
        return self.expiry


_COUNT_MAX = 2 ** 32 - 1
_TYPECODES = "qIqIIb"   # index, size, expiry, acquired, failed, persistent

class PackedMessages:
    """A FIFO of message headers (`messages.Message`) of one level or one partition: every
    message pushed here has the same `hi` and `part`, given once."""
    __slots__ = ("_chunks", "_len", "_hi", "_part", "_make")

    def __init__(self, make, hi=False, part: int | None = None) -> None:
        self._chunks: deque[_Chunk] = deque()
        self._len = 0
        self._hi = hi
        self._part = part
        self._make = make   # the Message class (kept here: messages.py imports this module)

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    def append(self, msg) -> None:
        chunks = self._chunks
        if not chunks or len(chunks[-1].index) == _CHUNK:
            chunks.append(_Chunk())
        c = chunks[-1]
        if msg.expiry is not None:
            c.expiries().append(msg.expiry)
        elif c.expiry is not None:
            c.expiry.append(_NO_EXPIRY)
        c.index.append(msg.index)
        c.size.append(msg.size)
        c.acquired.append(min(msg.acquired, _COUNT_MAX))
        c.failed.append(min(msg.delivery_failed, _COUNT_MAX))
        c.persistent.append(msg.persistent)
        self._len += 1

    def extend(self, msgs) -> None:
        for m in msgs:
            self.append(m)

    def _at(self, c: _Chunk, i: int):
        e = _NO_EXPIRY if c.expiry is None else c.expiry[i]
        return self._make(c.index[i], c.size[i], None if e == _NO_EXPIRY else e, self._hi,
                          bool(c.persistent[i]), c.acquired[i], c.failed[i], self._part)

    def popleft(self):
        if not self._len:
            raise IndexError("pop from an empty PackedMessages")
        c = self._chunks[0]
        msg = self._at(c, c.start)
        c.start += 1
        if c.start == len(c.index):
            self._chunks.popleft()
        self._len -= 1
        return msg

    def appendleft(self, msg) -> None:
        """Rare (a partition's returned message older than all it holds): rebuilds."""
        items = [msg, *self]
        self.clear()
        self.extend(items)

    def index_at(self, i: int) -> int:
        """The log index of the i-th message (0 = head), without making a `Message`."""
        c, j = self._locate(i)
        return c.index[j]

    def _locate(self, i: int) -> tuple[_Chunk, int]:
        if i < 0:
            i += self._len
        if not 0 <= i < self._len:
            raise IndexError("PackedMessages index out of range")
        for c in self._chunks:
            n = len(c.index) - c.start
            if i < n:
                return c, c.start + i
            i -= n
        raise AssertionError("unreachable")

    def __getitem__(self, i: int):
        c, j = self._locate(i)
        return self._at(c, j)

    def __iter__(self) -> Iterator:
        for c in list(self._chunks):
            for j in range(c.start, len(c.index)):
                yield self._at(c, j)

    def clear(self) -> None:
        self._chunks.clear()
        self._len = 0

    def total_size(self) -> int:
        return sum(sum(c.size[c.start:]) for c in self._chunks)

    def to_wire(self) -> list:
        """[indexes, sizes, expiries, acquired, failed, persistent], each column as
        little-endian bytes; the expiries are empty when no message has one."""
        cols = [array(t) for t in _TYPECODES]
        timed = any(c.expiry is not None for c in self._chunks)
        for c in self._chunks:
            s = c.start
            srcs = (c.index, c.size, c.expiries() if timed else None, c.acquired, c.failed,
                    c.persistent)
            for col, src in zip(cols, srcs):
                if src is not None:
                    col.extend(src[s:] if s else src)
        return [_le_bytes(col) for col in cols]

    def load_wire(self, w: list) -> None:
        """Replace the contents with a snapshot's: `to_wire`'s columns, or (snapshots from
        before the packed form) one `Message.to_wire` list per message."""
        self.clear()
        if w and not isinstance(w[0], bytes):
            self.extend(self._make(*m) for m in w)
            return
        cols = [_from_le(t, b) for t, b in zip(_TYPECODES, w)]
        timed = len(cols[2]) > 0
        for lo in range(0, len(cols[0]), _CHUNK):
            c = _Chunk()
            c.index, c.size, expiry, c.acquired, c.failed, c.persistent = (
                col[lo:lo + _CHUNK] for col in cols)
            c.expiry = expiry if timed else None
            self._chunks.append(c)
        self._len = len(cols[0])


class PackedInts:
    """A FIFO of ints (log indexes): append, peek and pop at the head, iterate."""
    __slots__ = ("_chunks", "_len")

    def __init__(self, items=()) -> None:
        self._chunks: deque[list] = deque()   # [array, start]
        self._len = 0
        for i in items:
            self.append(i)

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    def append(self, v: int) -> None:
        chunks = self._chunks
        if not chunks or len(chunks[-1][0]) == _CHUNK:
            chunks.append([array("q"), 0])
        chunks[-1][0].append(v)
        self._len += 1

    def head(self) -> int:
        a, s = self._chunks[0]
        return a[s]

    def popleft(self) -> int:
        c = self._chunks[0]
        a, s = c
        v = a[s]
        c[1] = s + 1
        if s + 1 == len(a):
            self._chunks.popleft()
        self._len -= 1
        return v

    def __iter__(self) -> Iterator[int]:
        for a, s in list(self._chunks):
            yield from (a[s:] if s else a)

    def to_bytes(self) -> bytes:
        out = array("q")
        for a, s in self._chunks:
            out.extend(a[s:] if s else a)
        return _le_bytes(out)

    @classmethod
    def from_bytes(cls, data: bytes) -> "PackedInts":
        p = cls()
        a = _from_le("q", data)
        for lo in range(0, len(a), _CHUNK):
            p._chunks.append([a[lo:lo + _CHUNK], 0])
        p._len = len(a)
        return p
