"""Safety checks for the Raft simulator, fed by `cluster.SimCluster` as things happen.

- election safety: at most one leader per term;
- log matching: an (index, term) names one entry everywhere, with one predecessor term, so two
  logs that agree on an entry agree on everything before it;
- state-machine safety: every replica applies the same entry at each index (checked through a
  digest chain over all applied entries, which also covers snapshot restores);
- leader completeness: a new leader's log holds every entry known to be committed;
- monotonic commit: a running node's commit index never goes back.
"""

from __future__ import annotations

import hashlib

from quorum.raft import Entry


class SafetyViolation(AssertionError):
    pass


def chain(digest: bytes, e: Entry) -> bytes:
    h = hashlib.blake2b(digest, digest_size=16)
    h.update(b"%d:%d:%d:" % (e.index, e.term, e.kind))
    h.update(e.data)
    return h.digest()


class SafetyChecker:
    def __init__(self) -> None:
        self.leaders: dict[int, str] = {}  # term -> leader
        self.entries: dict[tuple[int, int], tuple[int, int, bytes]] = {}  # (i, t) -> prev_t, kind, data
        self.committed: dict[int, tuple[int, bytes]] = {}  # index -> (term, digest after it)
        self.max_committed = 0

    def on_leader(self, node_id: str, term: int) -> None:
        other = self.leaders.setdefault(term, node_id)
        if other != node_id:
            raise SafetyViolation(f"election safety: {other} and {node_id} both lead term {term}")

    def on_entry(self, node_id: str, e: Entry, prev_term: int | None) -> None:
        key = (e.index, e.term)
        seen = self.entries.get(key)
        mine = (prev_term, int(e.kind), e.data)
        if seen is None:
            self.entries[key] = mine
        elif seen != mine:
            raise SafetyViolation(f"log matching: {node_id} has entry {key} = {mine[:2]},"
                                  f" elsewhere {seen[:2]} (prev term, kind) or different data")

    def on_apply(self, node_id: str, e: Entry, digest: bytes) -> None:
        seen = self.committed.get(e.index)
        if seen is None:
            self.committed[e.index] = (e.term, digest)
            self.max_committed = max(self.max_committed, e.index)
        elif seen != (e.term, digest):
            raise SafetyViolation(f"state machine safety: {node_id} applied index {e.index} term"
                                  f" {e.term} differently from another replica (term {seen[0]})")

    def on_restore(self, node_id: str, index: int, digest: bytes) -> None:
        seen = self.committed.get(index)
        if seen is not None and seen[1] != digest:
            raise SafetyViolation(f"{node_id} restored a snapshot at {index} that differs")

    def check_leader_log(self, node_id: str, term: int, snap_index: int, log_term) -> None:
        """Leader completeness: every entry known committed is in the new leader's log."""
        for index in range(snap_index + 1, self.max_committed + 1):
            known = self.committed.get(index)
            if known is not None and log_term(index) != known[0]:
                raise SafetyViolation(
                    f"leader completeness: {node_id} leads term {term} without committed entry"
                    f" {index} (term {known[0]}; it has {log_term(index)})")

    def digest_at(self, index: int) -> bytes | None:
        seen = self.committed.get(index)
        return seen[1] if seen else None
