"""The checker of the cluster tests: from a `History` to what was lost, unexpected, duplicated.

Pure (no broker, no clock). Called by `test_jepsen.py` and `test_failover.py` once the queue is
drained, and unit-tested on hand-made histories by `test_checker.py`.

- lost: confirmed (``ack``) and never consumed. The broker broke its promise.
- unexpected: consumed but never published (no attempt with that id), or published and
  ``returned`` (the broker said it did not take it). Either means something invented a message.
- duplicates: ids delivered more than once. At-least-once allows them; each delivery after the
  first ought to carry redelivered=true (the broker knew it had handed the message out), and
  the report counts the ones that do not (a message enqueued twice, or delivery state lost).
- consumed means a delivery whose ack went out without error; an id delivered only with failed
  acks is not consumed (the broker must deliver it again).
Unconfirmed outcomes (``nack``, ``unknown``, still open) may go either way and are only counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

from .history import Delivery

__all__ = ["Report", "check", "Violation"]


class Violation(AssertionError):
    """The property under test does not hold (as opposed to a test whose set-up failed).
    Tests of known broker bugs are marked xfail(strict=True, raises=Violation), so a broken
    set-up still fails them."""


@dataclass
class Report:
    attempted: int = 0
    confirmed: int = 0
    nacked: int = 0
    returned: int = 0
    unknown: int = 0           # no answer, or still open when the test ended
    deliveries: int = 0
    consumed: int = 0          # distinct ids with an acked delivery
    lost: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    duplicated: int = 0        # distinct ids delivered more than once
    duplicate_deliveries: int = 0              # deliveries after an id's first
    duplicates_redelivered: int = 0            # ... of which carried redelivered=true
    duplicates_not_redelivered: list[str] = field(default_factory=list)  # ids, once each
    first_redelivered: int = 0  # first deliveries already marked redelivered (an unseen try)
    unknown_consumed: int = 0
    nacked_consumed: int = 0

    @property
    def ok(self) -> bool:
        return not self.lost and not self.unexpected

    def summary(self) -> str:
        lines = [
            f"attempted {self.attempted}: confirmed {self.confirmed}, nacked {self.nacked}, "
            f"returned {self.returned}, unknown {self.unknown}",
            f"deliveries {self.deliveries}, consumed {self.consumed} distinct "
            f"(unknown ones consumed {self.unknown_consumed}, nacked ones consumed "
            f"{self.nacked_consumed})",
            f"lost {len(self.lost)}{_sample(self.lost)}",
            f"unexpected {len(self.unexpected)}{_sample(self.unexpected)}",
            f"duplicates: {self.duplicated} ids, {self.duplicate_deliveries} extra deliveries, "
            f"{self.duplicates_redelivered} with redelivered=true, "
            f"{len(self.duplicates_not_redelivered)} ids with a repeat marked "
            f"redelivered=false{_sample(self.duplicates_not_redelivered)}",
            f"first deliveries already marked redelivered: {self.first_redelivered}",
        ]
        return "\n".join(lines)


def _sample(ids: list[str], n: int = 10) -> str:
    if not ids:
        return ""
    more = f" ... (+{len(ids) - n})" if len(ids) > n else ""
    return ": " + ", ".join(ids[:n]) + more


def check(published: Mapping[str, str | None], deliveries: Iterable[Delivery]) -> Report:
    """`published`: id -> outcome (None: no outcome yet); `deliveries` in the order seen."""
    r = Report(attempted=len(published))
    for outcome in published.values():
        if outcome == "ack":
            r.confirmed += 1
        elif outcome == "nack":
            r.nacked += 1
        elif outcome == "returned":
            r.returned += 1
        else:
            r.unknown += 1
    seen: dict[str, int] = {}
    consumed: set[str] = set()
    not_redelivered: dict[str, None] = {}  # ordered set
    for d in deliveries:
        r.deliveries += 1
        n = seen.get(d.id, 0)
        seen[d.id] = n + 1
        if n == 0:
            r.first_redelivered += d.redelivered
        else:
            r.duplicate_deliveries += 1
            if d.redelivered:
                r.duplicates_redelivered += 1
            else:
                not_redelivered[d.id] = None
        if d.acked:
            consumed.add(d.id)
    r.consumed = len(consumed)
    r.duplicated = sum(1 for n in seen.values() if n > 1)
    r.duplicates_not_redelivered = list(not_redelivered)
    r.lost = sorted(i for i, o in published.items() if o == "ack" and i not in consumed)
    r.unexpected = sorted(i for i in seen
                          if i not in published or published[i] == "returned")
    r.unknown_consumed = sum(1 for i in consumed if i in published
                             and published[i] in (None, "unknown"))
    r.nacked_consumed = sum(1 for i in consumed if published.get(i) == "nack")
    return r
