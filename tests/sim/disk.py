"""Simulated disk of one node for the Raft simulator: what a Ready asks to persist is first
staged (written, not synced), and only becomes durable at sync. A crash drops everything
staged. `persisted()` is what a restarting node is built from. Used by `cluster.SimNode`."""

from __future__ import annotations

from quorum.raft import Entry, HardState, Persisted, Ready, Snapshot


class SimDisk:
    def __init__(self) -> None:
        self.hard_state = HardState()
        self.snapshot: Snapshot | None = None
        self.entries: list[Entry] = []  # durable entries after the snapshot, no gaps
        self._staged: list[Ready] = []

    def stage(self, rd: Ready) -> None:
        self._staged.append(rd)

    def sync(self) -> None:
        for rd in self._staged:
            if rd.snapshot is not None:
                self.install_snapshot(rd.snapshot, keep_tail=False)
            if rd.entries:
                self._append(rd.entries)
            if rd.hard_state is not None:
                self.hard_state = rd.hard_state
        self._staged.clear()

    def crash(self, rng=None) -> None:
        """Unsynced writes are lost, except that with an rng a random prefix of them (in write
        order: snapshot, entries, hard state of each Ready) may have reached the disk anyway."""
        staged, self._staged = self._staged, []
        if rng is None or not staged or rng.random() < 0.5:
            return
        full = rng.randint(0, len(staged) - 1)
        self._staged = staged[:full]
        self.sync()
        torn = staged[full]
        if torn.snapshot is not None:
            if rng.random() < 0.5:
                return
            self.install_snapshot(torn.snapshot, keep_tail=False)
        cut = rng.randint(0, len(torn.entries))
        if cut:
            self._append(torn.entries[:cut])
        if cut == len(torn.entries) and torn.hard_state is not None and rng.random() < 0.5:
            self.hard_state = torn.hard_state

    def install_snapshot(self, snap: Snapshot, keep_tail: bool) -> None:
        """Write a snapshot durably (atomically, by rename). A local compaction keeps the entries
        after it; a snapshot received from the leader replaces the whole log."""
        self.snapshot = snap
        idx = snap.meta.index
        self.entries = [e for e in self.entries if e.index > idx] if keep_tail else []

    def _append(self, entries: list[Entry]) -> None:
        first = entries[0].index
        base = self.snapshot.meta.index if self.snapshot else 0
        if self.entries:
            start = self.entries[0].index
            if first > self.entries[-1].index + 1:
                raise AssertionError(f"gap on disk: append {first} after {self.entries[-1].index}")
            del self.entries[max(0, first - start):]
        elif first != base + 1:
            raise AssertionError(f"gap on disk: append {first} after snapshot {base}")
        self.entries.extend(entries)

    def persisted(self, tail: int | None = None) -> Persisted:
        """What a restart reads; with `tail`, only the last `tail` entries (the node reads the
        rest through `entries` when it needs them)."""
        entries = self.entries if tail is None else self.entries[-tail:] if tail else []
        if tail is not None and not entries and self.entries:
            entries = self.entries[-1:]
        return Persisted(self.hard_state, self.snapshot, list(entries))

    def entries_between(self, lo: int, hi: int) -> list[Entry]:
        """The LogReader for a node built with a reader: durable entries lo..hi-1."""
        if not self.entries:
            raise AssertionError(f"reader asked for {lo}..{hi - 1} of an empty log")
        start = self.entries[0].index
        out = self.entries[lo - start:hi - start]
        if lo < start or len(out) != hi - lo:
            raise AssertionError(f"reader asked for {lo}..{hi - 1}, disk has {start}.."
                                 f"{self.entries[-1].index}")
        return out
