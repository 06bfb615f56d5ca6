"""Message rates for the management API: RabbitMQ's `message_stats` (`publish`, `deliver_get`,
`ack`, ... each with `<key>_details: {"rate": per second}`), `rates_mode` "basic".

The hot path only bumps counters it owns (`server/counters.py`: per channel and per queue,
`publish_in` / `publish_out` per exchange). Every `collect_statistics_interval` the sampler
(`run_sampler`, started by `http.serve_management`) asks `Admin.sample_totals` for every
object's totals, and `Rates.record` keeps the last sample of each object and the rate since the
one before. Listings read the last sample: a reply costs no summing, and totals and rates
agree with each other, as RabbitMQ's (which also shows totals as of its last sample).

Pure apart from `run_sampler`: samples in, JSON-ready dicts out.
"""

from __future__ import annotations

import collections
import logging
import time
from typing import Any, Callable, Mapping

import trio

__all__ = ["Rates", "channel_stats", "queue_stats", "run_sampler", "with_samples",
           "CHANNEL_KEYS", "QUEUE_KEYS", "EXCHANGE_KEYS", "DEPTH_KEYS", "OCTET_KEYS", "NODE_KEYS"]

# message_stats keys of each kind of object, as RabbitMQ 3.10 lists them
QUEUE_KEYS = ("publish", "deliver", "deliver_no_ack", "get", "get_no_ack", "get_empty",
              "deliver_get", "redeliver", "ack")
CHANNEL_KEYS = QUEUE_KEYS + ("confirm", "return_unroutable", "drop_unroutable")
EXCHANGE_KEYS = ("publish_in", "publish_out")
# gauges whose `<key>_details` sit beside them at the top of a row
DEPTH_KEYS = ("messages", "messages_ready", "messages_unacknowledged")
OCTET_KEYS = ("recv_oct", "send_oct")
# the overview's one addition (ours): messages dead-lettered, every reason
NODE_KEYS = CHANNEL_KEYS + ("dead_lettered",)

_log = logging.getLogger(__name__)

HISTORY = 120  # overview samples kept for the charts (10 minutes at the default interval)


def channel_stats(c: Mapping[str, int]) -> dict[str, int]:
    """RabbitMQ's channel / vhost / overview message_stats from a `Counters` mapping."""
    delivered = c["messages_delivered"]
    no_ack, got, got_no_ack = (c["messages_delivered_no_ack"], c["messages_got"],
                               c["messages_got_no_ack"])
    return {
        "publish": c["messages_received"], "confirm": c["messages_confirmed"],
        "return_unroutable": c["messages_unroutable_returned"],
        "drop_unroutable": c["messages_unroutable_dropped"],
        "deliver": delivered - no_ack - got - got_no_ack, "deliver_no_ack": no_ack,
        "get": got, "get_no_ack": got_no_ack, "get_empty": c["messages_get_empty"],
        "deliver_get": delivered, "redeliver": c["messages_redelivered"],
        "ack": c["messages_acknowledged"],
    }


def queue_stats(qc: Any) -> dict[str, int]:
    """A queue's message_stats totals from its `QueueCounters`."""
    out = qc.as_dict()
    out["deliver_get"] = out["deliver"] + out["deliver_no_ack"] + out["get"] + out["get_no_ack"]
    return out


def _details(rate: float) -> dict:
    return {"rate": round(rate, 1)}


class Rates:
    """The last sample of every object (key: a tuple such as ("queue", vhost, name)) and the
    rate of each of its fields since the sample before; a short history of the node's."""

    def __init__(self) -> None:
        self._last: dict[tuple, tuple[float, dict[str, int]]] = {}
        self._rates: dict[tuple, dict[str, float]] = {}
        self.history: collections.deque[tuple[int, dict[str, int]]] = \
            collections.deque(maxlen=HISTORY)
        self.sampling = False  # a sampler runs (`run_sampler`): one per Rates

    def record(self, now: float, samples: dict[tuple, dict[str, int]]) -> None:
        """Take one sample of every object; objects absent from `samples` are forgotten."""
        last, rates = {}, {}
        for key, totals in samples.items():
            prev = self._last.get(key)
            if prev is not None and now > prev[0]:
                dt = now - prev[0]
                before = prev[1]
                rates[key] = {k: max(0.0, (v - before.get(k, 0)) / dt) for k, v in totals.items()}
            last[key] = (now, totals)
        self._last, self._rates = last, rates
        node = samples.get(("node",))
        if node is not None:
            self.history.append((int(time.time() * 1000), node))

    def message_stats(self, key: tuple, fields: tuple[str, ...]) -> dict | None:
        """`message_stats` of one object, or None before its first sample or while every
        total is zero (RabbitMQ leaves the key out for an object without activity)."""
        found = self._last.get(key)
        if found is None:
            return None
        totals = found[1]
        if not any(totals.get(k, 0) for k in fields):
            return None
        rates = self._rates.get(key, {})
        out: dict[str, Any] = {}
        for k in fields:
            out[k] = totals.get(k, 0)
            out[k + "_details"] = _details(rates.get(k, 0.0))
        return out

    def details(self, key: tuple, fields: tuple[str, ...]) -> dict:
        """`<field>_details` of gauges and byte counters (set beside the fields in a row)."""
        if key not in self._last:
            return {}
        rates = self._rates.get(key, {})
        return {k + "_details": _details(rates.get(k, 0.0)) for k in fields}

    def node_history(self, age_s: float, fields: tuple[str, ...]) -> dict[str, list]:
        """The node's samples of `fields` over the last `age_s` seconds, newest first, in
        RabbitMQ's shape: {field: [{"sample": total or gauge, "timestamp": ms}, ...]} (a
        reader's rate is the difference of two samples over their time apart)."""
        if not self.history:
            return {}
        newest = self.history[-1][0]
        rows = [h for h in reversed(self.history) if newest - h[0] <= age_s * 1000]
        return {k: [{"sample": s.get(k, 0), "timestamp": t} for t, s in rows] for k in fields}


def with_samples(stats: dict, history: dict[str, list]) -> dict:
    """`stats` (message_stats or queue_totals) with each `<key>_details` given its
    "samples" from `Rates.node_history` (the overview's `msg_rates_age` / `lengths_age`)."""
    for k, samples in history.items():
        details = stats.get(k + "_details")
        if isinstance(details, dict):
            details["samples"] = samples
    return stats


async def run_sampler(sample: Callable[[], dict[tuple, dict[str, int]]], rates: Rates,
                      interval_ms: int) -> None:
    """Record `sample()` into `rates` now and every `interval_ms` until cancelled. A failing
    sample is logged and skipped: it must not take the management API down with it."""
    while True:
        try:
            rates.record(time.monotonic(), sample())
        except Exception:
            _log.exception("message rates: sampling failed")
        await trio.sleep(interval_ms / 1000.0)
