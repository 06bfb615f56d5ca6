"""x-death and x-first/last-death-* headers for a message being dead-lettered (pure).

Called by the broker's `amqp_broker.server.deadletter.prepare_copy` (for at-most-once and
at-least-once dead letters of every queue type) when a message is rejected without requeue,
expires, is dropped by a length limit, or exceeds the delivery limit. Input: the message's
headers and a few facts about the death; output: the new headers and the exchange/routing keys
to republish with.
Time is passed in (seconds since the epoch); nothing here reads a clock.

Rules (seed 002, RabbitMQ 4.2 ``mc:record_death`` / ``mc_amqpl``):

- ``x-death`` is an array with one table per (queue, reason): ``count``, ``reason``,
  ``queue``, ``time`` (AMQP timestamp), ``exchange``, ``routing-keys`` (the publish key plus
  CC keys, never BCC) and ``original-expiration`` when the message carried a per-message TTL.
  Newest first. If an entry for (queue, reason) exists, its ``count`` goes up by one and it
  moves to the front; its other fields (first time, exchange, keys) are kept.
- ``x-first-death-reason/queue/exchange`` are set once; ``x-last-death-*`` (3.13+) are
  overwritten every time (``last_death_headers=False`` for the 3.10 profile).
- With a dead-letter routing key the message is routed with that single key and the ``CC``
  header is removed; otherwise it is routed with all its original keys (publish key, CC and
  BCC). The ``BCC`` header is always removed.
- The ``expiration`` property must be cleared by the caller (so the message does not expire
  again in the target queue); its old value is recorded as ``original-expiration``.

Header values are plain Python values pamqp encodes: str, ``Long`` counts, aware UTC
``datetime`` timestamps, lists and dicts.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

# core is a bottom layer like this one: Long makes counts encode as AMQP longs ('l')
from amqp_broker.core.fieldtypes import Long

__all__ = ["REASONS", "DeadLettered", "dead_letter", "x_death_entries"]

REASONS = ("rejected", "expired", "maxlen", "delivery_limit")

_FIRST = ("x-first-death-reason", "x-first-death-queue", "x-first-death-exchange")
_LAST = ("x-last-death-reason", "x-last-death-queue", "x-last-death-exchange")


@dataclass(frozen=True, slots=True)
class DeadLettered:
    """What to republish: new headers, the DLX, and the keys to route with on it."""

    headers: dict[str, Any]
    exchange: str
    routing_keys: list[str]


def _keys(value: Any) -> list[str]:
    if isinstance(value, (list, tuple)):
        return [k for k in value if isinstance(k, str)]
    return []


def x_death_entries(headers: Mapping[str, Any] | None) -> list[Any]:
    """The x-death array of ``headers`` (``[]`` if absent or not an array)."""
    if not headers:
        return []
    v = headers.get("x-death")
    return list(v) if isinstance(v, (list, tuple)) else []


def _timestamp(seconds: float) -> datetime.datetime:
    # AMQP timestamps are whole seconds.
    return datetime.datetime.fromtimestamp(int(seconds), tz=datetime.timezone.utc)


def _new_entry(
    reason: str, queue: str, exchange: str, keys: list[str], time: float, expiration: str | None
) -> dict[str, Any]:
    entry: dict[str, Any] = {}
    if expiration is not None:
        entry["original-expiration"] = expiration
    entry.update(
        {
            "count": Long(1),
            "reason": reason,
            "queue": queue,
            "time": _timestamp(time),
            "exchange": exchange,
            "routing-keys": list(keys),
        }
    )
    return entry


def _bump(entry: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(entry)
    count = entry.get("count")
    ok = isinstance(count, int) and not isinstance(count, bool) and count >= 1
    out["count"] = Long(count + 1 if ok else 1)
    return out


def dead_letter(
    headers: Mapping[str, Any] | None,
    *,
    reason: str,
    queue: str,
    exchange: str,
    routing_key: str,
    time: float,
    dlx: str,
    dlx_routing_key: str | None = None,
    expiration: str | None = None,
    bcc: Sequence[str] = (),
    last_death_headers: bool = True,
) -> DeadLettered:
    """Headers and routing for a message dead-lettered from ``queue`` for ``reason``.

    ``exchange`` and ``routing_key`` are those the message was last published with (for a
    message dead-lettered before, the previous DLX and key). CC keys are read from the CC
    header; BCC keys from the BCC header if still present, plus ``bcc`` for a server that
    stripped the header at publish time. ``expiration`` is the message's expiration property.
    ``headers`` is not modified.
    """
    if reason not in REASONS:
        raise ValueError(f"unknown dead-letter reason {reason!r}; expected one of {REASONS}")
    old = dict(headers) if headers else {}
    cc = _keys(old.get("CC"))
    bcc_keys = _keys(old.pop("BCC", None)) + [k for k in bcc if isinstance(k, str)]

    deaths = x_death_entries(old)
    for i, d in enumerate(deaths):
        if isinstance(d, Mapping) and d.get("queue") == queue and d.get("reason") == reason:
            deaths = [_bump(d)] + deaths[:i] + deaths[i + 1 :]
            break
    else:
        entry = _new_entry(reason, queue, exchange, [routing_key, *cc], time, expiration)
        deaths = [entry] + deaths
    old["x-death"] = deaths

    for key, value in zip(_FIRST, (reason, queue, exchange)):
        old.setdefault(key, value)
    if last_death_headers:
        for key, value in zip(_LAST, (reason, queue, exchange)):
            old[key] = value

    if dlx_routing_key is not None:
        old.pop("CC", None)
        keys = [dlx_routing_key]
    else:
        keys = [routing_key, *cc, *bcc_keys]
    return DeadLettered(old, dlx, keys)
