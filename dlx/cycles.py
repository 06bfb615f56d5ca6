"""Dead-letter cycle detection (pure): may a dead-lettered message enter a target queue?

Called by the broker's ``amqp_broker.server.deadletter.find_targets`` (at-most-once and the
at-least-once worker's port alike), after routing a dead-lettered message on the DLX and
*after* ``deaths.dead_letter`` has recorded the current death in its ``x-death`` header.

The rule (seed 002): messages can loop, e.g. a queue that dead-letters to the default
exchange without a dead-letter routing key sends them back to itself. A message that would
reach a queue it has already been dead-lettered from (its ``x-death`` names that queue) is
dropped for that queue if the loop was "fully automatic": no death in it was a ``rejected``.
A consumer rejecting the message means a human-driven loop, which is allowed to continue.

Two readings of "the loop", as RabbitMQ versions differ:

- ``whole_history=True`` (RabbitMQ 3.13+/4.x ``mc:is_death_cycle``): the target queue
  appears anywhere in ``x-death`` and *no* entry at all has reason ``rejected``.
- ``whole_history=False`` (3.x ``rabbit_dead_letter:is_cycle``): only the entries from the
  newest one up to and including the first entry for the target queue are looked at; an
  entry that is not a table counts as client-made, so not automatic.

Either way, if the current death is a rejection the message is never dropped.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

__all__ = ["is_death_cycle", "split_cycles"]


def _is_rejected(entry: Any) -> bool:
    return not isinstance(entry, Mapping) or entry.get("reason") == "rejected"


def is_death_cycle(
    target_queue: str,
    x_death: Sequence[Any],
    *,
    reason: str | None = None,
    whole_history: bool = True,
) -> bool:
    """True if delivering to ``target_queue`` would close a fully automatic loop (drop it).

    ``x_death`` is the array *including* the current death (newest first); ``reason`` is the
    current death's reason when known (a rejection never cycles).
    """
    if reason == "rejected":
        return False
    if whole_history:
        seen = any(isinstance(d, Mapping) and d.get("queue") == target_queue for d in x_death)
        return seen and not any(_is_rejected(d) for d in x_death)
    for i, d in enumerate(x_death):
        if isinstance(d, Mapping) and d.get("queue") == target_queue:
            return not any(_is_rejected(e) for e in x_death[: i + 1])
    return False


def split_cycles(
    target_queues: Iterable[str],
    x_death: Sequence[Any],
    *,
    reason: str | None = None,
    whole_history: bool = True,
) -> tuple[list[str], list[str]]:
    """Split routed queues into (deliver to, dropped because of a cycle), order kept."""
    deliver: list[str] = []
    dropped: list[str] = []
    for q in target_queues:
        if is_death_cycle(q, x_death, reason=reason, whole_history=whole_history):
            dropped.append(q)
        else:
            deliver.append(q)
    return deliver, dropped
