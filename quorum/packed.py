"""`ColumnFifo`: a FIFO of fixed-shape rows of ints, held as a few machine words per row.

Queues with backlogs of millions of messages keep each waiting message's small header here
instead of as Python objects (an object with its ints costs ~200 bytes; a row of five columns
~30): the quorum queue's ready messages (`quorum/fifo/packed.py`) and a classic queue's paged-out
messages (`amqp_broker/queues/paging.py`).  Rows live in chunks of `array`s; a column given a
default is stored only in chunks where some row differs from it (most queues have no TTL, so
the expiry column usually costs nothing).  `to_wire` gives each column as little-endian bytes
(the same on every machine, for snapshots).
"""
from __future__ import annotations

import sys
from array import array
from collections import deque
from typing import Iterator, Sequence

__all__ = ["ColumnFifo"]

# rows per chunk: big enough that per-chunk overhead is negligible, small enough that a short
# queue reserves little
CHUNK = 2048
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
    """Up to CHUNK rows; `start` is the first not yet taken.  A defaulted column is None while
    every row of the chunk has the default."""
    __slots__ = ("cols", "start")

    def __init__(self, cols: list) -> None:
        self.cols = cols
        self.start = 0


class ColumnFifo:
    """Rows of `len(typecodes)` ints (array typecodes, e.g. "qIb").  `defaults[i]` is None for
    a column always stored, else the value a lazily stored column's absent rows have."""
    __slots__ = ("_types", "_defaults", "_chunks", "_len")

    def __init__(self, typecodes: str, defaults: Sequence[int | None] | None = None) -> None:
        self._types = typecodes
        self._defaults = tuple(defaults) if defaults is not None else (None,) * len(typecodes)
        self._chunks: deque[_Chunk] = deque()
        self._len = 0

    def _new_chunk(self) -> _Chunk:
        return _Chunk([array(t) if d is None else None
                       for t, d in zip(self._types, self._defaults)])

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    def append(self, row: Sequence[int]) -> None:
        chunks = self._chunks
        if not chunks or self._rows(chunks[-1]) == CHUNK:
            chunks.append(self._new_chunk())
        c = chunks[-1]
        n = self._rows(c)
        cols = c.cols
        for i, v in enumerate(row):
            col = cols[i]
            if col is None:
                d = self._defaults[i]
                if v == d:
                    continue
                col = cols[i] = array(self._types[i], [d]) * n
            col.append(v)
        self._len += 1

    def extend_columns(self, columns: Sequence[list]) -> None:
        """Append rows given column by column (`columns[i]` is column i of every new row, all
        of one length): one C-level extend per column and chunk instead of a loop per row."""
        n = len(columns[0])
        chunks = self._chunks
        done = 0
        while done < n:
            if not chunks or self._rows(chunks[-1]) == CHUNK:
                chunks.append(self._new_chunk())
            c = chunks[-1]
            have = self._rows(c)
            take = min(CHUNK - have, n - done)
            cols = c.cols
            for i, values in enumerate(columns):
                part = values[done:done + take] if take < n else values
                col = cols[i]
                if col is None:
                    d = self._defaults[i]
                    if part.count(d) == take:
                        continue
                    col = cols[i] = array(self._types[i], [d]) * have
                col.fromlist(part)
            done += take
        self._len += n

    def pop_columns(self, n: int) -> list[list]:
        """Remove the first `n` rows (fewer if there are fewer) and return them column by
        column, as lists."""
        out: list[list] = [[] for _ in self._types]
        chunks = self._chunks
        n = min(n, self._len)
        self._len -= n
        while n:
            c = chunks[0]
            end = self._rows(c)
            take = min(n, end - c.start)
            stop = c.start + take
            for i, col in enumerate(c.cols):
                if col is None:
                    out[i] += [self._defaults[i]] * take
                else:
                    out[i] += col[c.start:stop].tolist()
            c.start = stop
            if stop == end:
                chunks.popleft()
            n -= take
        return out

    def _rows(self, c: _Chunk) -> int:
        for col in c.cols:
            if col is not None:
                return len(col)
        raise AssertionError("a ColumnFifo needs one column without a default")

    def _row(self, c: _Chunk, j: int) -> tuple:
        return tuple(self._defaults[i] if col is None else col[j] for i, col in enumerate(c.cols))

    def popleft(self) -> tuple:
        if not self._len:
            raise IndexError("pop from an empty ColumnFifo")
        c = self._chunks[0]
        row = self._row(c, c.start)
        c.start += 1
        if c.start == self._rows(c):
            self._chunks.popleft()
        self._len -= 1
        return row

    def _locate(self, i: int) -> tuple[_Chunk, int]:
        if i < 0:
            i += self._len
        if not 0 <= i < self._len:
            raise IndexError("ColumnFifo index out of range")
        for c in self._chunks:
            n = self._rows(c) - c.start
            if i < n:
                return c, c.start + i
            i -= n
        raise AssertionError("unreachable")

    def __getitem__(self, i: int) -> tuple:
        c, j = self._locate(i)
        return self._row(c, j)

    def value(self, i: int, col: int) -> int:
        """Column `col` of row `i` (0 = head, -1 = tail), without building the row."""
        c, j = self._locate(i)
        a = c.cols[col]
        return self._defaults[col] if a is None else a[j]

    def __iter__(self) -> Iterator[tuple]:
        for c in list(self._chunks):
            for j in range(c.start, self._rows(c)):
                yield self._row(c, j)

    def column(self, col: int) -> Iterator[int]:
        """Column `col` of every row, head first."""
        d = self._defaults[col]
        for c in list(self._chunks):
            a = c.cols[col]
            if a is None:
                yield from (d for _ in range(self._rows(c) - c.start))
            else:
                yield from (a[c.start:] if c.start else a)

    def column_sum(self, col: int) -> int:
        return sum(self.column(col))

    def clear(self) -> None:
        self._chunks.clear()
        self._len = 0

    def to_wire(self) -> list[bytes]:
        """Each column as little-endian bytes; a defaulted column that no row departs from is
        empty bytes."""
        out = []
        for i, t in enumerate(self._types):
            stored = any(c.cols[i] is not None for c in self._chunks)
            if self._defaults[i] is not None and not stored:
                out.append(b"")
                continue
            col = array(t, self.column(i)) if self._defaults[i] is not None else array(t)
            if self._defaults[i] is None:
                for c in self._chunks:
                    a = c.cols[i]
                    col.extend(a[c.start:] if c.start else a)
            out.append(_le_bytes(col))
        return out

    @staticmethod
    def concat_wire(*fifos: "ColumnFifo") -> list[bytes]:
        """`to_wire` of the rows of each of `fifos` in turn (same column types)."""
        wires = [f.to_wire() for f in fifos]
        first = fifos[0]
        out = []
        for i, t in enumerate(first._types):
            parts = [w[i] for w in wires]
            if all(parts) or not any(parts):  # all spelled out, or all defaulted throughout
                out.append(b"".join(parts))
                continue
            d = first._defaults[i]   # some left a defaulted column out: spell it out
            out.append(b"".join(
                p if p or not len(f) else _le_bytes(array(t, [d]) * len(f))
                for p, f in zip(parts, fifos)))
        return out

    def load_wire(self, w: Sequence[bytes]) -> None:
        """Replace the contents with `to_wire`'s output."""
        self.clear()
        cols = [_from_le(t, b) for t, b in zip(self._types, w)]
        n = max(len(col) for col in cols) if cols else 0
        for lo in range(0, n, CHUNK):
            self._chunks.append(_Chunk([col[lo:lo + CHUNK] if len(col) else None
                                        for col in cols]))
        self._len = n
