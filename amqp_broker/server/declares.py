"""exchange.* and queue.* methods of a channel: argument unpacking and the -ok replies.

Called through `HANDLERS` by `Channel.on_method`; the semantics (equivalence checks, exclusive
ownership, idempotent deletes, persistence) live in `vhost.VHost` and `core.router.Topology`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pamqp import commands as C

from amqp_broker.core.bindings import Dest
from .permissions import CONFIGURE, READ, WRITE
from .reply_to import REPLY_TO

if TYPE_CHECKING:
    from .channel import Channel

__all__ = ["HANDLERS"]


def _check_passive(ch: "Channel", kind: str, name: str) -> None:
    # RabbitMQ 4.3.1+: a passive declare needs some permission on the name (no existence leak).
    perms = ch.session.permissions
    if not perms.any_on(name):
        perms.check(CONFIGURE, kind, name)


def _exchange_declare(ch: "Channel", m: C.Exchange.Declare) -> None:
    if m.passive:
        _check_passive(ch, "exchange", m.exchange)
    else:
        ch.session.permissions.check(CONFIGURE, "exchange", m.exchange)
    ch.vhost.declare_exchange(m.exchange, m.exchange_type or "direct", passive=m.passive,
                              durable=m.durable, auto_delete=m.auto_delete, internal=m.internal,
                              arguments=dict(m.arguments or {}))
    if not m.nowait:
        ch.reply(C.Exchange.DeclareOk())


def _exchange_delete(ch: "Channel", m: C.Exchange.Delete) -> None:
    ch.session.permissions.check(CONFIGURE, "exchange", m.exchange)
    ch.vhost.delete_exchange(m.exchange, m.if_unused)
    if not m.nowait:
        ch.reply(C.Exchange.DeleteOk())


def _check_bind(ch: "Channel", source: str, kind: str, dest: str) -> None:
    perms = ch.session.permissions
    perms.check(WRITE, kind, dest)
    perms.check(READ, "exchange", source)


def _exchange_bind(ch: "Channel", m: C.Exchange.Bind) -> None:
    _check_bind(ch, m.source, "exchange", m.destination)
    ch.vhost.bind(ch.session, m.source, Dest.exchange(m.destination), m.routing_key,
                  dict(m.arguments or {}))
    if not m.nowait:
        ch.reply(C.Exchange.BindOk())


def _exchange_unbind(ch: "Channel", m: C.Exchange.Unbind) -> None:
    _check_bind(ch, m.source, "exchange", m.destination)
    ch.vhost.unbind(ch.session, m.source, Dest.exchange(m.destination), m.routing_key,
                    dict(m.arguments or {}))
    if not m.nowait:
        ch.reply(C.Exchange.UnbindOk())


def _queue_name(ch: "Channel", name: str) -> str:
    # An empty name in bind/purge/delete/consume means the channel's last declared queue.
    return name or ch.last_queue


def _queue_declare(ch: "Channel", m: C.Queue.Declare) -> None:
    name = m.queue
    if name == REPLY_TO and m.passive:
        # The direct reply-to pseudo queue always "exists" (RabbitMQ answers a passive declare).
        if not m.nowait:
            ch.conn.send_declare_ok(ch.number, name, 0, 0)
        return
    server_named = not name and not m.passive
    if server_named:
        name = ch.broker.new_name("amq.gen-")
    elif not name:
        name = _queue_name(ch, name)
    if m.passive:
        _check_passive(ch, "queue", name)
    else:
        ch.session.permissions.check(CONFIGURE, "queue", name)
        dlx = (m.arguments or {}).get("x-dead-letter-exchange")
        if isinstance(dlx, (str, bytes)):
            # seed 002: a DLX also needs read on the queue and write on the exchange
            ch.session.permissions.check(READ, "queue", name)
            ch.session.permissions.check(
                WRITE, "exchange", dlx.decode() if isinstance(dlx, bytes) else dlx)
    rt = ch.vhost.declare_queue(ch.session, name, passive=m.passive, durable=m.durable,
                                exclusive=m.exclusive, auto_delete=m.auto_delete,
                                arguments=dict(m.arguments or {}), server_named=server_named)
    ch.last_queue = name
    if not m.nowait:
        # Not pamqp's DeclareOk: it refuses valid UTF-8 names (e.g. non-ASCII ones).
        ch.conn.send_declare_ok(ch.number, name, rt.message_count, rt.consumer_count)


def _queue_bind(ch: "Channel", m: C.Queue.Bind) -> None:
    queue = _queue_name(ch, m.queue)
    _check_bind(ch, m.exchange, "queue", queue)
    ch.vhost.bind(ch.session, m.exchange, Dest.queue(queue), m.routing_key,
                  dict(m.arguments or {}))
    if not m.nowait:
        ch.reply(C.Queue.BindOk())


def _queue_unbind(ch: "Channel", m: C.Queue.Unbind) -> None:
    queue = _queue_name(ch, m.queue)
    _check_bind(ch, m.exchange, "queue", queue)
    ch.vhost.unbind(ch.session, m.exchange, Dest.queue(queue), m.routing_key,
                    dict(m.arguments or {}))
    ch.reply(C.Queue.UnbindOk())


def _queue_purge(ch: "Channel", m: C.Queue.Purge) -> None:
    queue = _queue_name(ch, m.queue)
    ch.session.permissions.check(READ, "queue", queue)
    n = ch.vhost.purge_queue(ch.session, queue)
    if not m.nowait:
        ch.reply(C.Queue.PurgeOk(message_count=n))


def _queue_delete(ch: "Channel", m: C.Queue.Delete) -> None:
    queue = _queue_name(ch, m.queue)
    ch.session.permissions.check(CONFIGURE, "queue", queue)
    n = ch.vhost.delete_queue(ch.session, queue, m.if_unused, m.if_empty)
    if not m.nowait:
        ch.reply(C.Queue.DeleteOk(message_count=n))


HANDLERS = {
    C.Exchange.Declare: _exchange_declare,
    C.Exchange.Delete: _exchange_delete,
    C.Exchange.Bind: _exchange_bind,
    C.Exchange.Unbind: _exchange_unbind,
    C.Queue.Declare: _queue_declare,
    C.Queue.Bind: _queue_bind,
    C.Queue.Unbind: _queue_unbind,
    C.Queue.Purge: _queue_purge,
    C.Queue.Delete: _queue_delete,
}
