"""exchange.* and queue.* methods of a channel: argument unpacking and the -ok replies.

Called through `HANDLERS` by `Channel.on_method`; the semantics (equivalence checks, exclusive
ownership, idempotent deletes, persistence) live in `vhost.VHost` and `core.router.Topology`,
the permission checks (first, as rabbit_channel does) in `core.permissions.AccessChecker`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import trio
from pamqp import commands as C

from amqp_broker.core.bindings import Dest
from amqp_broker.queues import check_server_named
from amqp_broker.queues.remote import RemoteQueue
from .reply_to import REPLY_TO

if TYPE_CHECKING:
    from .channel import Channel

__all__ = ["HANDLERS"]

# How long a declare-ok or purge-ok of a classic queue homed on another node waits for that
# node's answer before it goes out with the counts the node last reported.
COUNTS_TIMEOUT = 5.0


class _HomeCounts:
    """The -ok of a method on a classic queue homed on another node, held (the session's
    barrier, `cluster_meta.hold`) until that node says what the queue holds now: RabbitMQ
    answers a declare-ok's counts and a purge-ok's count from the queue process itself, so a
    client that published through one node and declares through another sees every message.
    `wait` writes the reply itself once the answer (or `COUNTS_TIMEOUT`) is in."""

    __slots__ = ("ch", "reply", "count", "answered")

    def __init__(self, ch: "Channel", reply: Callable[[int], None]) -> None:
        self.ch = ch
        self.reply = reply
        self.count = 0
        self.answered = trio.Event()

    def done(self, count: int) -> None:
        self.count = count
        self.answered.set()

    async def wait(self) -> bool:
        with trio.move_on_after(COUNTS_TIMEOUT):
            await self.answered.wait()
        if not self.ch.released:
            self.reply(self.count)
        return True


def _answer_from_home(ch: "Channel", queue: RemoteQueue, reply: Callable[[int], None],
                      purge: bool = False) -> bool:
    """Hold this method's -ok until the home node answers (`RemoteQueue.ask_counts`); False
    when it cannot be held (not a client method in a cluster): the caller answers now."""
    meta = ch.broker.cluster_meta
    if meta is None or not meta.collecting:
        return False
    held = _HomeCounts(ch, reply)
    meta.hold(held)
    queue.ask_counts(held.done, purge)
    return True


def _exchange_declare(ch: "Channel", m: C.Exchange.Declare) -> None:
    ch.access.exchange_declare(m.exchange, m.arguments, m.passive)
    ch.vhost.declare_exchange(m.exchange, m.exchange_type or "direct", passive=m.passive,
                              durable=m.durable, auto_delete=m.auto_delete, internal=m.internal,
                              arguments=dict(m.arguments or {}))
    if not m.nowait:
        ch.reply(C.Exchange.DeclareOk())


def _exchange_delete(ch: "Channel", m: C.Exchange.Delete) -> None:
    ch.access.exchange_delete(m.exchange)
    ch.vhost.delete_exchange(m.exchange, m.if_unused)
    if not m.nowait:
        ch.reply(C.Exchange.DeleteOk())


def _exchange_bind(ch: "Channel", m: C.Exchange.Bind) -> None:
    ch.access.exchange_bind(m.destination, m.source)
    ch.vhost.bind(ch.session, m.source, Dest.exchange(m.destination), m.routing_key,
                  dict(m.arguments or {}))
    if not m.nowait:
        ch.reply(C.Exchange.BindOk())


def _exchange_unbind(ch: "Channel", m: C.Exchange.Unbind) -> None:
    ch.access.exchange_unbind(m.destination, m.source)
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
        check_server_named(m.arguments)
        name = ch.broker.new_name("amq.gen-")
    elif not name:
        name = _queue_name(ch, name)
    ch.access.queue_declare(name, m.arguments, m.passive)  # a DLX needs more (seed 002)
    rt = ch.vhost.declare_queue(ch.session, name, passive=m.passive, durable=m.durable,
                                exclusive=m.exclusive, auto_delete=m.auto_delete,
                                arguments=dict(m.arguments or {}), server_named=server_named)
    ch.last_queue = name
    if m.nowait:
        return
    queue = rt.queue
    if isinstance(queue, RemoteQueue) and not queue.deleted and _answer_from_home(
            ch, queue, lambda n: ch.conn.send_declare_ok(ch.number, name, n, rt.consumer_count)):
        return
    # Not pamqp's DeclareOk: it refuses valid UTF-8 names (e.g. non-ASCII ones).
    ch.conn.send_declare_ok(ch.number, name, rt.message_count, rt.consumer_count)


def _queue_bind(ch: "Channel", m: C.Queue.Bind) -> None:
    queue = _queue_name(ch, m.queue)
    ch.access.queue_bind(queue, m.exchange)
    ch.vhost.bind(ch.session, m.exchange, Dest.queue(queue), m.routing_key,
                  dict(m.arguments or {}))
    if not m.nowait:
        ch.reply(C.Queue.BindOk())


def _queue_unbind(ch: "Channel", m: C.Queue.Unbind) -> None:
    queue = _queue_name(ch, m.queue)
    ch.access.queue_unbind(queue, m.exchange)
    ch.vhost.unbind(ch.session, m.exchange, Dest.queue(queue), m.routing_key,
                    dict(m.arguments or {}))
    ch.reply(C.Queue.UnbindOk())


def _queue_purge(ch: "Channel", m: C.Queue.Purge) -> None:
    queue = _queue_name(ch, m.queue)
    ch.access.queue_purge(queue)
    rt = ch.vhost.get_queue(queue, ch.session)
    if isinstance(rt.queue, RemoteQueue) and not m.nowait and _answer_from_home(
            ch, rt.queue, lambda n: ch.reply(C.Queue.PurgeOk(message_count=n)), purge=True):
        rt.mark_dirty()
        return
    n = ch.vhost.purge_queue(ch.session, queue)
    if not m.nowait:
        ch.reply(C.Queue.PurgeOk(message_count=n))


def _queue_delete(ch: "Channel", m: C.Queue.Delete) -> None:
    queue = _queue_name(ch, m.queue)
    ch.access.queue_delete(queue)
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
