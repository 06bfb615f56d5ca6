"""Publisher confirms that wait for the message journal's fsync (group commit).

A durable classic queue's `JournalTap.confirm_when_durable` calls `wait(journal_seq, tracker, seq)`
for a persistent message it accepted with a confirm. `run` (a task started by `node.run_node`) waits until the journal reports every
record up to the newest waited-for sequence number durable, then settles all the confirms that
are covered at once. Waiters arrive in journal order, so a deque is enough.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import TYPE_CHECKING, Any

import trio

if TYPE_CHECKING:
    from .broker import Broker

__all__ = ["Durability"]

_log = logging.getLogger(__name__)


class Durability:
    def __init__(self, journal: Any) -> None:
        self._journal = journal
        self._waiters: deque = deque()  # (journal_seq, tracker, confirm seq), ascending
        self._added = trio.Event()

    def wait(self, journal_seq: int, tracker, seq: int) -> None:
        self._waiters.append((journal_seq, tracker, seq))
        self._added.set()

    def pending(self) -> int:
        return len(self._waiters)

    async def run(self, broker: "Broker") -> None:
        waiters = self._waiters
        while True:
            if not waiters:
                self._added = trio.Event()
                await self._added.wait()
                continue
            target = waiters[-1][0]
            await self._journal.wait_durable(target)
            while waiters and waiters[0][0] <= target:
                _, tracker, seq = waiters.popleft()
                tracker.settle(seq, True)
            broker.run_pending()
