"""The in-memory Raft log of one node: entries since the last snapshot, plus the marks that say
how much of it is durable, committed and applied. Used only by `RaftNode`.

Invariants: `snap_index <= applied <= commit <= last_index`, `snap_index <= stable <= last_index`.
Entry `i` lives at `_entries[i - snap_index - 1]`. Entries after `stable` are not yet durable
and are handed to the driver in `Ready.entries`.
"""

from __future__ import annotations

from .messages import Entry, Snapshot

__all__ = ["RaftLog"]


class RaftLog:
    __slots__ = ("snap_index", "snap_term", "_entries", "stable", "commit", "applied",
                 "unstable_snapshot")

    def __init__(self, snapshot: Snapshot | None, entries: list[Entry]) -> None:
        self.snap_index = snapshot.meta.index if snapshot else 0
        self.snap_term = snapshot.meta.term if snapshot else 0
        # entries the caller persisted may overlap the snapshot: keep only those after it
        self._entries = [e for e in entries if e.index > self.snap_index]
        for pos, e in enumerate(self._entries):
            if e.index != self.snap_index + 1 + pos:
                raise ValueError(f"persisted entries have a gap at index {e.index}")
        self.stable = self.last_index
        self.commit = self.snap_index
        self.applied = self.snap_index
        self.unstable_snapshot: Snapshot | None = None

    # ---- reading -------------------------------------------------------------------------

    @property
    def last_index(self) -> int:
        return self.snap_index + len(self._entries)

    @property
    def last_term(self) -> int:
        return self._entries[-1].term if self._entries else self.snap_term

    def term(self, index: int) -> int | None:
        """Term of entry `index`, or None when it is compacted away or beyond the end."""
        if index == self.snap_index:
            return self.snap_term
        if self.snap_index < index <= self.snap_index + len(self._entries):
            return self._entries[index - self.snap_index - 1].term
        return None

    def entry(self, index: int) -> Entry:
        return self._entries[index - self.snap_index - 1]

    def slice(self, lo: int, hi: int, max_bytes: int | None = None) -> list[Entry]:
        """Entries lo..hi-1 (lo > snap_index), stopping early once `max_bytes` of data is
        reached; at least one entry is returned when lo < hi."""
        base = self.snap_index + 1
        out = self._entries[lo - base:hi - base]
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
            t = self.entry(index).term
            if t == term:
                return index
            if t < term:
                return None
            index -= 1
        return None

    def unstable_entries(self) -> list[Entry]:
        return self._entries[self.stable - self.snap_index:]

    # ---- writing -------------------------------------------------------------------------

    def append(self, entries: list[Entry]) -> None:
        """Append, first dropping our entries from entries[0].index on (conflict repair)."""
        first = entries[0].index
        if not self.snap_index < first <= self.last_index + 1:
            raise ValueError(f"append at {first} outside ({self.snap_index}, {self.last_index + 1}]")
        if first <= self.commit:
            raise AssertionError(f"truncating committed entry {first} (commit {self.commit})")
        del self._entries[first - self.snap_index - 1:]
        self._entries.extend(entries)
        if self.stable >= first:
            self.stable = first - 1

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

    def commit_to(self, index: int) -> bool:
        if index > self.commit:
            self.commit = index
            return True
        return False

    def restore(self, snapshot: Snapshot) -> None:
        """Replace the whole log by a snapshot received from the leader."""
        self.snap_index = snapshot.meta.index
        self.snap_term = snapshot.meta.term
        self._entries = []
        self.stable = self.commit = self.applied = self.snap_index
        self.unstable_snapshot = snapshot

    def compact(self, index: int) -> None:
        """Drop entries up to `index`, which a local snapshot now covers."""
        if index <= self.snap_index:
            return
        if index > self.applied:
            raise ValueError(f"cannot compact to {index} beyond applied {self.applied}")
        self.snap_term = self.term(index)
        self._entries = self._entries[index - self.snap_index:]
        self.snap_index = index
