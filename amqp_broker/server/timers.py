"""One deadline heap for every queue timer of the node (message TTL heads, x-expires).

`QueueRuntime.run` schedules its queue's next deadline here; `run_timers` (a task started by
`node.run_node`) sleeps until the earliest deadline, calls `on_timer(now_ms)` on the target and then
`broker.run_pending()` so expiries dispatch and dead-letter at once. Stale entries (the target
re-armed to another deadline since) are skipped, so rescheduling never needs a heap delete.
"""

from __future__ import annotations

import heapq
import itertools
from typing import TYPE_CHECKING, Any

import trio

if TYPE_CHECKING:
    from .broker import Broker

__all__ = ["DeadlineHeap"]


class DeadlineHeap:
    def __init__(self) -> None:
        self._heap: list[tuple[int, int, Any]] = []
        self._seq = itertools.count()
        self._changed = trio.Event()

    def schedule(self, deadline_ms: int, target: Any) -> None:
        """Call `target.on_timer(now)` at `deadline_ms` if `target.timer_deadline` still equals it."""
        earliest = self._heap[0][0] if self._heap else None
        heapq.heappush(self._heap, (deadline_ms, next(self._seq), target))
        if earliest is None or deadline_ms < earliest:
            self._changed.set()

    def __len__(self) -> int:
        return len(self._heap)

    async def run(self, broker: "Broker") -> None:
        """Forever: wait for the earliest deadline (or a new earlier one) and fire what is due."""
        while True:
            self._changed = trio.Event()
            if not self._heap:
                await self._changed.wait()
                continue
            delay = (self._heap[0][0] - broker.clock_ms()) / 1000.0
            if delay > 0:
                with trio.move_on_after(delay):
                    await self._changed.wait()
                    continue
            now = broker.update_clock()
            fired = False
            while self._heap and self._heap[0][0] <= now:
                deadline, _, target = heapq.heappop(self._heap)
                if getattr(target, "timer_deadline", None) == deadline:
                    target.on_timer(now)
                    fired = True
            if fired:
                broker.run_pending()
