"""What the clients of a cluster test saw: every publish and its outcome, every delivery.

Written by the workload's publishers and consumers (`workload.py`, several threads and an
asyncio loop at once, hence the lock) and by hand in `test_checker.py`; read by `checker.py`.

A publish is attempted once per message id and ends in one outcome:
- ``ack``: the broker confirmed it (it must be consumed);
- ``nack``: the broker refused responsibility (it may or may not be consumed);
- ``returned``: unroutable, sent back by the broker (mandatory) -- it must not be consumed;
- ``unknown``: no answer (timeout, connection lost): it may or may not be consumed.
A delivery records the message id, the node the consumer was on, the redelivered flag, and
whether the ack was handed to the connection without error (a delivery whose ack failed does
not count as consumed: the broker must deliver it again).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

__all__ = ["History", "Delivery", "OUTCOMES"]

OUTCOMES = ("ack", "nack", "returned", "unknown")


@dataclass(frozen=True, slots=True)
class Delivery:
    id: str
    node: str
    redelivered: bool
    acked: bool
    at: float = 0.0


@dataclass
class History:
    published: dict[str, str | None] = field(default_factory=dict)  # id -> outcome (None: open)
    deliveries: list[Delivery] = field(default_factory=list)
    events: list[tuple[float, str]] = field(default_factory=list)  # reconnects, nemesis steps
    started: float = field(default_factory=time.monotonic)
    last_delivery: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def attempt(self, msg_id: str) -> None:
        with self._lock:
            if msg_id in self.published:
                raise ValueError(f"message id {msg_id} published twice")
            self.published[msg_id] = None

    def outcome(self, msg_id: str, outcome: str) -> None:
        if outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {outcome!r}")
        with self._lock:
            self.published[msg_id] = outcome

    def delivered(self, msg_id: str, node: str, redelivered: bool, acked: bool) -> None:
        now = time.monotonic()
        with self._lock:
            self.deliveries.append(Delivery(msg_id, node, redelivered, acked, now - self.started))
            self.last_delivery = now

    def note(self, text: str) -> None:
        with self._lock:
            self.events.append((time.monotonic() - self.started, text))

    def count(self, outcome: str | None) -> int:
        with self._lock:
            return sum(1 for o in self.published.values() if o == outcome)

    def snapshot(self) -> tuple[dict[str, str | None], list[Delivery]]:
        """A consistent copy for the checker (clients may still be running)."""
        with self._lock:
            return dict(self.published), list(self.deliveries)
