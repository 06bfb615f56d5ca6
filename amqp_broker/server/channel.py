"""Channel semantics: delivery tags, acks, qos/prefetch, consumers, publishing, confirms, tx.

One `Channel` per open AMQP channel, created and driven by `session.Session`: the session calls
`on_publish`, `on_ack`, `on_nack`, `on_method` for events on this channel and `release()` when the
channel (or connection) goes away. Errors are raised as `AMQPError`; the session turns soft ones
into channel.close and hard ones into connection.close. Exchange and queue methods are delegated
to `declares.py`; queues are reached through the vhost's `QueueRuntime` objects.

Hot path (publish, deliver, ack) uses no pamqp: the protocol layer's struct fast paths.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from pamqp import commands as C

from amqp_broker.core.erlterm import Atom, format_after
from amqp_broker.core.errors import (
    AMQPError,
    NotImplemented_,
    PreconditionFailed,
)
from amqp_broker.core.router import check_routing_headers
from amqp_broker.protocol.properties import (
    decode_properties,
    encode_properties,
    peek_expiration,
    peek_reply_to,
    peek_user_id,
)
from amqp_broker.queues import Consumer, Message

from . import consumers, declares
from .confirms import ConfirmTracker
from .consumers import ConsumerState
from .counters import Counters
from .reply_to import REPLY_TO

if TYPE_CHECKING:
    from .queue_runtime import QueueRuntime
    from .session import Session

__all__ = ["Channel"]

_PUBLISH = (60, 40)
_REPLY_TO_B = REPLY_TO.encode()


class Channel:
    """The server side of one AMQP channel."""

    def __init__(self, session: "Session", number: int) -> None:
        self.session = session
        self.number = number
        self.conn = session.conn
        self.broker = session.broker
        self.vhost = session.vhost
        self.counters = Counters()  # this channel's message counts (counters.py)
        # Shared with consumers.py (consume/get/qos/recover): tags, unacked, consumers, prefetch.
        self.next_tag = 1
        # delivery tag -> (runtime, msg_id, consumer state or None, delivered_at seconds)
        self.unacked: dict[int, tuple] = {}
        self.consumers: dict[str, ConsumerState] = {}
        self.prefetch = 0  # applies to consumers created afterwards (global=false)
        self.global_prefetch = 0  # shared by all consumers of the channel (global=true)
        self.global_unacked = 0
        self._confirms: ConfirmTracker | None = None
        self._tx: list | None = None
        self._released = False
        self.access = session.access  # permission checks (core.permissions.AccessChecker)
        self.last_queue = ""  # the channel's last declared queue (an empty name means it)

    # -- publish -------------------------------------------------------------------------------
    def on_publish(self, ev) -> None:
        self.session.has_published = True
        self.counters.messages_received += 1
        if self._tx is not None:
            self._check_publish(ev)
            self._tx.append(("publish", ev))
            return
        self._publish(ev)

    def _check_publish(self, ev) -> None:
        # (max_message_size is judged by the protocol layer on the content header)
        if ev.immediate:
            raise NotImplemented_("immediate=true").with_method(*_PUBLISH)

    def _publish(self, ev) -> None:
        self._check_publish(ev)
        props = ev.properties
        if _REPLY_TO_B in props:
            props = self._rewrite_reply_to(props)
        msg = Message.from_publish(ev.exchange, ev.routing_key, props, ev.body)
        if msg.expiration_ms is None and props and props[0] & 0x01:
            # expiration flag set but not a TTL the queue layer took
            text = peek_expiration(props)
            raise PreconditionFailed(format_after(
                f"invalid expiration '{text}': ", expiration_error(text))).with_method(*_PUBLISH)
        headers = msg.headers if msg.headers_offset >= 0 else None
        if headers and ("CC" in headers or "BCC" in headers):
            try:
                check_routing_headers(headers)
            except AMQPError as err:
                raise err.with_method(*_PUBLISH)
        if props and props[1] & 0x10:  # user_id flag: must match the authenticated user
            self._check_user_id(props)
        if headers and "BCC" in headers:
            msg = self._strip_bcc(msg)
        self.access.basic_publish(ev.exchange)
        vhost = self.vhost
        try:
            targets = vhost.route(ev.exchange, ev.routing_key, msg)
        except AMQPError as err:
            raise err.with_method(*_PUBLISH)
        confirms = self._confirms
        seq = confirms.next_seq() if confirms is not None else 0
        if not targets:
            if ev.exchange == "" and ev.routing_key.startswith(REPLY_TO + "."):
                if self.broker.reply_to.deliver(ev.routing_key, msg):
                    self.counters.messages_routed += 1
                    if seq:
                        confirms.decide_now(seq, True)
                    return
            if ev.mandatory:
                self.counters.messages_unroutable_returned += 1
                self.conn.send_return(self.number, 312, "NO_ROUTE", ev.exchange, ev.routing_key,
                                      ev.properties, ev.body)
            else:
                self.counters.messages_unroutable_dropped += 1
            if seq:
                confirms.decide_now(seq, True)
            return
        self.counters.messages_routed += 1
        now_ms = self.broker.now_ms
        confirm = None
        if seq:
            # Confirm once every target queue accepted it (some only after the journal fsync).
            confirms.wait_for(seq, len(targets))
            confirm = (confirms, seq)
        for rt in targets:
            if rt.publish(msg, now_ms, confirm):
                self.session.pause_for(rt.queue)

    def _check_user_id(self, props: bytes) -> None:
        user_id = peek_user_id(props)
        if user_id != self.session.user:
            raise PreconditionFailed(
                f"user_id property set to '{user_id}' but authenticated user was "
                f"'{self.session.user}'").with_method(*_PUBLISH)

    @staticmethod
    def _strip_bcc(msg: Message) -> Message:
        # BCC routes like CC but must not reach consumers; routing needs its keys, so the
        # stripped message keeps the original headers cached for the router.
        decoded = decode_properties(msg.properties)
        headers = dict(decoded.headers or {})
        routing_headers = dict(headers)
        headers.pop("BCC", None)
        decoded.headers = headers
        out = Message.from_publish(msg.exchange, msg.routing_key, encode_properties(decoded), msg.body)
        out.route_with_headers(routing_headers)
        return out

    def _rewrite_reply_to(self, props: bytes) -> bytes:
        # Direct reply-to: the requester's reply_to becomes its private reply name.
        if peek_reply_to(props) != REPLY_TO:
            return props
        name = self.broker.reply_to.name_for(self)
        if name is None:
            raise PreconditionFailed("fast reply consumer does not exist").with_method(*_PUBLISH)
        decoded = decode_properties(props)
        decoded.reply_to = name
        return encode_properties(decoded)

    # -- deliveries (called by QueueRuntime) ----------------------------------------------------
    def deliver(self, runtime: "QueueRuntime", consumer: Consumer, entry) -> None:
        """Send one basic.deliver for a message the queue handed to `consumer`."""
        tag = self.next_tag
        self.next_tag = tag + 1
        st = self.consumers.get(consumer.tag)
        counters = self.counters
        qc = runtime.counters
        if not consumer.no_ack:
            self.unacked[tag] = (runtime, entry.msg_id, st, time.monotonic())
            qc.deliver += 1
        else:
            counters.messages_delivered_no_ack += 1
            qc.deliver_no_ack += 1
        m = entry.message
        counters.messages_delivered += 1
        if entry.redelivered:
            counters.messages_redelivered += 1
            qc.redeliver += 1
        self.conn.send_deliver(self.number, consumer.tag, tag, entry.redelivered, m.exchange,
                               m.routing_key, m.properties, m.body)

    def room(self, tag: str) -> int:
        """How many more deliveries consumer `tag` may have unacknowledged now (a quorum
        queue's lookahead sends no more than this)."""
        st = self.consumers.get(tag)
        if st is None:
            return 0
        return st.prefetch - st.unacked if st.prefetch else 1 << 30

    def count_granted(self, tag: str, n: int) -> None:
        """`n` deliveries to consumer `tag` whose prefetch the queue enforced itself (quorum
        fifo, not `take_credit`): count them so the consumer's acks give back what they took."""
        st = self.consumers.get(tag)
        if st is not None and not st.no_ack:
            st.unacked += n
            self.global_unacked += n

    def deliver_direct(self, consumer_tag: str, msg: Message) -> None:
        """Direct reply-to: a no-ack delivery that never sat in a queue."""
        tag = self.next_tag
        self.next_tag = tag + 1
        self.counters.messages_delivered += 1
        self.counters.messages_delivered_no_ack += 1
        self.conn.send_deliver(self.number, consumer_tag, tag, False, msg.exchange,
                               msg.routing_key, msg.properties, msg.body)
        self.session.wake()

    def consumer_cancelled(self, tag: str) -> None:
        """The queue went away under a consumer (queue deleted): tell the client if it cares."""
        st = self.consumers.pop(tag, None)
        if st is None:
            return
        if self.session.capabilities.get("consumer_cancel_notify"):
            self.conn.send_method(self.number, C.Basic.Cancel(consumer_tag=tag, nowait=True))
            self.session.wake()

    # -- acks ----------------------------------------------------------------------------------
    def on_ack(self, tag: int, multiple: bool) -> None:
        if self._tx is not None:
            self._tx.append(("ack", tag, multiple))
            return
        self.settle(self.take(tag, multiple, (60, 80)), "ack")

    def on_acks(self, tags: list[int]) -> None:
        """Single acks, in order: settled together. At an unknown tag the ones before it
        still count, as they would one by one, and the channel error ends the rest."""
        if self._tx is not None:
            self._tx.extend(("ack", tag, False) for tag in tags)
            return
        recs = []
        try:
            for tag in tags:
                recs.append(self._take_one(tag, (60, 80)))
        finally:
            self.settle(recs, "ack")

    def on_nack(self, tag: int, multiple: bool, requeue: bool, method: tuple = (60, 120)) -> None:
        """basic.nack, or basic.reject with method=(60, 90): an unknown tag names the method
        the client sent, as RabbitMQ does."""
        if self._tx is not None:
            self._tx.append(("nack", tag, multiple, requeue, method))
            return
        self.settle(self.take(tag, multiple, method), "requeue" if requeue else "discard")

    def take(self, tag: int, multiple: bool, method: tuple[int, int]) -> list[tuple]:
        unacked = self.unacked
        if multiple:
            if tag == 0:
                taken = list(unacked.values())
                unacked.clear()
                return taken
            if tag not in unacked:
                # As RabbitMQ: multiple=true still needs the named tag to be outstanding.
                raise PreconditionFailed(f"unknown delivery tag {tag}").with_method(*method)
            taken = []
            for t in list(unacked):
                if t > tag:
                    break
                taken.append(unacked.pop(t))
            return taken
        return [self._take_one(tag, method)]

    def _take_one(self, tag: int, method: tuple[int, int]) -> tuple:
        rec = self.unacked.pop(tag, None)
        if rec is None:
            raise PreconditionFailed(f"unknown delivery tag {tag}").with_method(*method)
        return rec

    def settle(self, recs: list[tuple], how: str) -> None:
        if not recs:
            return
        if how == "ack":
            self.counters.messages_acknowledged += len(recs)
        if len(recs) == 1:  # the common single ack: no grouping by queue
            rt, msg_id, st, _ = recs[0]
            if st is not None:
                st.unacked -= 1
                self.global_unacked -= 1
            rt.settle([msg_id], how)
            self.kick_consumers()
            return
        by_queue: dict = {}
        for rt, msg_id, st, _ in recs:
            if st is not None:
                st.unacked -= 1
                self.global_unacked -= 1
            ids = by_queue.get(rt)
            if ids is None:
                by_queue[rt] = [msg_id]
            else:
                ids.append(msg_id)
        for rt, ids in by_queue.items():
            rt.settle(ids, how)
        # Credit came back: every queue this channel consumes from may deliver again.
        self.kick_consumers()

    def kick_consumers(self, include_no_ack: bool = False) -> None:
        for st in self.consumers.values():
            if st.runtime is not None and (include_no_ack or not st.no_ack):
                st.runtime.kick()

    # -- methods -------------------------------------------------------------------------------
    def on_method(self, method) -> None:
        try:
            handler = _ALL_HANDLERS.get(type(method))
            if handler is None:
                raise NotImplemented_(f"method {method.name} not supported")
            handler(self, method)
        except AMQPError as err:
            if not err.class_id:
                err.with_method(method.index >> 16, method.index & 0xFFFF)
            raise

    def reply(self, method) -> None:
        self.conn.send_method(self.number, method)

    def _confirm_select(self, m: C.Confirm.Select) -> None:
        if self._tx is not None:
            raise PreconditionFailed("cannot switch from tx to confirm mode")
        if self._confirms is None:
            self._confirms = ConfirmTracker(self._send_confirm, self._schedule_confirm_flush,
                                            self.counters)
        if not m.nowait:
            self.reply(C.Confirm.SelectOk())

    def _send_confirm(self, tag: int, multiple: bool, ack: bool) -> None:
        self.conn.send_confirm(self.number, tag, multiple, ack)

    def _schedule_confirm_flush(self) -> None:
        if not self._released:
            self.session.add_flush_hook(self.number, self._confirms.flush)

    def _tx_select(self, m) -> None:
        if self._confirms is not None:
            raise PreconditionFailed("cannot switch from confirm to tx mode")
        if self._tx is None:
            self._tx = []
        self.reply(C.Tx.SelectOk())

    def _tx_commit(self, m) -> None:
        if self._tx is None:
            raise PreconditionFailed("channel is not transactional")
        ops, self._tx = self._tx, []
        # The publishes go through a confirm-like barrier so that commit-ok also waits for
        # queues that accept later (quorum queues: Raft commit + fsync).
        barrier = self._confirms = _TxBarrier(self._tx_published)
        try:
            for op in ops:
                if op[0] == "publish":
                    self._publish(op[1])
                elif op[0] == "ack":
                    self.settle(self.take(op[1], op[2], (60, 80)), "ack")
                else:
                    self.settle(self.take(op[1], op[2], op[4]),
                                "requeue" if op[3] else "discard")
        finally:
            self._confirms = None  # tx mode excludes confirm mode
        barrier.seal()

    def _tx_published(self) -> None:
        journal = self.broker.journal
        if journal is not None and journal.appended_seq > journal.durable_seq:
            # commit-ok promises the persistent messages are on disk: wait for the fsync.
            journal.call_when_durable(journal.appended_seq, self._commit_ok)
        else:
            self._commit_ok()

    def _commit_ok(self) -> None:
        if not self._released:
            self.reply(C.Tx.CommitOk())
            self.session.wake()

    def _tx_rollback(self, m) -> None:
        if self._tx is None:
            raise PreconditionFailed("channel is not transactional")
        self._tx = []
        self.reply(C.Tx.RollbackOk())

    def _flow(self, m: C.Channel.Flow) -> None:
        if not m.active:
            raise NotImplemented_("active=false")
        self.reply(C.Channel.FlowOk(active=True))

    # -- introspection (management API) -------------------------------------------------------
    def statistics(self) -> dict:
        return {"number": self.number, "consumer_count": len(self.consumers),
                "messages_unacknowledged": len(self.unacked), "prefetch_count": self.prefetch,
                "global_prefetch_count": self.global_prefetch,
                "messages_uncommitted": len(self._tx) if self._tx is not None else 0,
                "confirm": self._confirms is not None, "transactional": self._tx is not None}

    @property
    def released(self) -> bool:
        return self._released

    # -- timers and teardown -------------------------------------------------------------------
    def check_consumer_timeout(self, now: float, timeout: float | None) -> None:
        """Raise 406 if an unacked delivery is older than its queue's consumer timeout
        (x-consumer-timeout / policy consumer-timeout in ms, the lower wins) or, for queues
        without one, the node's `timeout` (seconds; None: no node-wide limit).
        Called about once a second; O(unacked) with one settings lookup per queue."""
        limits: dict[int, float | None] = {}  # id(runtime) -> seconds
        for runtime, _msg_id, _st, at in self.unacked.values():
            key = id(runtime)
            if key in limits:
                limit = limits[key]
            else:
                queue_ms = runtime.queue.settings.consumer_timeout
                limit = limits[key] = timeout if queue_ms is None else queue_ms / 1000.0
            if limit is not None and now - at > limit:
                raise PreconditionFailed(
                    f"delivery acknowledgement on channel {self.number} timed out. Timeout value "
                    f"used: {int(limit * 1000)} ms. This timeout value can be configured, see "
                    "consumers doc guide to learn more"
                )

    def release(self) -> None:
        """The channel is gone: drop consumers and requeue unacked (redelivered). Pending
        publisher confirms are dropped with it (nobody is left to receive them)."""
        if self._released:
            return
        self._released = True
        # Closed channels' counts live on in their connection's, vhost's and node's totals.
        self.session.retired_counters.add(self.counters)
        if self.vhost is not None:
            self.vhost.retired_counters.add(self.counters)
        self.broker.counters.add(self.counters)
        for st in self.consumers.values():
            if st.runtime is not None:
                st.runtime.remove_consumer(self, st.tag)
            else:
                self.broker.reply_to.unregister(self, st.tag)
        self.consumers.clear()
        recs = list(self.unacked.values())
        self.unacked.clear()
        by_queue: dict = {}
        for rt, msg_id, _st, _ in recs:
            by_queue.setdefault(rt, []).append(msg_id)
        for rt, ids in by_queue.items():
            rt.settle(ids, "requeue")
            # Queue types that track channels (quorum: basic.get without a consumer) let go.
            rt.channel_closed(self)


_HANDLERS = {
    C.Confirm.Select: Channel._confirm_select,
    C.Tx.Select: Channel._tx_select,
    C.Tx.Commit: Channel._tx_commit,
    C.Tx.Rollback: Channel._tx_rollback,
    C.Channel.Flow: Channel._flow,
}
_ALL_HANDLERS = {**_HANDLERS, **consumers.HANDLERS, **declares.HANDLERS}


class _TxBarrier:
    """tx.commit's stand-in for the confirm tracker while it publishes: counts the target
    queues' accepts (`QueueRuntime.publish` settles it like a confirm) and calls `done` once
    every one came and `seal` was called. A refusal (reject-publish) counts as settled."""

    __slots__ = ("_done", "_seq", "_open", "_sealed")

    def __init__(self, done) -> None:
        self._done = done
        self._seq = 0
        self._open = 0
        self._sealed = False

    def next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def wait_for(self, seq: int, n: int) -> None:
        self._open += n

    def decide_now(self, seq: int, ok: bool) -> None:
        pass

    def settle(self, seq: int, ok: bool) -> None:
        self._open -= 1
        self._check()

    def seal(self) -> None:
        self._sealed = True
        self._check()

    def _check(self) -> None:
        if self._sealed and self._open <= 0 and self._done is not None:
            done, self._done = self._done, None
            done()


def expiration_error(text: str | None) -> object:
    """Why RabbitMQ refuses an expiration string (rabbit_basic:parse_expiration, whose
    string:to_integer takes an optional sign and leading digits), as the Erlang term its
    error text prints: no_integer, {leftover_string,Rest}, {value_negative,N} or
    {value_too_large,N} (over ten years in ms). Called only
    for strings the queue layer did not take as plain digits."""
    text = text or ""
    sign = 1 if text[:1] != "-" else -1
    body = text[1:] if text[:1] in "+-" and text else text
    digits = len(body) - len(body.lstrip("0123456789"))
    if digits == 0:
        return Atom("no_integer")
    if digits < len(body):
        return (Atom("leftover_string"), body[digits:])
    value = sign * int(body)
    if value < 0:
        return (Atom("value_negative"), value)
    return (Atom("value_too_large"), value)  # the queue layer takes every other value

