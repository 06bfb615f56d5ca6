"""Dead-letter routing: messages a queue dropped (rejected, expired, maxlen) go to its DLX.

Called by `Broker.dead_letter` with the `DeadLetter` records a queue produced (from
`QueueRuntime.run`, i.e. at the end of a batch). Headers (x-death, x-first/last-death-*) and the
routing keys come from the pure `dlx.deaths.dead_letter`; loops are cut with `dlx.cycles`. The
republished message loses its `expiration` (it must not expire again) and is routed on the DLX
with `internal_ok=True`, as RabbitMQ does. At-most-once for classic queues: no confirms.
Cost: a full property decode/encode per dead letter (off the hot path).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from amqp_broker.core.errors import AMQPError
from amqp_broker.protocol.properties import decode_properties, encode_properties
from amqp_broker.queues import Message
from dlx import dead_letter, split_cycles

if TYPE_CHECKING:
    from .broker import Broker
    from .vhost import VHost

__all__ = ["route_dead_letters"]

_log = logging.getLogger(__name__)


def route_dead_letters(broker: "Broker", vhost: "VHost", dead_letters: list) -> None:
    for dl in dead_letters:
        rt = vhost.queues.get(dl.queue)
        settings = getattr(getattr(rt, "queue", None), "settings", None)
        dlx = getattr(settings, "dead_letter_exchange", None)
        if dlx is None:
            continue
        try:
            _route_one(broker, vhost, dl, dlx, settings.dead_letter_routing_key)
        except AMQPError as err:
            _log.debug("dead letter from %r dropped: %s", dl.queue, err)


def _route_one(broker: "Broker", vhost: "VHost", dl, dlx: str, dlx_key: str | None) -> None:
    m = dl.message
    props = decode_properties(m.properties)
    res = dead_letter(props.headers, reason=dl.reason, queue=dl.queue, exchange=m.exchange,
                      routing_key=m.routing_key, time=broker.now_ms / 1000.0, dlx=dlx,
                      dlx_routing_key=dlx_key, expiration=props.expiration)
    props.headers = res.headers
    props.expiration = None
    match_headers = {k: v for k, v in res.headers.items() if k not in ("CC", "BCC")}
    names: dict[str, None] = {}
    for key in res.routing_keys:
        for name in vhost.topology.route(dlx, key, match_headers, internal_ok=True):
            names[name] = None
    targets, dropped = split_cycles(names, res.headers.get("x-death", []), reason=dl.reason)
    if dropped:
        _log.debug("dead-letter cycle: %r not delivered to %r", dl.queue, dropped)
    if not targets:
        return
    msg = Message.from_publish(dlx, res.routing_keys[0], encode_properties(props), m.body)
    now = broker.now_ms
    for name in targets:
        target = vhost.queues.get(name)
        if target is not None:
            target.publish(msg, now, None)
