"""The broker side of the at-least-once dead-letter worker: `DlxWorker`'s port for one quorum queue.

Created by the quorum queue adapter (`amqp_broker.queues.quorum`) with `start_worker(queue)`;
the adapter's effect runner feeds it held messages (`worker.add`) and `load`s the replicated
`dlx` state when the group becomes ready. It builds the dead-lettered copy with the pure
`dlx.deaths.dead_letter` (x-death, CC/BCC, routing-key rewrite, expiration removed), routes it
on the queue's *current* dead-letter exchange through the vhost's router (internal exchanges
allowed, cycles dropped with `dlx.cycles`), publishes it with confirms through each target's
`QueueRuntime.publish`, settles with the fifo's `DlxSettle`, and polls for retries on the
broker's deadline heap (`timer_deadline` / `on_timer`, as queue timers do).
Also `check_strategy`: the documented fallback warning for at-least-once without reject-publish.
"""

from __future__ import annotations

import logging
from typing import Any

from amqp_broker.protocol.properties import decode_properties, encode_properties
from amqp_broker.queues.message import Message

from .cycles import split_cycles
from .deaths import dead_letter
from .worker import DEFAULT_PREFETCH, DlxWorker

__all__ = ["BrokerPort", "start_worker", "check_strategy"]

_log = logging.getLogger(__name__)

_REJECTING = ("reject-publish", "reject-publish-dlx")


class _Prepared:
    __slots__ = ("message", "exchange", "routing_keys", "x_death", "reason", "headers")

    def __init__(self, message: Message, exchange: str, routing_keys: list[str],
                 x_death: list, reason: str, headers: dict) -> None:
        self.headers = headers  # for headers exchanges: without CC/BCC
        self.message = message
        self.exchange = exchange
        self.routing_keys = routing_keys
        self.x_death = x_death
        self.reason = reason


class _Confirm:
    """Stands in for a channel's confirm tracker: `QueueRuntime.publish` calls `settle`."""

    __slots__ = ("fn",)

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def settle(self, seq: int, ok: bool) -> None:
        self.fn(ok)


def check_strategy(config: Any, name: str) -> None:
    """at-least-once needs overflow reject-publish (and a DLX); otherwise it falls back to
    at-most-once, as documented, with a warning."""
    if getattr(config, "dead_letter_strategy", None) != "at-least-once":
        return
    if config.dead_letter_exchange is None:
        _log.warning("quorum queue %r: dead-letter-strategy at-least-once without a dead-letter "
                     "exchange: messages are dropped", name)
    elif config.overflow != "reject-publish":
        _log.warning("quorum queue %r: dead-letter-strategy at-least-once needs overflow "
                     "reject-publish (have %s): falling back to at-most-once", name,
                     config.overflow)


class BrokerPort:
    """`dlx.worker.DlxPort` over a `QuorumQueue` (duck-typed: name, vhost, config, state,
    broker, propose)."""

    def __init__(self, queue: Any) -> None:
        self.q = queue
        self.broker = queue.broker
        self.worker: DlxWorker | None = None
        self.timer_deadline: int | None = None

    def _vhost(self):
        return self.broker.vhosts.get(self.q.vhost)

    def now_ms(self) -> int:
        return self.broker.clock_ms()

    def is_held(self, dlx_id: int) -> bool:
        q = self.q
        return not q.deleted and dlx_id in q.state.fifo.dlx.held

    def prepare(self, reason: str, message: Message) -> _Prepared | None:
        cfg = self.q.config
        dlx = cfg.dead_letter_exchange
        if dlx is None:
            return None
        props = decode_properties(message.properties)
        res = dead_letter(props.headers, reason=reason, queue=self.q.name,
                          exchange=message.exchange, routing_key=message.routing_key,
                          time=self.broker.now_ms / 1000.0, dlx=dlx,
                          dlx_routing_key=cfg.dead_letter_routing_key,
                          expiration=props.expiration)
        props.headers = res.headers
        props.expiration = None
        msg = Message.from_publish(dlx, res.routing_keys[0], encode_properties(props), message.body)
        headers = {k: v for k, v in res.headers.items() if k not in ("CC", "BCC")}
        return _Prepared(msg, dlx, list(res.routing_keys), res.headers.get("x-death", []), reason,
                         headers)

    def route(self, p: _Prepared) -> tuple[list[str], list[str]]:
        vhost = self._vhost()
        if vhost is None:
            raise LookupError(f"vhost {self.q.vhost!r} is gone")
        names = vhost.topology.route_keys(p.exchange, p.routing_keys, p.headers, internal_ok=True)
        names = list(dict.fromkeys(names))
        return split_cycles(names, p.x_death, reason=p.reason)

    def has_room(self, name: str) -> bool:
        """False while a reject-publish target is at its limit (publishing would be refused)."""
        vhost = self._vhost()
        rt = vhost.queues.get(name) if vhost is not None else None
        if rt is None:
            return True  # publish reports it missing
        queue = rt.queue
        s = getattr(queue, "settings", None)
        if s is None or getattr(s, "overflow", None) not in _REJECTING:
            return True
        # classic queues refuse a message that would go over; quorum queues only refuse once
        # already over the limit (RabbitMQ's rules), so they take one more at the limit
        slack = 1 if getattr(queue, "queue_type", "classic") == "quorum" else 0
        if s.max_length is not None and queue.message_count >= s.max_length + slack:
            return False
        size = getattr(queue, "message_bytes", None)
        return not (s.max_length_bytes is not None and isinstance(size, int)
                    and size >= s.max_length_bytes + slack)

    def publish(self, name: str, p: _Prepared, callback: Any) -> bool:
        vhost = self._vhost()
        rt = vhost.queues.get(name) if vhost is not None else None
        if rt is None or rt.deleted:
            return False
        rt.publish(p.message, self.broker.now_ms, (_Confirm(callback), 0))
        return True

    def settle(self, dlx_ids: tuple[int, ...]) -> None:
        from quorum import fifo

        self.q.propose(fifo.DlxSettle(dlx_ids))

    def schedule(self, at_ms: int) -> None:
        self.timer_deadline = at_ms
        self.broker.timers.schedule(at_ms, self)

    def on_timer(self, now_ms: int) -> None:
        self.timer_deadline = None
        if self.worker is not None:
            self.worker.on_timer(now_ms)


def start_worker(queue: Any) -> DlxWorker:
    """A worker for `queue` with the node's `dead_letter_worker_consumer_prefetch`."""
    port = BrokerPort(queue)
    prefetch = getattr(queue.broker.settings, "dead_letter_worker_consumer_prefetch",
                       DEFAULT_PREFETCH)
    timeout = getattr(queue.broker.settings, "dead_letter_worker_publisher_confirm_timeout", 180.0)
    worker = DlxWorker(port, prefetch=prefetch, confirm_timeout_ms=int(timeout * 1000),
                       name=queue.name)
    port.worker = worker
    return worker
