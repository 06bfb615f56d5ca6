"""Simulated network for the Raft simulator: per-message delay (which also reorders), loss,
duplication, and link cuts (partitions, possibly one-way). Used by `cluster.SimCluster`.
All randomness comes from the rng passed in; time is the simulator's clock in ms."""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass

from quorum.raft import Message, decode_message, encode_message


@dataclass(frozen=True)
class NetProfile:
    min_delay_ms: int = 1
    max_delay_ms: int = 15
    loss: float = 0.0
    duplicate: float = 0.0


class SimNetwork:
    def __init__(self, rng: random.Random, profile: NetProfile) -> None:
        self._rng = rng
        self.profile = profile
        self._queue: list[tuple[int, int, Message]] = []  # (deliver_at, seq, msg)
        self._seq = 0
        self._cut: dict[tuple[str, str], bool] = {}  # (from, to) -> True when the link is down
        self.sent = 0
        self.dropped = 0

    def send(self, now: int, m: Message) -> None:
        self.sent += 1
        p = self.profile
        if self.is_cut(m.frm, m.to) or self._rng.random() < p.loss:
            self.dropped += 1
            return
        m = decode_message(encode_message(m))  # every message crosses the real wire codec
        copies = 2 if self._rng.random() < p.duplicate else 1
        for _ in range(copies):
            at = now + self._rng.randint(p.min_delay_ms, p.max_delay_ms)
            self._seq += 1
            heapq.heappush(self._queue, (at, self._seq, m))

    def next_time(self) -> int | None:
        return self._queue[0][0] if self._queue else None

    def pop_due(self, now: int) -> Message | None:
        """The next message due at `now`, or None. Messages on a link cut meanwhile vanish."""
        while self._queue and self._queue[0][0] <= now:
            _, _, m = heapq.heappop(self._queue)
            if self.is_cut(m.frm, m.to):
                self.dropped += 1
                continue
            return m
        return None

    def is_cut(self, a: str, b: str) -> bool:
        return self._cut.get((a, b), False)

    def cut(self, a: str, b: str) -> None:
        self._cut[(a, b)] = True

    def partition(self, groups: list[list[str]]) -> None:
        """Cut every link between different groups (both directions)."""
        for i, g in enumerate(groups):
            for h in groups[i + 1:]:
                for a in g:
                    for b in h:
                        self._cut[(a, b)] = True
                        self._cut[(b, a)] = True

    def heal(self) -> None:
        self._cut.clear()

    def describe_cuts(self) -> str:
        return ",".join(f"{a}->{b}" for (a, b) in sorted(self._cut)) or "none"
