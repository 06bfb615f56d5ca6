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
    sent: dict[str, tuple[str, float, float]] = field(default_factory=dict)  # id -> (node,
    #   seconds into the test when attempted, when its outcome came): to explain a lost id
    deliveries: list[Delivery] = field(default_factory=list)
    events: list[tuple[float, str]] = field(default_factory=list)  # reconnects, nemesis steps
    started: float = field(default_factory=time.monotonic)
    last_delivery: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def attempt(self, msg_id: str, node: str = "") -> None:
        with self._lock:
            if msg_id in self.published:
                raise ValueError(f"message id {msg_id} published twice")
            self.published[msg_id] = None
            self.sent[msg_id] = (node, time.monotonic() - self.started, 0.0)

    def outcome(self, msg_id: str, outcome: str) -> None:
        if outcome not in OUTCOMES:
            raise ValueError(f"unknown outcome {outcome!r}")
        with self._lock:
            self.published[msg_id] = outcome
            node, at, _ = self.sent.get(msg_id, ("", 0.0, 0.0))
            self.sent[msg_id] = (node, at, time.monotonic() - self.started)

    def explain(self, ids: list[str], limit: int = 20) -> str:
        """Where and when these ids were published, and what came of their deliveries."""
        with self._lock:
            lines = []
            for i in ids[:limit]:
                node, at, done = self.sent.get(i, ("?", 0.0, 0.0))
                seen = [f"{d.node}@{d.at:.2f}s{' redelivered' if d.redelivered else ''}"
                        f"{'' if d.acked else ' not acked'}"
                        for d in self.deliveries if d.id == i]
                lines.append(f"  {i}: published on {node} at {at:.2f}s, "
                             f"{self.published.get(i)} at {done:.2f}s; deliveries: "
                             f"{', '.join(seen) or 'none'}")
            return "\n".join(lines)

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
