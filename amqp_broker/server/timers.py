"""One deadline heap for every queue timer of the node (message TTL heads, x-expires).

`QueueRuntime.run` schedules its queue's next deadline here; `run_timers` (a task started by
`node.run_node`) sleeps until the earliest deadline, calls `on_timer(now_ms)` on the target and then
`broker.run_pending()` so expiries dispatch and dead-letter at once. Stale entries (the target
re-armed to another deadline since) are skipped, so rescheduling never needs a heap delete.

The task sleeps in a cancel scope whose deadline `schedule` and `forget` move: that wakes
nobody. At a low message rate a quorum queue arms a 5 ms timer for held-back acks at every
ack and drops it at the next publish; waking the task to re-arm, and again when the dropped
deadline passed, was two passes of the run loop per message.
"""

from __future__ import annotations

import heapq
import itertools
import math
from typing import TYPE_CHECKING, Any

import trio

if TYPE_CHECKING:
    from .broker import Broker

__all__ = ["DeadlineHeap"]


class DeadlineHeap:
    def __init__(self) -> None:
        self._heap: list[tuple[int, int, Any]] = []
        self._seq = itertools.count()
        self._sleep: trio.CancelScope | None = None   # the run task's, while it sleeps
        self._clock_ms = None

    def schedule(self, deadline_ms: int, target: Any) -> None:
        """Call `target.on_timer(now)` at `deadline_ms` if `target.timer_deadline` still equals it."""
        self._drop_stale()
        heapq.heappush(self._heap, (deadline_ms, next(self._seq), target))
        self._retime()

    def forget(self) -> None:
        """A target cleared its deadline: stop waiting for it if it was the earliest."""
        if self._heap and self._drop_stale():
            self._retime()

    def __len__(self) -> int:
        return len(self._heap)

    def _drop_stale(self) -> bool:
        heap = self._heap
        dropped = False
        while heap and getattr(heap[0][2], "timer_deadline", None) != heap[0][0]:
            heapq.heappop(heap)
            dropped = True
        return dropped

    def _retime(self) -> None:
        scope = self._sleep
        if scope is None:  # firing, or not started: the run loop times itself next
            return
        if not self._heap:
            scope.deadline = math.inf
            return
        delay_ms = self._heap[0][0] - self._clock_ms()
        scope.deadline = trio.current_time() + max(0, delay_ms) / 1000.0

    async def run(self, broker: "Broker") -> None:
        """Forever: sleep until the earliest deadline and fire what is due."""
        self._clock_ms = broker.clock_ms
        while True:
            with trio.CancelScope() as self._sleep:
                self._drop_stale()
                self._retime()
                await trio.sleep_forever()
            self._sleep = None
            now = broker.update_clock()
            fired = False
            while self._heap and self._heap[0][0] <= now:
                deadline, _, target = heapq.heappop(self._heap)
                if getattr(target, "timer_deadline", None) == deadline:
                    target.on_timer(now)
                    fired = True
            if fired:
                broker.run_pending()
