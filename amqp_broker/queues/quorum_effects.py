"""Runs the effects of a quorum queue's state machine on the broker (leader side, one node).

Called by the node's Raft driver (`on_effects`) after each batch of applied entries, in the
driver's trio task, with the effects of that batch in order. `EffectRunner.run` hands
deliveries to channels, answers publisher confirms, collects dead letters for the broker's
dead-letter routing (at-most-once) or hands held ones to the queue's DLX worker
(at-least-once), re-arms the queue's timer, turns monitors of processes that died with an
earlier run into ConsumerDown, and deletes an expired queue. It ends with
`broker.run_pending()` so dead letters and other queues touched by them are processed at once.

Effects of entries replayed at start-up (before the group is ready) are not run: they were
run before the restart, and running them again would duplicate deliveries and dead letters.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from amqp_broker.core.fieldtypes import Long
from amqp_broker.protocol.properties import decode_properties, encode_properties
from quorum import fifo

from .base import DeadLetter
from .message import Entry, Message
from .quorum_machine import DeadLettered

if TYPE_CHECKING:
    from .quorum import QuorumQueue

__all__ = ["EffectRunner", "delivery_entry"]

_log = logging.getLogger(__name__)


def with_delivery_count(msg: Message, count: int) -> Message:
    """The message with header x-delivery-count = count (redeliveries only; slow path)."""
    props = decode_properties(msg.properties)
    headers = dict(props.headers or {})
    headers["x-delivery-count"] = Long(count)  # RabbitMQ sends a long ('l'), not the smallest int
    props.headers = headers
    return Message.from_publish(msg.exchange, msg.routing_key, encode_properties(props), msg.body)


def delivery_entry(key: fifo.ConsumerKey, d: fifo.Delivery, msg: Message) -> Entry:
    """What the channel sends: msg_id (key, fifo msg id), redelivered, x-delivery-count."""
    if d.acquired:
        msg = with_delivery_count(msg, d.acquired)
    return Entry((key, d.msg_id), msg, 0, None, d.acquired > 0, d.acquired)


class EffectRunner:
    def __init__(self, queue: "QuorumQueue") -> None:
        self.q = queue
        self._downed: set[str] = set()  # old pids already sent ConsumerDown (str: never iterated)

    def run(self, group: str, effects: list, force: bool = False) -> None:
        q = self.q
        if q.deleted or not (q.ready or force):
            return
        try:
            self._run(effects)
        except Exception:  # an effect must never take the node's Raft driver down
            _log.exception("quorum queue %r: effect failed", q.name)

    def _run(self, effects: list) -> None:
        q = self.q
        node = q.node
        touched = False
        batch = _Batch(q.queue_runtime(), q.state.bodies)
        for eff in effects:
            t = type(eff)
            if t is fifo.Deliver:
                if fifo.should_run(eff, node, True, (node,)):
                    self._deliver(eff, batch)
            elif t is fifo.Confirm:
                self._confirm(eff.publisher, eff.seqs, True)
            elif t is fifo.RejectPublish:
                self._confirm(eff.publisher, eff.seqs, False)
            elif t is DeadLettered:
                self._dead_letter(eff)
                touched = True
            elif t is fifo.SetTimer:
                q.timer_at = eff.at_ms
                touched = True
            elif t is fifo.Monitor:
                self._monitor(eff)
            elif t is fifo.QueueExpired:
                batch.finish(q)
                self._expired()
                return
        batch.finish(q)
        rt = batch.rt
        if rt is not None:
            if touched:
                rt._mark()
            q.broker.run_pending()

    def _confirm(self, publisher: str, seqs: tuple, ok: bool) -> None:
        q = self.q
        if publisher != q.publisher:
            return
        confirms = q.confirms
        for s in seqs:
            cb = confirms.pop(s, None)
            if cb is not None:
                cb(ok)

    def _deliver(self, eff: fifo.Deliver, batch: "_Batch") -> None:
        q = self.q
        key = eff.consumer
        channel = q.pids.get(key.pid)
        if channel is None or channel._released:
            return  # the channel is gone; its ConsumerDown returns these
        consumer = q.consumers.get(key)
        if consumer is None:
            # cancelled meanwhile on a live channel: give them back
            q.propose(fifo.Return(key, tuple(d.msg_id for d in eff.msgs)))
            return
        rt = batch.rt
        if rt is None:
            return
        bodies = batch.bodies
        st = channel.consumers.get(key.tag)
        no_ack = consumer.no_ack
        for d in eff.msgs:
            msg = bodies.get(d.index)
            if msg is None:
                _log.warning("quorum queue %r: no body for index %d", q.name, d.index)
                continue
            if not no_ack and st is not None:
                # the fifo enforces prefetch; keep the channel's counters in step with its acks
                st.unacked += 1
                channel.global_unacked += 1
            channel.deliver(rt, consumer, delivery_entry(key, d, msg))
        if no_ack:
            batch.settle(key, eff.msgs)
        batch.sessions[channel.session] = None

    def _dead_letter(self, eff: DeadLettered) -> None:
        q = self.q
        dl = eff.effect
        if dl.at_least_once:
            # held in the replicated state until the DLX worker (dlx/worker.py) settles them
            worker = q.dlx_worker()
            n = 0
            for m, msg in zip(dl.msgs, eff.messages):
                if msg is not None and m.dlx_id is not None:
                    worker.add(m.dlx_id, dl.reason, msg)
                    n += 1
            if n:  # counted once, here on the leader, as rabbit_fifo's dead-letter effect does
                q.broker.count_dead_lettered(dl.reason, "rabbit_quorum_queue", "at_least_once", n)
            worker.pump()
            return
        for m, msg in zip(dl.msgs, eff.messages):
            if msg is not None:
                q.dead_letters.append(DeadLetter(msg, dl.reason, q.name, m.acquired > 0))

    def _monitor(self, eff: fifo.Monitor) -> None:
        pid = eff.pid
        q = self.q
        if pid is None or q.runtime.is_current(pid) or pid in self._downed:
            return
        # a process of an earlier run of this node: it is dead
        self._downed.add(pid)
        q.propose(fifo.ConsumerDown(pid))

    def _expired(self) -> None:
        q = self.q
        rt = q.queue_runtime()
        if rt is not None:
            _log.info("quorum queue %r in vhost %r expired", q.name, q.vhost)
            rt.vhost.delete_queue_now(rt)
            q.broker.run_pending()


class _Batch:
    """What one `EffectRunner.run` shares between deliveries: the queue runtime, the bodies,
    sessions to wake once, and no-ack deliveries to settle with one command per consumer."""

    __slots__ = ("rt", "bodies", "sessions", "settles")

    def __init__(self, rt: Any, bodies: dict) -> None:
        self.rt = rt
        self.bodies = bodies
        self.sessions: dict = {}
        self.settles: dict = {}

    def settle(self, key: fifo.ConsumerKey, msgs: tuple) -> None:
        ids = self.settles.setdefault(key, [])
        ids.extend(d.msg_id for d in msgs)

    def finish(self, q: "QuorumQueue") -> None:
        for key, ids in self.settles.items():
            q.propose(fifo.Settle(key, tuple(ids)))
        for session in self.sessions:
            session.wake()
