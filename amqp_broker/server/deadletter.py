"""Dead-letter republishing: the one place that builds a dead-lettered copy and finds its targets.

Two callers share `prepare_copy` + `find_targets`:

- at-most-once (classic queues, and quorum queues without at-least-once): `route_dead_letters`,
  called by `Broker.dead_letter` with the `DeadLetter` records a queue produced (from
  `QueueRuntime.run`, i.e. at the end of a batch); published without confirms, errors dropped;
- at-least-once (quorum queues): `dlx_port.BrokerDlxPort.prepare` / `route`, driven by
  `dlx.DlxWorker`, which publishes with confirms and retries.

Headers (x-death, x-first/last-death-*) and the routing keys come from the pure
`dlx.deaths.dead_letter`; loops are cut with `dlx.cycles.split_cycles`. The copy loses its
`expiration` (it must not expire again) and is routed on the DLX with `internal_ok=True`, as
RabbitMQ does. Cost: a full property decode/encode per dead letter (off the hot path).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from amqp_broker.core.errors import AMQPError
from amqp_broker.core.router import Topology
from amqp_broker.protocol.properties import decode_properties, encode_properties
from amqp_broker.queues import Message
from dlx import dead_letter, split_cycles

if TYPE_CHECKING:
    from .broker import Broker
    from .vhost import VHost

__all__ = ["DeadLetterCopy", "prepare_copy", "find_targets", "route_dead_letters"]

_log = logging.getLogger(__name__)


class DeadLetterCopy:
    """A dead-lettered message ready to republish, and what routing it on the DLX needs."""

    __slots__ = ("message", "exchange", "routing_keys", "match_headers", "x_death", "reason")

    def __init__(self, message: Message, exchange: str, routing_keys: list[str],
                 match_headers: dict[str, Any], x_death: list, reason: str) -> None:
        self.message = message              # published on the DLX with the first routing key
        self.exchange = exchange            # the DLX
        self.routing_keys = routing_keys    # the dead-letter key, or publish + CC + BCC keys
        self.match_headers = match_headers  # for headers exchanges: without CC/BCC
        self.x_death = x_death              # including this death (for the cycle rule)
        self.reason = reason


def prepare_copy(message: Message, *, reason: str, queue: str, dlx: str,
                 dlx_routing_key: str | None, now_ms: int) -> DeadLetterCopy:
    """The copy of `message` dead-lettered from `queue` for `reason` onto exchange `dlx`."""
    props = decode_properties(message.properties)
    res = dead_letter(props.headers, reason=reason, queue=queue, exchange=message.exchange,
                      routing_key=message.routing_key, time=now_ms / 1000.0, dlx=dlx,
                      dlx_routing_key=dlx_routing_key, expiration=props.expiration)
    props.headers = res.headers
    props.expiration = None
    copy = Message.from_publish(dlx, res.routing_keys[0], encode_properties(props), message.body)
    match_headers = {k: v for k, v in res.headers.items() if k not in ("CC", "BCC")}
    return DeadLetterCopy(copy, dlx, list(res.routing_keys), match_headers,
                          res.headers.get("x-death", []), reason)


def find_targets(topology: Topology, copy: DeadLetterCopy) -> tuple[list[str], list[str]]:
    """(queues to publish to, queues dropped as a dead-letter cycle), each once, in route order.

    Raises `AMQPError` (NotFound) when the DLX does not exist."""
    names = topology.route_keys(copy.exchange, copy.routing_keys, copy.match_headers,
                                internal_ok=True)
    return split_cycles(dict.fromkeys(names), copy.x_death, reason=copy.reason)


def route_dead_letters(broker: "Broker", vhost: "VHost", dead_letters: list) -> None:
    """At-most-once: republish each `DeadLetter` to its queue's current DLX, no confirms."""
    now = broker.now_ms
    for dl in dead_letters:
        rt = vhost.queues.get(dl.queue)
        if rt is None:
            continue
        settings = rt.queue.settings
        dlx = settings.dead_letter_exchange
        if dlx is None:
            continue
        copy = prepare_copy(dl.message, reason=dl.reason, queue=dl.queue, dlx=dlx,
                            dlx_routing_key=settings.dead_letter_routing_key, now_ms=now)
        try:
            targets, dropped = find_targets(vhost.topology, copy)
        except AMQPError as err:
            _log.debug("dead letter from %r dropped: %s", dl.queue, err)
            continue
        if dropped:
            _log.debug("dead-letter cycle: %r not delivered to %r", dl.queue, dropped)
        for name in targets:
            target = vhost.queues.get(name)
            if target is not None:
                target.publish(copy.message, now, None)
