"""Node-wide message counters for the Prometheus endpoint and the management overview.

One `Counters` per `Broker` (`broker.counters`). The channel, consumer and dead-letter code
increment plain int attributes on the hot path (no locks: every task of a node runs on one trio
thread). `mgmt/metrics.py` reads it as a mapping (`key in counters`, `counters[key]`) with the
`_GLOBAL_COUNTERS` keys and `dead_lettered_<reason>`; `mgmt/admin.py` turns it into the
overview's message_stats.
"""

from __future__ import annotations

from typing import Iterator

__all__ = ["Counters"]

_FIELDS = (
    "messages_received", "messages_routed", "messages_unroutable_dropped",
    "messages_unroutable_returned", "messages_confirmed", "messages_delivered",
    "messages_acknowledged", "messages_redelivered",
    "dead_lettered_expired", "dead_lettered_rejected", "dead_lettered_maxlen",
    "dead_lettered_delivery_limit",
)


class Counters:
    """Monotonic totals since the node started (RabbitMQ's rabbit_global_counters)."""

    __slots__ = _FIELDS

    def __init__(self) -> None:
        for name in _FIELDS:
            setattr(self, name, 0)

    def dead_lettered(self, reason: str, n: int = 1) -> None:
        """Count `n` messages dead-lettered for `reason` (expired, rejected, maxlen,
        delivery_limit); other reasons are ignored."""
        key = "dead_lettered_" + reason
        if key in _FIELDS:
            setattr(self, key, getattr(self, key) + n)

    # -- read as a mapping (mgmt/metrics.py) ------------------------------------------------------
    def __contains__(self, key: object) -> bool:
        return key in _FIELDS

    def __getitem__(self, key: str) -> int:
        if key not in _FIELDS:
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(_FIELDS)

    def __len__(self) -> int:
        return len(_FIELDS)

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in _FIELDS}
