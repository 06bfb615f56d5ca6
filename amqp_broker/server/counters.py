"""Message counters: per channel, per queue, and the node's totals, for the Prometheus endpoint
and the management API's `message_stats`.

The hot path bumps plain int attributes of the object at hand (no locks: every task of a node
runs on one trio thread), nothing more:

- each `Channel` has its own `Counters` (`channel.counters`): publishes, routes, returns,
  confirms, deliveries, gets, acks. When the channel closes its counts are folded into its
  session's `retired_counters`, its vhost's `retired_counters` and the broker's
  `broker.counters` (which also takes dead-letter counts, counted per node);
- each `QueueRuntime` has a `QueueCounters` (`runtime.counters`).

Totals of a connection or the node are sums of those, taken by a reader
(`Session.counter_totals`, `Broker.counter_totals`): /metrics, and `mgmt/rates.py`'s sampler
every `collect_statistics_interval`, which also sums a vhost's (its `retired_counters` and its
connections'). A `Counters`
reads as a mapping (`key in counters`, `counters[key]`) with the field names below.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator

__all__ = ["Counters", "QueueCounters", "node_totals", "session_totals"]

_FIELDS = (
    "messages_received", "messages_routed", "messages_unroutable_dropped",
    "messages_unroutable_returned", "messages_confirmed", "messages_delivered",
    "messages_acknowledged", "messages_redelivered",
    # breakdown of messages_delivered (which counts all four kinds): consume with no-ack,
    # basic.get with ack, basic.get with no-ack; consume with ack is the rest
    "messages_delivered_no_ack", "messages_got", "messages_got_no_ack",
    "messages_get_empty",  # basic.get answered get-empty
    "dead_lettered_expired", "dead_lettered_rejected", "dead_lettered_maxlen",
    "dead_lettered_delivery_limit",
)


class Counters:
    """Monotonic totals (RabbitMQ's rabbit_global_counters, and a channel's fine stats)."""

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

    def add(self, other: "Counters") -> None:
        """Fold `other`'s counts into these (a closing channel into its owners)."""
        for name in _FIELDS:
            setattr(self, name, getattr(self, name) + getattr(other, name))

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


_QUEUE_FIELDS = ("publish", "deliver", "deliver_no_ack", "get", "get_no_ack", "get_empty",
                 "redeliver", "ack")


class QueueCounters:
    """One queue's totals in RabbitMQ's queue `message_stats` names: messages published into
    it, handed to consumers (with / without ack), fetched by basic.get (with / without ack, or
    found empty), redelivered, acknowledged."""

    __slots__ = _QUEUE_FIELDS

    def __init__(self) -> None:
        for name in _QUEUE_FIELDS:
            setattr(self, name, 0)

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in _QUEUE_FIELDS}


def _sum(base: Counters, live: Iterable[Counters]) -> Counters:
    out = Counters()
    out.add(base)
    for c in live:
        out.add(c)
    return out


def session_totals(session: Any) -> Counters:
    """A connection's totals: its closed channels' and its open ones'."""
    return _sum(session.retired_counters, (ch.counters for ch in list(session.channels.values())))


def node_totals(broker: Any) -> Counters:
    """The node's totals: closed channels and dead letters (`broker.counters`) plus every open
    channel's counts. O(open channels); called by readers, never on the hot path."""
    return _sum(broker.counters, (ch.counters for s in list(broker.sessions)
                                  for ch in list(s.channels.values())))
