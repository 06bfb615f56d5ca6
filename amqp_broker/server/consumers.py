"""basic.qos, basic.consume, basic.cancel, basic.get and basic.recover on a channel.

Called through `HANDLERS` by `Channel.on_method`. Prefetch follows RabbitMQ, not the spec:
`global=false` limits each consumer created afterwards, `global=true` the whole channel. Each
`Consumer` handed to a queue carries `take_credit` (built here) which the queue calls once per
delivery it is about to make; the channel's acks give the credit back.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from pamqp import commands as C

from amqp_broker.core.errors import NotAllowed, NotFound, NotImplemented_, PreconditionFailed
from amqp_broker.queues import Consumer

from .reply_to import REPLY_TO

if TYPE_CHECKING:
    from .channel import Channel
    from .queue_runtime import QueueRuntime

__all__ = ["ConsumerState", "HANDLERS"]


class ConsumerState:
    """Per-consumer prefetch accounting (RabbitMQ's global=false qos)."""

    __slots__ = ("tag", "runtime", "consumer", "prefetch", "unacked", "no_ack")

    def __init__(self, tag: str, runtime: "QueueRuntime | None", prefetch: int, no_ack: bool):
        self.tag = tag
        self.runtime = runtime
        self.consumer: Consumer | None = None
        self.prefetch = prefetch
        self.unacked = 0
        self.no_ack = no_ack


def make_consumer_credit(ch: "Channel", st: ConsumerState):
    session = ch.session

    def take_credit() -> bool:
        # A client that does not drain its socket gets nothing more until it does: the queue
        # keeps the messages (session.output_full, back-pressure).
        if session.output_full():
            return False
        if st.no_ack:
            return True
        if st.prefetch and st.unacked >= st.prefetch:
            return False
        if ch.global_prefetch and ch.global_unacked >= ch.global_prefetch:
            return False
        st.unacked += 1
        ch.global_unacked += 1
        return True

    return take_credit


def make_keeping_up(ch: "Channel", st: ConsumerState):
    """`Consumer.keeping_up`: room in the consumer's prefetch window (and its channel's global
    one) and a client that reads what is written."""
    session = ch.session

    def keeping_up() -> bool:
        if session.client_lagging:
            return False
        if st.no_ack:
            return True
        if st.prefetch and st.unacked >= st.prefetch:
            return False
        return not (ch.global_prefetch and ch.global_unacked >= ch.global_prefetch)

    return keeping_up


def _qos(ch: "Channel", m: C.Basic.Qos) -> None:
    if m.prefetch_size:
        raise NotImplemented_(f"prefetch_size!=0 ({m.prefetch_size})")
    if m.global_:
        ch.global_prefetch = m.prefetch_count
    else:
        ch.prefetch = m.prefetch_count
    ch.reply(C.Basic.QosOk())
    ch.kick_consumers()


def _consume(ch: "Channel", m: C.Basic.Consume) -> None:
    tag = m.consumer_tag or _new_ctag(ch)
    if tag in ch.consumers:
        raise NotAllowed(f"attempt to reuse consumer tag '{tag}'")
    if m.queue == REPLY_TO:
        _consume_reply_to(ch, m, tag)
        return
    name = m.queue or _default_queue(ch)
    ch.access.basic_consume(name)
    rt = ch.vhost.get_queue(name, ch.session)
    if ch.global_prefetch and not rt.queue.supports_global_qos:
        raise NotImplemented_(
            f"queue '{rt.name}' in vhost '{ch.vhost.name}' does not support global qos")
    st = ConsumerState(tag, rt, 0 if m.no_ack else ch.prefetch, m.no_ack)
    args = dict(m.arguments or {})
    priority = args.get("x-priority", 0)
    consumer = Consumer(tag=tag, channel=ch, no_ack=m.no_ack, exclusive=m.exclusive,
                        priority=int(priority) if isinstance(priority, int) else 0,
                        arguments=args)
    consumer.take_credit = make_consumer_credit(ch, st)
    consumer.keeping_up = make_keeping_up(ch, st)
    st.consumer = consumer
    rt.add_consumer(consumer)  # raises AccessRefused for exclusivity conflicts
    ch.consumers[tag] = st
    if not m.nowait:
        ch.reply(C.Basic.ConsumeOk(consumer_tag=tag))
    rt.kick()


def _consume_reply_to(ch: "Channel", m: C.Basic.Consume, tag: str) -> None:
    if not m.no_ack:
        raise PreconditionFailed("reply consumer cannot acknowledge")
    ch.broker.reply_to.register(ch, tag)
    ch.consumers[tag] = ConsumerState(tag, None, 0, True)
    if not m.nowait:
        ch.reply(C.Basic.ConsumeOk(consumer_tag=tag))


def _new_ctag(ch: "Channel") -> str:
    return ch.broker.new_name("amq.ctag-")


def _default_queue(ch: "Channel") -> str:
    # An empty queue name means the channel's last declared queue (spec rule).
    name = ch.last_queue
    if not name:
        raise NotFound("no previously declared queue")
    return name


def _cancel(ch: "Channel", m: C.Basic.Cancel) -> None:
    st = ch.consumers.pop(m.consumer_tag, None)
    if st is not None:
        if st.runtime is not None:
            st.runtime.remove_consumer(ch, st.tag)
        else:
            ch.broker.reply_to.unregister(ch, st.tag)
    if not m.nowait:
        ch.reply(C.Basic.CancelOk(consumer_tag=m.consumer_tag))


def _get(ch: "Channel", m: C.Basic.Get) -> None:
    name = m.queue or _default_queue(ch)
    ch.access.basic_get(name)
    rt = ch.vhost.get_queue(name, ch.session)
    # Classic queues answer inside the call, quorum ones once the Dequeue command is applied;
    # the client waits for get-ok / get-empty either way.
    no_ack = m.no_ack
    rt.basic_get(ch, no_ack, lambda entry, count: _get_reply(ch, rt, no_ack, entry, count))


def _get_reply(ch: "Channel", rt: "QueueRuntime", no_ack: bool, entry, count: int) -> None:
    if ch.released:
        if entry is not None and not no_ack:
            rt.settle([entry.msg_id], "requeue")
        return
    if entry is None:
        ch.counters.messages_get_empty += 1
        rt.counters.get_empty += 1
        ch.reply(C.Basic.GetEmpty())
    else:
        tag = ch.next_tag
        ch.next_tag = tag + 1
        counters = ch.counters
        if not no_ack:
            ch.unacked[tag] = (rt, entry.msg_id, None, time.monotonic())
            counters.messages_got += 1
            rt.counters.get += 1
        else:
            counters.messages_got_no_ack += 1
            rt.counters.get_no_ack += 1
        msg = entry.message
        counters.messages_delivered += 1
        if entry.redelivered:
            counters.messages_redelivered += 1
            rt.counters.redeliver += 1
        ch.conn.send_get_ok(ch.number, tag, entry.redelivered, msg.exchange, msg.routing_key,
                            count, msg.properties, msg.body)
    ch.session.wake()


def _recover(ch: "Channel", m) -> None:
    if not m.requeue:
        raise NotImplemented_("requeue=false")
    ch.settle(ch.take(0, True, (60, 110)), "requeue")
    if isinstance(m, C.Basic.Recover):
        ch.reply(C.Basic.RecoverOk())


HANDLERS = {
    C.Basic.Qos: _qos,
    C.Basic.Consume: _consume,
    C.Basic.Cancel: _cancel,
    C.Basic.Get: _get,
    C.Basic.Recover: _recover,
    C.Basic.RecoverAsync: _recover,
}
