"""Runs the effects of a quorum queue's state machine on the broker (leader side, one node).

Built by `quorum.QuorumQueue`, whose `run` it hands to the node's Raft driver as `on_effects`:
called after each batch of applied entries, in the driver's trio task, with the effects of that
batch in order. `EffectRunner.run` hands deliveries to channels, answers publisher confirms,
collects at-most-once dead letters (`take_dead_letters`, read by the queue for the broker's
dead-letter routing) or hands at-least-once ones back to the queue for its DLX worker, keeps
the fifo's next timer (`timer_at`), turns monitors of processes that died with an earlier run
into ConsumerDown, and expires the queue. It ends with the queue's `after_effects` so dead
letters and other queues touched by them are processed at once.

It knows the queue only through `EffectHost` (below): the queue layer's arrow points one way,
quorum.py -> quorum_effects.py. Channels are the server's, used duck-typed: `released`,
`deliver`, `count_granted`, `room`, `session.wake`. A consumer alone on the queue gets more
than its prefetch from the fifo; the runner holds the rest in its `Lookahead` (lookahead.py)
and sends it as acks make room (`release`). Deliveries to a connection whose output is full
wait there too, and go out when its writer has drained and kicks the queue (`release_blocked`).

Effects of entries replayed at start-up (before the group is ready) are not run: they were
run before the restart, and running them again would duplicate deliveries and dead letters.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterable, Protocol, Sequence

from amqp_broker.core.fieldtypes import Long
from amqp_broker.protocol.properties import decode_properties, encode_properties
from quorum import fifo

from .base import Consumer, DeadLetter
from .lookahead import Lookahead
from .message import Entry, Message
from .quorum_machine import DeadLettered

__all__ = ["EffectHost", "EffectRunner", "delivery_entry"]

_log = logging.getLogger(__name__)
# Deliveries stop while a connection has this much output unsent, and go on when its writer
# has drained and kicks the queue. Larger than the classic queues' (server/session.py's
# OUTPUT_BOUND, 4 MiB): a refill reads the bodies back from the log, and the quorum 64 KiB
# end-to-end bench (prefetch 500: 32 MiB) lost a quarter of its rate at 1 MiB, a fifth at 4 MiB
# and up to a tenth at 16 MiB, in runs whose noise is about a tenth.
_OUTPUT_BOUND = 32 * 1024 * 1024
# Bodies read and written per step of a delivery; the bound is checked between steps.
_SEND_CHUNK_BYTES = 256 * 1024


class EffectHost(Protocol):
    """What the effect runner needs from its quorum queue (`QuorumQueue` implements it)."""

    name: str
    counts_deliveries: bool  # deliveries carry x-delivery-count (not a mirrored classic queue)

    def accepts_effects(self, force: bool) -> bool:
        """False once deleted, or before the group is ready unless `force`."""
        ...

    def read_bodies(self, indexes: list[int]) -> list[Message | None]:
        """The bodies of live messages by log index (read cache, else the log), being
        delivered."""
        ...

    def queue_runtime(self) -> Any | None:
        """The server's runtime of this queue (passed to `channel.deliver`), None if gone."""
        ...

    def live_channel(self, pid: str) -> Any | None:
        """The channel behind consumer pid `pid`, None if it is gone or released."""
        ...

    def local_consumer(self, key: fifo.ConsumerKey) -> Consumer | None:
        """The consumer `key` if it is still subscribed here."""
        ...

    def checked_out(self, key: fifo.ConsumerKey) -> dict | None:
        """The msg ids the applied state has checked out to `key` now (None: no such
        consumer any more)."""
        ...

    def consumers_in_state(self) -> int:
        """How many consumers the applied state has (waiting ones too), on every node."""
        ...

    def behind(self) -> bool:
        """Is this replica catching up with entries the leader committed a while ago?"""
        ...

    def propose(self, cmd: Any) -> None:
        """Propose a fifo command to the queue's Raft group."""
        ...

    def answer_confirms(self, publisher: str, seqs: Sequence[int], ok: bool) -> None:
        """Answer the publisher confirms (`ok`) or nacks of the queue's own enqueues."""
        ...

    def hold_dead_letters(self, reason: str, held: list[tuple[int, Message]]) -> None:
        """At-least-once: (dlx id, message) pairs now held for the DLX worker."""
        ...

    def after_effects(self, touched: bool) -> None:
        """The batch ran; `touched`: the timer or dead letters changed (a dispatch pass is due)."""
        ...

    def expire_now(self) -> None:
        """The fifo expired the queue (x-expires): delete it."""
        ...


def with_delivery_count(msg: Message, count: int) -> Message:
    """The message with header x-delivery-count = count (redeliveries only; slow path)."""
    props = decode_properties(msg.properties)
    headers = dict(props.headers or {})
    headers["x-delivery-count"] = Long(count)  # RabbitMQ sends a long ('l'), not the smallest int
    props.headers = headers
    return Message.from_publish(msg.exchange, msg.routing_key, encode_properties(props), msg.body)


def delivery_entry(key: fifo.ConsumerKey, d: fifo.Delivery, msg: Message,
                   counted: bool = True) -> Entry:
    """What the channel sends: msg_id (key, fifo msg id), redelivered, and x-delivery-count
    (`counted`: not on a mirrored classic queue, whose clients never see that header)."""
    if d.acquired and counted:
        msg = with_delivery_count(msg, d.acquired)
    return Entry((key, d.msg_id), msg, None, d.acquired > 0, d.acquired)


class EffectRunner:
    """Runs effect batches for one queue (`run`); owns the fifo's timer and at-most-once dead
    letters until the queue reads them."""

    def __init__(self, host: EffectHost, node: str, is_current_pid: Callable[[str], bool],
                 replica_nodes: tuple[str, ...] = (), pid_prefix: str = "") -> None:
        self.host = host
        self.node = node
        self.is_current_pid = is_current_pid  # False: a process of an earlier run of the node
        self.replicas = replica_nodes or (node,)  # every node with a replica of the queue
        self.pid_prefix = pid_prefix  # this node's process ids start so
        self.timer_at: int | None = None      # the fifo's next SetTimer deadline
        self._dead_letters: list[DeadLetter] = []
        self._downed: set[str] = set()  # old pids already sent ConsumerDown (str: never iterated)
        # the highest fifo msg id handed to each local consumer: a consumer's ids increase, so
        # a Deliver at or below it is a resend (a snapshot installed here repeats the deliveries
        # it covers) of what the channel already has
        self._delivered: dict[fifo.ConsumerKey, int] = {}
        # deliveries held while the replica catches up: a later entry may take them back
        # (NodeDown, ConsumerDown); run, against the state, once it has caught up
        self._held: list[fifo.Deliver] = []
        # Back-pressure on no-ack consumers (server/session.py output_full): deliveries written
        # to a connection whose output is full are not settled until it drains, and the
        # consumer is re-checked-out with a window of 1, so the fifo hands it nothing more (the
        # messages stay ready in the queue); `release_settles` settles them and restores the
        # unlimited window once the connection has drained.
        self._unsettled: dict[fifo.ConsumerKey, list[int]] = {}
        self._throttled: set[fifo.ConsumerKey] = set()
        self.lookahead = Lookahead()
        # consumers with deliveries held because their connection's output was full
        self._blocked: set[fifo.ConsumerKey] = set()

    @property
    def blocked(self) -> bool:
        return bool(self._blocked)

    def new_consumer(self, key: fifo.ConsumerKey) -> None:
        """`key` checks out afresh (its fifo msg ids start again from 0; what it held is
        no longer its own)."""
        self._delivered.pop(key, None)
        self.lookahead.end(key)

    def release(self, key: fifo.ConsumerKey) -> None:
        """An ack, reject or requeue of `key`'s made room at its channel, or its connection's
        output drained: send what is held for it, as far as both allow, now."""
        if not self.lookahead.holds(key):
            return
        host = self.host
        channel = host.live_channel(key.pid)
        consumer = host.local_consumer(key)
        rt = host.queue_runtime()
        if channel is not None and consumer is not None and rt is not None \
                and self._send_held(channel, consumer, key, rt, None):
            channel.session.wake()

    def release_blocked(self) -> None:
        """The queue was kicked (a connection drained): send what a full output held back."""
        blocked, self._blocked = self._blocked, set()
        for key in blocked:
            self.release(key)

    def _send_held(self, channel: Any, consumer: Consumer, key: fifo.ConsumerKey,
                   rt: Any, batch: "_Batch | None") -> int:
        held = self.lookahead.take(key, channel.room(key.tag), self.host.checked_out(key))
        if not held:
            return 0
        sent, rest = self._send(channel, consumer, key, rt, held, batch)
        if rest:
            self.lookahead.hold_first(key, rest)
        return sent

    def _send(self, channel: Any, consumer: Consumer, key: fifo.ConsumerKey, rt: Any,
              msgs: list | tuple, batch: "_Batch | None") -> tuple[int, list | tuple]:
        """Deliver `msgs` in order, a chunk of bodies at a time, while the connection's output
        is below its bound (a consumer subscribing to a deep queue is checked out its whole
        window at once); returns how many went and the rest, to hold until the writer has
        drained and kicks the queue (output_full marks the session for that kick)."""
        session = channel.session
        no_ack = consumer.no_ack
        sent = start = 0
        n = len(msgs)
        while start < n:
            if session.output_full(_OUTPUT_BOUND):
                self._blocked.add(key)
                break
            end, budget = start + 1, _SEND_CHUNK_BYTES - msgs[start].size
            while end < n and budget > 0:
                budget -= msgs[end].size
                end += 1
            chunk = msgs[start:end] if start or end < n else msgs
            start = end
            for entry in self._entries(key, chunk):
                channel.deliver(rt, consumer, entry)
                sent += 1
            if no_ack:
                self._settle_sent(key, consumer, chunk, session, batch)
        if sent and not no_ack:
            # the fifo enforces prefetch; keep the channel's counters in step with its acks
            channel.count_granted(key.tag, sent)
        return sent, msgs[start:] if start < n else ()

    def _settle_sent(self, key: fifo.ConsumerKey, consumer: Consumer, chunk: list | tuple,
                     session: Any, batch: "_Batch | None") -> None:
        """No-ack deliveries written: settle them, unless the connection's output is full
        (then hold the settle and give the consumer a window of 1 until it drains)."""
        if session.output_full():
            self._unsettled.setdefault(key, []).extend(d.msg_id for d in chunk)
            if key not in self._throttled:
                self._throttled.add(key)
                self.host.propose(fifo.Checkout(key, 1, consumer.priority))
        elif batch is not None:
            batch.settle(key, chunk)
        else:
            self.host.propose(fifo.Settle(key, tuple(d.msg_id for d in chunk)))

    def _end_lookaheads(self) -> None:
        """Another consumer has come: nobody holds messages beyond their prefetch any more.
        Each consumer gives back what it held, then checks out with its prefetch again."""
        host = self.host
        for key in self.lookahead.keys():
            prefetch = self.lookahead.prefetch(key)
            ids = self.lookahead.end(key)
            consumer = host.local_consumer(key)
            if consumer is None:
                continue
            if ids:
                host.propose(fifo.Unsent(key, ids))
            host.propose(fifo.Checkout(key, prefetch, consumer.priority))

    @property
    def holding(self) -> bool:
        return bool(self._held)

    def release_settles(self, gone: Iterable[fifo.ConsumerKey] = ()) -> None:
        """Settle the no-ack deliveries held back while their connection's output was full, for
        every connection that has drained, and give those consumers their window back. The
        consumers in `gone` (being cancelled, or their channel closed) are settled at once,
        before their Cancel / ConsumerDown, so that what was sent is not given back and sent
        again."""
        host = self.host
        for key in gone:
            self._throttled.discard(key)
            ids = self._unsettled.pop(key, None)
            if ids:
                host.propose(fifo.Settle(key, tuple(ids)))
        for key in list(self._unsettled):
            channel = host.live_channel(key.pid)
            if channel is None or not channel.session.output_full():
                host.propose(fifo.Settle(key, tuple(self._unsettled.pop(key))))
                self._throttled.discard(key)
                consumer = host.local_consumer(key)
                if consumer is not None:
                    host.propose(fifo.Checkout(key, 0, consumer.priority))

    def take_dead_letters(self) -> list[DeadLetter]:
        """At-most-once dead letters collected since the last call."""
        out, self._dead_letters = self._dead_letters, []
        return out

    def run(self, group: str, effects: list, force: bool = False) -> None:
        host = self.host
        if not host.accepts_effects(force):
            return
        try:
            self._run(effects)
        except Exception:  # an effect must never take the node's Raft driver down
            _log.exception("quorum queue %r: effect failed", host.name)

    def _run(self, effects: list) -> None:
        host = self.host
        node = self.node
        touched = False
        batch = _Batch(host.queue_runtime())
        behind = host.behind()
        if self._held and not behind:
            held, self._held = self._held, []
            for eff in held:
                self._deliver(eff, batch)
        # Each Enqueue that finds a consumer with credit makes a Deliver of one message, and
        # each tracked one a Confirm of one: gathered per consumer and per publisher, in
        # order, and run once each after the loop, they cost one pass through the channel and
        # the lookahead instead of one per message.
        delivers: dict[fifo.ConsumerKey, list] = {}
        confirms: dict[str, list] = {}
        for eff in effects:
            t = type(eff)
            if t is fifo.Deliver:
                if fifo.should_run(eff, node, True, self.replicas):
                    if behind:
                        self._held.append(eff)
                    else:
                        msgs = delivers.get(eff.consumer)
                        if msgs is None:
                            delivers[eff.consumer] = list(eff.msgs)
                        else:
                            msgs.extend(eff.msgs)
            elif t is fifo.Confirm:
                seqs = confirms.get(eff.publisher)
                if seqs is None:
                    confirms[eff.publisher] = list(eff.seqs)
                else:
                    seqs.extend(eff.seqs)
            elif t is fifo.RejectPublish:
                host.answer_confirms(eff.publisher, eff.seqs, False)
            elif t is DeadLettered:
                self._dead_letter(eff)
                touched = True
            elif t is fifo.SetTimer:
                self.timer_at = eff.at_ms
                touched = True
            elif t is fifo.Monitor:
                self._monitor(eff)
            elif t is fifo.QueueExpired:
                self._gathered(delivers, confirms, batch)
                batch.finish(host)
                host.expire_now()
                return
        self._gathered(delivers, confirms, batch)
        if self.lookahead.active and host.consumers_in_state() > 1:
            self._end_lookaheads()
        batch.finish(host)
        host.after_effects(touched)

    def _gathered(self, delivers: dict, confirms: dict, batch: "_Batch") -> None:
        for key, msgs in delivers.items():
            self._deliver(fifo.Deliver(key, tuple(msgs)), batch)
        for publisher, seqs in confirms.items():
            self.host.answer_confirms(publisher, seqs, True)

    def _deliver(self, eff: fifo.Deliver, batch: "_Batch") -> None:
        host = self.host
        key = eff.consumer
        channel = host.live_channel(key.pid)
        if channel is None:
            # the channel is gone. If it cancelled this consumer before closing, nothing told
            # the queue it went (it held no delivery of ours yet): say so now, which returns
            # these (and anything else it held) to the queue
            pid = key.pid
            if self.is_current_pid(pid) and pid not in self._downed:
                self._downed.add(pid)
                host.propose(fifo.ConsumerDown(pid))
            return
        consumer = host.local_consumer(key)
        if consumer is None:
            # cancelled meanwhile on a live channel: give them back
            host.propose(fifo.Return(key, tuple(d.msg_id for d in eff.msgs)))
            return
        rt = batch.rt
        if rt is None:
            return
        msgs = eff.msgs
        last = self._delivered.get(key, -1)
        if msgs[0].msg_id <= last:
            msgs = tuple(d for d in msgs if d.msg_id > last)
            if not msgs:
                return
        # effects run after their whole batch applied: a replica catching up may apply a
        # later entry that took these back (NodeDown, ConsumerDown, a settle) in the same
        # batch; only what is still checked out to the consumer goes to it
        held = host.checked_out(key)
        if held is None:
            return
        if len(held) < len(msgs) or any(d.msg_id not in held for d in msgs):
            msgs = tuple(d for d in msgs if d.msg_id in held)
            if not msgs:
                return
        self._delivered[key] = msgs[-1].msg_id
        if self.lookahead.prefetch(key) is not None or self.lookahead.holds(key):
            # beyond the prefetch (sent as acks make room), or behind what a full output
            # holds back: in order, after what is held already
            self.lookahead.hold(key, msgs)
            self._send_held(channel, consumer, key, rt, batch)
        else:
            _sent, rest = self._send(channel, consumer, key, rt, msgs, batch)
            if rest:
                self.lookahead.hold(key, rest)
        batch.sessions[channel.session] = None

    def _entries(self, key: fifo.ConsumerKey, msgs: tuple) -> Iterable[Entry]:
        host = self.host
        for d, msg in zip(msgs, host.read_bodies([d.index for d in msgs])):
            if msg is None:
                # only a delivery re-run for a snapshot received from the leader, of a
                # message later entries settle (its entry is compacted away)
                _log.debug("quorum queue %r: no body for index %d", host.name, d.index)
                continue
            yield delivery_entry(key, d, msg, host.counts_deliveries)

    def _dead_letter(self, eff: DeadLettered) -> None:
        dl = eff.effect
        if dl.at_least_once:
            # held in the replicated state until the DLX worker (dlx/worker.py) settles them
            held = [(m.dlx_id, msg) for m, msg in zip(dl.msgs, eff.messages)
                    if msg is not None and m.dlx_id is not None]
            self.host.hold_dead_letters(dl.reason, held)
            return
        name = self.host.name
        for m, msg in zip(dl.msgs, eff.messages):
            if msg is not None:
                self._dead_letters.append(DeadLetter(msg, dl.reason, name, m.acquired > 0))

    def _monitor(self, eff: fifo.Monitor) -> None:
        pid = eff.pid
        if pid is None or not pid.startswith(self.pid_prefix) or self.is_current_pid(pid) \
                or pid in self._downed:
            return  # other nodes' processes: their links are watched (`QuorumQueue.node_changed`)
        # a process of an earlier run of this node: it is dead
        self._downed.add(pid)
        self.host.propose(fifo.ConsumerDown(pid))


class _Batch:
    """What one `EffectRunner.run` shares between deliveries: the queue runtime, sessions to
    wake once, and no-ack deliveries to settle with one command per consumer."""

    __slots__ = ("rt", "sessions", "settles")

    def __init__(self, rt: Any) -> None:
        self.rt = rt
        self.sessions: dict = {}
        self.settles: dict = {}

    def settle(self, key: fifo.ConsumerKey, msgs: tuple) -> None:
        ids = self.settles.setdefault(key, [])
        ids.extend(d.msg_id for d in msgs)

    def finish(self, host: EffectHost) -> None:
        for key, ids in self.settles.items():
            host.propose(fifo.Settle(key, tuple(ids)))
        for session in self.sessions:
            session.wake()
