"""The Raft log of one node: entries since the last snapshot, plus the marks that say how much
of it is durable, committed and applied. Used only by `RaftNode`.

Invariants: `snap_index <= applied <= commit <= last_index`,
`snap_index <= stable <= handed <= last_index`.
Entries from `mem_first` on are held in memory (`_entries[i - mem_first]`); entries between the
snapshot and `mem_first` were dropped from memory after being made durable and applied, and are
read back through the `LogReader` the driver gave (only needed for followers that lag).
Without a reader nothing is dropped and `mem_first == snap_index + 1`. Entries after `stable`
are not yet durable and are handed to the driver in `Ready.entries`; with asynchronous writes
(`RaftOptions.async_writes`) `handed` marks those handed out and still being written, so that
the next Ready carries only newer ones.
"""

from __future__ import annotations

from typing import Protocol

from .messages import Entry, Snapshot

__all__ = ["RaftLog", "LogReader"]


class LogReader(Protocol):
    def entries(self, lo: int, hi: int) -> list[Entry]:
        """Durable entries lo..hi-1, all of them, in order. Only asked for entries that the
        node handed out in `Ready.entries`, that were advanced, and that are after the latest
        snapshot the node knows."""


class RaftLog:
    __slots__ = ("snap_index", "snap_term", "mem_first", "_entries", "_reader", "stable",
                 "commit", "applied", "unstable_snapshot", "handed")

    def __init__(self, snapshot: Snapshot | None, entries: list[Entry],
                 reader: LogReader | None = None) -> None:
        self.snap_index = snapshot.meta.index if snapshot else 0
        self.snap_term = snapshot.meta.term if snapshot else 0
        self._reader = reader
        # entries the caller persisted may overlap the snapshot: keep only those after it
        entries = [e for e in entries if e.index > self.snap_index]
        self.mem_first = entries[0].index if entries else self.snap_index + 1
        if self.mem_first != self.snap_index + 1 and reader is None:
            raise ValueError(f"entries start at {self.mem_first}, not right after the snapshot"
                             f" ({self.snap_index}), and there is no reader for the gap")
        self._entries = entries
        for pos, e in enumerate(entries):
            if e.index != self.mem_first + pos:
                raise ValueError(f"persisted entries have a gap at index {e.index}")
        self.stable = self.handed = self.last_index
        self.commit = self.snap_index
        self.applied = self.snap_index
        self.unstable_snapshot: Snapshot | None = None

    # ---- reading -------------------------------------------------------------------------

    @property
    def last_index(self) -> int:
        return self.mem_first + len(self._entries) - 1

    @property
    def last_term(self) -> int:
        return self._entries[-1].term if self._entries else self.snap_term

    def term(self, index: int) -> int | None:
        """Term of entry `index`, or None when it is compacted away or beyond the end."""
        pos = index - self.mem_first
        if 0 <= pos < len(self._entries):
            return self._entries[pos].term
        if index == self.snap_index:
            return self.snap_term
        if self.snap_index < index < self.mem_first:
            return self._reader.entries(index, index + 1)[0].term
        return None

    def entry(self, index: int) -> Entry:
        pos = index - self.mem_first
        if pos >= 0:
            return self._entries[pos]
        return self._reader.entries(index, index + 1)[0]

    def slice(self, lo: int, hi: int, max_bytes: int | None = None) -> list[Entry]:
        """Entries lo..hi-1 (lo > snap_index), stopping early once `max_bytes` of data is
        reached; at least one entry is returned when lo < hi."""
        base = self.mem_first
        if lo >= base:
            out = self._entries[lo - base:hi - base]
        else:
            out = self._reader.entries(lo, min(hi, base))
            if hi > base:
                out = out + self._entries[:hi - base]
        if max_bytes is not None and len(out) > 1:
            size = 0
            for pos, e in enumerate(out):
                size += len(e.data)
                if size > max_bytes and pos > 0:
                    return out[:pos]
        return out

    def is_up_to_date(self, last_index: int, last_term: int) -> bool:
        """Raft section 5.4.1: is a log ending at (last_index, last_term) at least as new as ours?"""
        mine = self.last_term
        return last_term > mine or (last_term == mine and last_index >= self.last_index)

    def first_index_of_term(self, index: int) -> int:
        """The first index at or before `index` (and after the snapshot) with the same term."""
        term = self.term(index)
        while index - 1 > self.snap_index and self.term(index - 1) == term:
            index -= 1
        return index

    def last_index_of_term(self, term: int, at_most: int) -> int | None:
        """The last index <= at_most whose term is `term`, or None when the log has none."""
        index = min(at_most, self.last_index)
        while index > self.snap_index:
            t = self.term(index)
            if t == term:
                return index
            if t < term:
                return None
            index -= 1
        return None

    def unstable_entries(self) -> list[Entry]:
        """Entries not yet handed to the driver for writing."""
        return self._entries[self.handed + 1 - self.mem_first:]

    # ---- writing -------------------------------------------------------------------------

    def append(self, entries: list[Entry]) -> None:
        """Append, first dropping our entries from entries[0].index on (conflict repair)."""
        first = entries[0].index
        if not self.snap_index < first <= self.last_index + 1:
            raise ValueError(f"append at {first} outside ({self.snap_index}, {self.last_index + 1}]")
        if first <= self.commit:
            raise AssertionError(f"truncating committed entry {first} (commit {self.commit})")
        if first < self.mem_first:
            # possible after a restart from a tail of the log: replace it all
            self._entries = list(entries)
            self.mem_first = first
        else:
            del self._entries[first - self.mem_first:]
            self._entries.extend(entries)
        if self.stable >= first:
            self.stable = first - 1
        if self.handed >= first:
            self.handed = first - 1  # the replaced ones' write may still land: `stable_to` checks terms

    def find_conflict(self, entries: tuple[Entry, ...] | list[Entry]) -> int:
        """Position in `entries` of the first one that is new or differs in term from ours."""
        for pos, e in enumerate(entries):
            if self.term(e.index) != e.term:
                return pos
        return len(entries)

    def stable_to(self, index: int, term: int) -> None:
        """The driver made entries up to `index` durable; ignored if they were replaced since."""
        if index > self.stable and self.term(index) == term:
            self.stable = index
            if index > self.handed:
                self.handed = index

    def hand_to(self, index: int) -> None:
        """The driver took entries up to `index` to write (asynchronous writes)."""
        if index > self.handed:
            self.handed = index

    def commit_to(self, index: int) -> bool:
        if index > self.commit:
            self.commit = index
            return True
        return False

    def restore(self, snapshot: Snapshot) -> None:
        """Replace the whole log by a snapshot received from the leader."""
        self.snap_index = snapshot.meta.index
        self.snap_term = snapshot.meta.term
        self.mem_first = self.snap_index + 1
        self._entries = []
        self.stable = self.handed = self.commit = self.applied = self.snap_index
        self.unstable_snapshot = snapshot

    def compact(self, index: int) -> None:
        """Drop entries up to `index`, which a local snapshot now covers."""
        if index <= self.snap_index:
            return
        if index > self.applied:
            raise ValueError(f"cannot compact to {index} beyond applied {self.applied}")
        self.snap_term = self.term(index)
        self.snap_index = index
        if index >= self.mem_first:
            del self._entries[:index + 1 - self.mem_first]
            self.mem_first = index + 1

    def trim(self, upto: int, max_bytes: int | None = None) -> None:
        """Forget in memory the entries up to `upto` that are durable and applied (reader
        only), and older ones beyond the newest `max_bytes` of data among those. The last
        entry always stays, so `last_term` needs no read."""
        if self._reader is None:
            return
        limit = min(self.stable, self.applied, self.last_index - 1)
        upto = min(upto, limit)
        ents = self._entries
        # large entries (e.g. 64 KiB messages): the count alone would keep too many bytes;
        # checked from the newest entry's size so small ones never pay for the walk
        if max_bytes is not None and ents and len(ents[-1].data) * (limit - upto) > max_bytes:
            base = self.mem_first
            size = 0
            i = limit
            while i > upto and i >= base:
                size += len(ents[i - base].data)
                if size > max_bytes:
                    upto = i
                    break
                i -= 1
        if upto >= self.mem_first:
            del self._entries[:upto + 1 - self.mem_first]
            self.mem_first = upto + 1

    def held_entries(self) -> int:
        return len(self._entries)

    def read_range(self, lo: int, hi: int, chunk: int = 4096):
        """Iterate entries lo..hi-1 in chunks (used once at start-up)."""
        while lo < hi:
            step = min(hi, lo + chunk)
            yield from self.slice(lo, step)
            lo = step
