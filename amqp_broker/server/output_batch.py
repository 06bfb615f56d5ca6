"""`OutputBatch`: connections woken during a synchronous batch of work are written at its end,
from the task that ran it, instead of each waking its writer task.

The node's Raft driver runs a quorum queue's effects (deliveries, confirms) inside one
(`install_quorum` sets it as the driver's `effects_batch`), and a session's reader handles what
it read inside one (its replies; a classic queue's deliveries to other connections). At a low
message rate each message woke two writer tasks (the consumer's delivery, the publisher's
confirm): two task steps and one more pass of trio's run loop per message. A session whose
writer is busy, whose kernel buffer is full or that runs on TLS is left to its writer
(`Session.flush_now`). Outside a batch, `Session.wake` wakes the writer as before.
"""

from __future__ import annotations

from typing import Any, Callable

__all__ = ["OutputBatch"]


class OutputBatch:
    """A re-entrant `with` block; sessions `defer` to it while `active`."""

    __slots__ = ("active", "_sessions", "_at_end")

    def __init__(self) -> None:
        self.active = 0                       # depth of the `with` blocks open now
        self._sessions: dict[Any, None] = {}  # woken in this batch, in order
        self._at_end: dict[Callable[[], None], None] = {}

    def defer(self, session: Any) -> None:
        self._sessions[session] = None

    def at_end(self, fn: Callable[[], None]) -> bool:
        """Call `fn()` at the end of the batch open now, after its output is written (True);
        False, and no call, when no batch is open. The journal's write of a publish: the
        delivery goes out before the fsync, the confirm right after it, from this task."""
        if not self.active:
            return False
        self._at_end[fn] = None
        return True

    def __enter__(self) -> "OutputBatch":
        self.active += 1
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            if self.active == 1:
                # still open while the functions run: what they wake goes out in the next round
                while self._sessions or self._at_end:
                    sessions, self._sessions = self._sessions, {}
                    for session in sessions:
                        session.flush_now()
                    if self._at_end:
                        fns, self._at_end = self._at_end, {}
                        for fn in fns:
                            fn()
        finally:
            self.active -= 1
