"""The in-memory view of one Raft group's durable log: where each entry lives.

Owned by `quorum.log.store.LogStore` (one `GroupLog` per group), built by `quorum.log.recover`.
No IO except reading segment files on a cache miss.

An entry lives in one of several *sources*, oldest first: segment files (in creation order),
then memory tables, one per WAL generation (the newest takes appends; older ones are frozen
while the WAL writer flushes them to segments). Every write at index i drops the entries >= i,
so each source holds a contiguous range, and an index <= `last_index` is found in the newest
source containing it. An older source is valid for index i only up to just below the first
index of any newer source starting above i.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

from . import records as R
from .disk import OsDisk, joined
from .segment import SegmentInfo, read_segment_range

__all__ = ["GroupLog", "Mem", "LogError"]


class LogError(Exception):
    """A caller broke the log's contract (e.g. a gap in appended indexes)."""


class Mem:
    """A memory table: entries first..first+len(items)-1 as (term, payload); a payload may be
    pieces (`disk.Payload`), joined only when read (`GroupLog.entries`)."""

    __slots__ = ("first", "items")

    def __init__(self, first: int = 0) -> None:
        self.first = first
        self.items: list[tuple[int, bytes]] = []

    @property
    def end(self) -> int:
        """One past the last index held."""
        return self.first + len(self.items)

    def put(self, index: int, term: int, payload: bytes) -> None:
        """Write at `index`, dropping anything held at or above it."""
        if not self.items:
            self.first = index
        elif index != self.end:
            if index < self.first:
                self.items.clear()
                self.first = index
            else:
                del self.items[index - self.first :]
        self.items.append((term, payload))

    def cut(self, from_index: int) -> None:
        if self.items and from_index < self.end:
            if from_index <= self.first:
                self.items.clear()
            else:
                del self.items[from_index - self.first :]

    def entries(self) -> list[tuple[int, int, bytes]]:
        f = self.first
        return [(f + i, t, p) for i, (t, p) in enumerate(self.items)]


@dataclass(slots=True)
class HardState:
    term: int = 0
    vote: str | None = None
    commit: int = 0


class GroupLog:
    """Per-group index: hard state, snapshot point, last index and the sources of entries."""

    def __init__(self, name: str, directory: str) -> None:
        self.name = name
        self.key = name.encode()
        self.entry_prefix = R.entry_prefix(self.key)  # per-entry hot path (store.append)
        self.directory = directory
        self.hard = HardState()
        self.snap_index = 0
        self.snap_term = 0
        self.last_index = 0
        self._segments: list[SegmentInfo] = []
        self._seg_firsts: list[int] | None = []  # for bisect; None: segments overlap
        self.mems: list[Mem] = [Mem()]  # the last one takes appends
        self.deleted = False  # a DELETE record is queued: no more writes

    @property
    def segments(self) -> list[SegmentInfo]:
        """Segment files in creation order. Assigned, never changed in place, so that the
        lookup index below is rebuilt with every change."""
        return self._segments

    @segments.setter
    def segments(self, segs: list[SegmentInfo]) -> None:
        self._segments = segs
        firsts = [s.first for s in segs]
        ordered = all(a.last_written < b.first for a, b in zip(segs, segs[1:]))
        self._seg_firsts = firsts if ordered else None

    # -- writes (in-memory bookkeeping; the store writes the WAL record) ---------------------
    def check_append(self, index: int) -> None:
        if self.deleted:
            raise LogError(f"group {self.name!r} is deleted")
        if index <= self.snap_index or index > self.last_index + 1:
            raise LogError(
                f"group {self.name!r}: append at {index} but log is "
                f"{self.snap_index + 1}..{self.last_index}"
            )

    def put(self, index: int, term: int, payload: bytes) -> None:
        self.mems[-1].put(index, term, payload)
        self.last_index = index

    def cut(self, from_index: int) -> None:
        """Drop entries >= from_index (older sources are masked by `last_index`)."""
        self.mems[-1].cut(from_index)
        self.last_index = min(self.last_index, from_index - 1)

    def compact(self, index: int, term: int, discard: bool) -> list[SegmentInfo]:
        """A snapshot now covers 1..index; with `discard` (or a snapshot past the log's end)
        the whole log is replaced by it. Returns the segments no longer needed. Frozen memory
        tables are left alone: the WAL writer's thread may be reading them."""
        self.snap_index, self.snap_term = index, term
        if discard or self.last_index < index:
            self.last_index = index
            self.mems[-1] = Mem()
            dropped, self.segments = self.segments, []
            return dropped
        dropped = [s for s in self.segments if s.last_written <= index]
        self.segments = [s for s in self.segments if s.last_written > index]
        cur = self.mems[-1]
        if cur.items and cur.first <= index:
            del cur.items[: min(len(cur.items), index + 1 - cur.first)]
            cur.first = index + 1
        return dropped

    def add_segments(self, segs: list[SegmentInfo]) -> list[SegmentInfo]:
        """Install freshly written segments (newer than all existing ones); returns the ones they
        supersede entirely or that the snapshot covers."""
        dropped = []
        current = self._segments
        for new in segs:
            keep = []
            for s in current:
                (dropped if s.first >= new.first else keep).append(s)
            keep.append(new)
            current = keep
        dropped += [s for s in current if s.last_written <= self.snap_index]
        self.segments = [s for s in current if s.last_written > self.snap_index]
        return dropped

    # -- reads ------------------------------------------------------------------------------
    @property
    def first_index(self) -> int:
        return self.snap_index + 1

    def _locate(self, index: int) -> tuple[object, int] | None:
        """The source holding `index` and the last index it is valid for: the newest source
        containing it, valid up to just below the first index of any newer source that starts
        above `index` (and never past `last_index`)."""
        mems = ((m.first, m.end - 1, m) for m in reversed(self.mems) if m.items)
        hit, bound = _newest_holding(mems, index, self.last_index)
        if hit is not None:
            return hit
        segs, firsts = self._segments, self._seg_firsts
        if firsts is not None:
            # Segments that do not overlap, in ascending order (the usual case): at most one
            # holds `index`, and every newer one starts past its end. A deep backlog is
            # thousands of segments, read from its oldest: no scan of all of them per read.
            k = bisect_right(firsts, index) - 1
            if k >= 0 and index <= segs[k].last_written:
                return segs[k], min(segs[k].last_written, bound)
            return None
        # overlapping segments (after a truncation): newest first
        return _newest_holding(((s.first, s.last_written, s) for s in reversed(segs)), index, bound)[0]

    def term(self, disk: OsDisk, index: int) -> int | None:
        """Term of the entry at `index`; the snapshot's term at its index; None if unknown."""
        if index == self.snap_index:
            return self.snap_term
        if index < self.first_index or index > self.last_index:
            return None
        hit = self._locate(index)
        if hit is None:
            return None
        src, _ = hit
        if isinstance(src, Mem):
            return src.items[index - src.first][0]
        return src.term(disk, index)  # type: ignore[union-attr]

    def entries(self, disk: OsDisk, lo: int, hi: int) -> list[tuple[int, int, bytes]]:
        """Entries lo..hi inclusive as (index, term, payload); raises if outside the log."""
        if lo < self.first_index or hi > self.last_index:
            raise LogError(f"group {self.name!r}: entries {lo}..{hi} outside {self.first_index}..{self.last_index}")
        out: list[tuple[int, int, bytes]] = []
        i = lo
        while i <= hi:
            hit = self._locate(i)
            if hit is None:
                raise LogError(f"group {self.name!r}: entry {i} missing")
            src, upto = hit
            upto = min(upto, hi)
            if isinstance(src, Mem):
                base = src.first
                out.extend((base + k, t, joined(p)) for k, (t, p) in
                           enumerate(src.items[i - base : upto - base + 1], start=i - base))
            else:
                out.extend(read_segment_range(disk, src, i, upto))  # type: ignore[arg-type]
            i = upto + 1
        return out


def _newest_holding(sources, index: int, bound: int) -> tuple[tuple[object, int] | None, int]:
    """Over (first, last, source) newest first: the source holding `index` with the last index
    it is valid for, or None; and the bound the newer sources starting above `index` leave."""
    for first, last, src in sources:
        if first <= index <= last:
            return (src, min(last, bound)), bound
        if first > index:
            bound = min(bound, first - 1)
    return None, bound
