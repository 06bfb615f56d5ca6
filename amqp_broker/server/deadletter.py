"""Dead-letter routing: messages a queue dropped (rejected, expired, maxlen) go to its DLX.

Called by `Broker.dead_letter` with the `DeadLetter` records a queue produced. The x-death and
x-first-death-* headers come from `dlx.deaths` (another engineer's pure module) when it exists;
until then the message is republished with its original properties. Routing uses the queue's
effective dead-letter exchange and routing key (argument or policy) and may target internal
exchanges, as RabbitMQ does. Dead-lettering is at-most-once for classic queues: no confirms.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from amqp_broker.core.errors import AMQPError
from amqp_broker.queues import Message

if TYPE_CHECKING:
    from .broker import Broker
    from .vhost import VHost

__all__ = ["route_dead_letters"]

_log = logging.getLogger(__name__)


def _rebuild(dl, queue_settings, now_ms: int) -> Message:
    try:
        from dlx import deaths  # optional until it lands
    except ImportError:
        deaths = None
    make = getattr(deaths, "dead_letter_message", None) if deaths is not None else None
    if make is not None:
        return make(dl.message, reason=dl.reason, queue=dl.queue, now_ms=now_ms,
                    routing_key=queue_settings.dead_letter_routing_key)
    m = dl.message
    rk = queue_settings.dead_letter_routing_key or m.routing_key
    return Message.from_publish(m.exchange, rk, m.properties, m.body)


def route_dead_letters(broker: "Broker", vhost: "VHost", dead_letters: list) -> None:
    for dl in dead_letters:
        rt = vhost.queues.get(dl.queue)
        settings = getattr(getattr(rt, "queue", None), "settings", None)
        dlx = getattr(settings, "dead_letter_exchange", None)
        if settings is None or dlx is None:
            continue
        msg = _rebuild(dl, settings, broker.now_ms)
        rk = settings.dead_letter_routing_key or dl.message.routing_key
        try:
            names = vhost.topology.route(dlx, rk, msg.headers or None, internal_ok=True)
        except AMQPError:
            _log.debug("dead-letter exchange %r of queue %r missing; dropped", dlx, dl.queue)
            continue
        for name in names:
            target = vhost.queues.get(name)
            if target is not None and target is not rt:
                target.publish(msg, broker.now_ms, None)
            elif target is rt and dl.reason != "rejected":
                # A queue dead-lettering to itself: allowed except for cycles without rejection.
                continue
