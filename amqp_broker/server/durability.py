"""Publisher confirms that wait for the message journal's fsync (group commit).

A durable classic queue's `JournalTap.confirm_when_durable` calls `wait(journal_seq, tracker, seq)`
for a persistent message it accepted with a confirm. The journal calls back once the oldest
waiter's record is durable (from its flusher, or at the end of the reader's `OutputBatch`
that added the record) (`call_when_durable`: no task of its own, so no extra pass of
the run loop per batch); every confirm covered by then is settled at once, and the broker runs
what the settles made pending, inside the broker's `OutputBatch` (the confirms are written
from the flusher's task, not by waking each publisher's writer). Waiters arrive in journal
order, so a deque is enough.
"""

from __future__ import annotations

from collections import deque
from contextlib import nullcontext
from typing import Any, Callable, ContextManager

__all__ = ["Durability"]


class Durability:
    def __init__(self, journal: Any, after_settle: Callable[[], None],
                 batch: ContextManager[Any] | None = None) -> None:
        self._journal = journal
        self._after_settle = after_settle
        self._batch = batch if batch is not None else nullcontext()
        self._waiters: deque = deque()  # (journal_seq, tracker, confirm seq), ascending
        self._armed = False  # a journal callback is due for the oldest waiter

    def wait(self, journal_seq: int, tracker, seq: int) -> None:
        self._waiters.append((journal_seq, tracker, seq))
        if not self._armed:
            self._arm(journal_seq)

    def pending(self) -> int:
        return len(self._waiters)

    def _arm(self, journal_seq: int) -> None:
        self._armed = True
        self._journal.call_when_durable(journal_seq, self._settle)

    def _settle(self) -> None:
        """From the journal's flusher: settle every waiter whose record is durable now."""
        self._armed = False
        durable = self._journal.durable_seq
        waiters = self._waiters
        with self._batch:
            while waiters and waiters[0][0] <= durable:
                _, tracker, seq = waiters.popleft()
                tracker.settle(seq, True)
            if waiters:
                self._arm(waiters[0][0])
            self._after_settle()
