"""`Signal`: wake the tasks waiting now, and cost nothing when none is.

A `trio.Event` is set once; a loop that signals again and again needs a new one after each
set. Made at every signal, on a per-message path, that is an object and a set for nobody
most of the time (three a message in the classic journal and the session at 1000 msg/s).
A `Signal` makes its event only when a task waits, and drops it when it fires.
"""

from __future__ import annotations

import trio

__all__ = ["Signal"]


class Signal:
    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event: trio.Event | None = None

    async def wait(self) -> None:
        """Until the next `fire()`."""
        if self._event is None:
            self._event = trio.Event()
        await self._event.wait()

    def fire(self) -> None:
        """Wake every task waiting now (none: nothing to do)."""
        event, self._event = self._event, None
        if event is not None:
            event.set()
