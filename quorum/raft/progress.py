"""What a leader knows about each follower's log (etcd's tracker.Progress).

States: PROBE (one append in flight until answered, used after a rejection or a new term),
REPLICATE (optimistic: `next` advances as appends are sent, up to `max_inflight` unacknowledged
messages), SNAPSHOT (an InstallSnapshot is on its way; appends wait). Used by `RaftNode`.
"""

from __future__ import annotations

from collections import deque
from enum import Enum

__all__ = ["Progress", "ProgressState"]


class ProgressState(Enum):
    PROBE = "probe"
    REPLICATE = "replicate"
    SNAPSHOT = "snapshot"


class Progress:
    __slots__ = ("match", "next", "state", "paused", "inflights", "pending_snapshot",
                 "recent_active", "snapshot_wait", "catch_up_target", "catch_up_ticks",
                 "caught_up")

    def __init__(self, next_index: int) -> None:
        self.match = 0  # highest index known to be in the follower's log
        self.next = next_index  # next index to send
        self.state = ProgressState.PROBE
        self.paused = False  # PROBE only: an append is in flight
        self.inflights: deque[int] = deque()  # REPLICATE only: last index of each unacked append
        self.pending_snapshot = 0  # SNAPSHOT only: index of the snapshot sent
        self.recent_active = True  # heard from since the last check-quorum round
        self.snapshot_wait = 0  # heartbeat answers seen while waiting for the snapshot ack
        # a learner: the index its current round of catching up must reach (0: no round yet),
        # the leader's ticks since the round began, and whether the last round took no more
        # than an election timeout (Raft thesis 4.2.1)
        self.catch_up_target = 0
        self.catch_up_ticks = 0
        self.caught_up = False

    def __repr__(self) -> str:
        return (f"Progress(match={self.match}, next={self.next}, {self.state.value},"
                f" inflight={len(self.inflights)})")

    def become_probe(self) -> None:
        if self.state is ProgressState.SNAPSHOT:
            self.next = max(self.match + 1, self.pending_snapshot + 1)
        else:
            self.next = self.match + 1
        self.state = ProgressState.PROBE
        self.paused = False
        self.inflights.clear()
        self.pending_snapshot = 0

    def become_replicate(self) -> None:
        self.state = ProgressState.REPLICATE
        self.next = self.match + 1
        self.paused = False
        self.inflights.clear()

    def become_snapshot(self, index: int) -> None:
        self.state = ProgressState.SNAPSHOT
        self.pending_snapshot = index
        self.snapshot_wait = 0
        self.inflights.clear()

    def update(self, index: int) -> bool:
        """The follower has everything up to `index`; True if that is news."""
        if index > self.match:
            self.match = index
            if self.next <= index:
                self.next = index + 1
            self.paused = False
            return True
        return False

    def free_to(self, index: int) -> None:
        q = self.inflights
        while q and q[0] <= index:
            q.popleft()

    def is_paused(self, max_inflight: int) -> bool:
        if self.state is ProgressState.PROBE:
            return self.paused
        if self.state is ProgressState.REPLICATE:
            return len(self.inflights) >= max_inflight
        return True
