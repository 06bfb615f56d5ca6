"""The quorum queue type: the broker's `QueueType` on top of a Raft group running `quorum.fifo`.

Registered for x-queue-type=quorum by `amqp_broker.cluster.install_quorum`; the server's
`QueueRuntime`, channels, admin and mgmt drive it only through `queues.base.QueueType`, as any
queue. What completes later: a confirmed publish settles its `Confirm` when the Enqueue is
committed and applied (a `Confirm` effect); `basic_get` replies when its Dequeue applies;
deliveries arrive as Deliver effects (so `dispatch` returns nothing); x-expires reaches the
runtime through `QueueRuntime.expired`. The at-least-once dead-letter worker comes from a
factory passed in from above (`server.dlx_port.start_dlx_worker`): this layer does not import
the server. Every change is a fifo command proposed to the queue's
Raft group through the node's `QuorumRuntime` (one shared WAL, group commit); nothing here
changes queue state directly. What comes back:
- replies of proposals that need one (basic.get -> Dequeue, Tick) through callbacks;
- effects (`quorum_effects.py`, through the `EffectHost` methods below): deliveries, publisher
  confirms/nacks, dead letters, timers, monitors of dead processes, queue expiry.

Identities: a consumer is ConsumerKey(tag, pid of its channel, node); the queue publishes on
behalf of all channels as one fifo publisher with its own sequence (the channel's confirm
tracker keeps the client's numbering), so a confirm is a fifo `Confirm` effect. A delivery's
msg_id, as the channel stores it, is `(ConsumerKey, fifo msg id)`.

Synchronous answers the channel needs at once (purge and delete counts) are read from the
applied state plus the enqueues still in flight.

In a cluster every node hosts a replica of every quorum queue: the `members` (voters, placed by
x-queue-leader-locator) and, on the other nodes, a non-voting learner, so that clients on any
node publish, consume and get from their own node's copy (seed 003: deliveries run on the
consumer's node only). Commands go to the leader through the driver (`runtime.propose` works
on any replica). A command whose outcome became unknown (its leader died) is sent again:
confirmed enqueues are kept until their confirm and resent in order when the leader changes
(the fifo drops duplicates by publisher sequence); settles, returns, checkouts and the other
idempotent commands are resent when their callback reports the loss. The leader proposes
NodeDown / NodeUp as links to other nodes drop and return; a node that restarts takes down the
processes of its previous run itself (`_on_ready`).
"""

from __future__ import annotations

import logging
import weakref
from typing import Any, Callable, Iterable, Sequence

from amqp_broker.core.errors import AccessRefused, vhost_resource
from amqp_broker.core.policies import resolve_queue_settings
from quorum import fifo
from quorum.fifo import encode_command
from quorum.raft import RaftError

from .arguments import OVERFLOW_REJECT_PUBLISH_DLX, parse_queue_arguments
from .base import (REASON_REJECTED, Confirm, Consumer, DeadLetter, GetReply, Placement,
                   Recovered, queue_key)
from .message import Entry, Message
from .quorum_config import quorum_config, warn_dead_letter_strategy
from .quorum_effects import EffectRunner, delivery_entry
from .quorum_machine import QuorumMachine, encode_payload, payload_pieces

__all__ = ["QuorumQueue", "PEEK"]

_log = logging.getLogger(__name__)

# The "consumer" of the management get's msg ids: looked at, not taken (see `get`).
PEEK = fifo.ConsumerKey("", "management-get", "")
_JOIN_BELOW = 4096  # bodies from this size on go into an Enqueue's encoding in one copy
SETTLE_DELAY_MS = 5  # the longest a low-rate ack waits to share a publish's WAL write
# Publisher flow, as RabbitMQ's channels past their quorum-commands soft limit: once more
# Enqueues proposed on this node than this are not yet applied, the queue asks its publishers
# to stop reading (`flow`) until half as many are left (`when_flow_ends`). Without it a
# publisher outpaces the consumers of a busy queue and its backlog grows for the whole run
# (RabbitMQ's stays flat). Per queue, not per channel as RabbitMQ's 32: ours are applied in
# driver passes of hundreds of entries. Checked every FLOW_CHECK_EVERY publishes.
FLOW_PENDING = 800
FLOW_CHECK_EVERY = 64
# The longest a publisher waits for the flow to end (`QueueType.flow_wait`): the count is this
# node's view, which a lost leader can leave too high.
FLOW_WAIT = 1.0

# Commands that may be applied twice without harm: resent when their outcome is unknown.
_RESENDABLE = (fifo.Settle, fifo.Return, fifo.Discard, fifo.Checkout, fifo.Cancel,
               fifo.ConsumerDown, fifo.DlxSettle, fifo.UpdateConfig, fifo.NodeDown, fifo.NodeUp,
               fifo.Unsent)


class QuorumQueue:
    durable = True
    auto_delete = False
    exclusive = False
    flow = False  # see FLOW_PENDING
    flow_wait = FLOW_WAIT
    queue_type = "quorum"
    supports_global_qos = False  # RabbitMQ refuses consumers under basic.qos global=true
    supports_conditional_delete = False  # nor queue.delete with if-unused / if-empty (3.10-4.2)

    def __init__(self, runtime: Any, broker: Any, name: str, vhost: str, *,
                 arguments: dict, now_ms: int,
                 dlx_worker_factory: Callable[["QuorumQueue"], Any],
                 group: str | None = None, members: tuple[str, ...] | None = None,
                 mirrored: bool = False) -> None:
        self.name = name
        # a mirrored classic queue (an ha-mode policy): this replicated engine with classic
        # queue semantics where clients see them (type, no delivery limit or header)
        self.mirrored = mirrored
        # a mirrored classic queue keeps classic semantics: queue.delete if-unused / if-empty
        # are checked, not refused (RabbitMQ 3.10's mirrored queues are classic queues)
        self.supports_conditional_delete = mirrored
        self.counts_deliveries = not mirrored
        if mirrored:
            self.queue_type = "classic"
        self._leader_seen: str | None = None
        self.vhost = vhost
        self.arguments = arguments
        self.key = queue_key(vhost, name)
        self.settings = parse_queue_arguments(name, vhost, arguments)
        self._policy: dict | None = None
        self.config = self._make_config()
        if self.config.overflow == OVERFLOW_REJECT_PUBLISH_DLX:
            _log.warning("quorum queue %r: overflow reject-publish-dlx is not supported, "
                         "it behaves as drop-head", name)
        self.runtime = runtime
        self.broker = broker
        self.node = runtime.node
        cluster = runtime.cluster
        self.clustered = cluster.clustered
        self.group = group or runtime.new_group_id()
        self.members = tuple(members) if members else (self.node,)
        self.learners = tuple(n for n in sorted(runtime.nodes) if n not in self.members) \
            if self.clustered else ()
        self.machine = QuorumMachine(self.config, now_ms, reader=self._read_entry,
                                     range_reader=self._read_entries)
        self.publisher = runtime.pid_of(self)
        self.ready = False
        self.deleted = False
        self._backlog: list[tuple[bytes, Any]] = []
        self._pub_seq = 0
        self.confirms: dict[int, Confirm] = {}  # fifo publisher seq -> the publish's Confirm
        self.consumers: dict[fifo.ConsumerKey, Consumer] = {}
        # pid -> channel, for channels that consume or get (weak: a released channel that
        # held nothing needs no ConsumerDown)
        self.pids: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
        self._exclusive = False
        self._tick_inflight = False
        self._proposed_enqueues = 0
        self._enqueue_base = 0
        # callbacks waiting for the flow to end, each once: a publisher that gave up waiting
        # (`Session._wait_out_flow`) asks again with the same one, so they cannot pile up
        self._flow_waiters: dict[Callable[[], None], None] = {}
        self._settles: dict[fifo.ConsumerKey, list[int]] = {}  # acks not yet proposed
        self._settles_due: int | None = None  # when acks held back (`next_deadline`) must go
        self._purge_mark: int | None = None  # enqueues proposed before a Purge in flight
        self._gets: dict[int, Callable] = {}  # basic.get replies waiting for their Dequeue
        self._get_seq = 0
        self._peeked = 0  # messages the management get has looked at (see `get`)
        self._unconfirmed: dict[int, bytes] = {}  # clustered: seq -> Enqueue, until confirmed
        self._audit_oldest: int | None = None
        # every node of the cluster hosts a replica (voter or learner): the live node list
        self._effects = EffectRunner(self, self.node, runtime.is_current, runtime.nodes,
                                     runtime.pid_prefix)
        # factory(queue) -> dlx.DlxWorker, called on the first at-least-once dead letter
        self._dlx_worker_factory = dlx_worker_factory
        self._dlx_worker = None
        warn_dead_letter_strategy(self.config, name)
        runtime.add_group(self.group, self.machine, self._effects.run, self._on_ready,
                          voters=list(self.members), learners=list(self.learners),
                          on_leader=self._on_leader if self.clustered else None,
                          first=self.members[0] == self.node)
        if self.clustered:
            runtime.watch(self)

    # -- plumbing ------------------------------------------------------------------------------
    def _make_config(self) -> fifo.QueueConfig:
        """The fifo configuration from the effective settings (a subclass adds its own)."""
        return quorum_config(self.name, self.settings, self.mirrored)

    def _read_entry(self, index: int) -> bytes | None:
        """The machine's log reader: a message's command bytes, read back for delivery."""
        driver = self.runtime.driver
        if not driver.has_group(self.group):
            return None
        return driver.entry_data(self.group, index)

    def _read_entries(self, lo: int, hi: int) -> list[tuple[int, bytes]]:
        driver = self.runtime.driver
        if not driver.has_group(self.group):
            return []
        return driver.entry_range(self.group, lo, hi)

    @property
    def state(self):
        """The applied replicated state (`quorum_machine.QState`)."""
        return self.runtime.driver.state(self.group)

    def propose(self, cmd: Any, callback: Any = None, data: bytes | None = None) -> None:
        """Propose `cmd` (its log encoding `data` when the caller has it already)."""
        if self.deleted:
            return
        if self._settles and (type(cmd) is not fifo.Enqueue or self._settles_due is not None):
            # acks go first: a later Cancel/ConsumerDown must see them; acks held back at a
            # low rate ride in the same WAL write as the next publish
            self._flush_settles()
        if data is None:
            data = encode_command(cmd)
        if callback is None and self.clustered and type(cmd) in _RESENDABLE:
            callback = self._resend_on_loss(cmd, data)
        if not self.ready:
            self._backlog.append((data, callback))
            return
        self.runtime.propose(self.group, data, callback)

    def _resend_on_loss(self, cmd: Any, data: bytes) -> Callable:
        def outcome(_reply: Any, error: BaseException | None) -> None:
            if isinstance(error, RaftError) and not self.deleted:
                self.propose(cmd, outcome, data)
        return outcome

    def _on_ready(self) -> None:
        """This replica has replayed its log (alone: and leads): flush the backlog; alone,
        run the leader's effects; in a cluster, take down this node's earlier processes."""
        self.ready = True
        self._enqueue_base = self.machine.applied_enqueues
        if not self.clustered:
            self._lead()
        else:
            self._down_earlier_processes()
            if self.runtime.driver.status(self.group).is_leader:
                self._on_leader(self.node)  # elected while replaying: lead now
        backlog, self._backlog = self._backlog, []
        for data, cb in backlog:
            self.runtime.propose(self.group, data, cb)

    def _lead(self) -> None:
        """This replica became the leader: the leader's effects (timers, monitors) and the
        at-least-once dead letters held in the state."""
        self._effects.run(self.group, fifo.leader_effects(self.state.fifo), force=True)
        held = self.state.fifo.dlx.pending()
        if held:  # at-least-once dead letters not yet settled before a restart: send again
            state, body = self.state, self.machine.body
            found = [(i, r, body(state, m.index)) for i, r, m in held]
            self.dlx_worker().load([(i, r, msg) for i, r, msg in found if msg is not None])
            self.broker.run_pending()  # dispatch what it republished to classic targets

    def _on_leader(self, leader: str | None) -> None:
        """Clustered: the leader changed. Enqueues in flight may be lost with the old one:
        send every unconfirmed one again, in order (duplicates are dropped by sequence)."""
        if leader is None or self.deleted:
            return
        previous, self._leader_seen = self._leader_seen, leader
        if self.mirrored and previous is not None and previous != leader:
            self._cancel_on_failover()
        if self.ready and self._unconfirmed:
            for seq in sorted(self._unconfirmed):
                self.runtime.propose(self.group, self._unconfirmed[seq])
        if leader == self.node and self.ready:
            self._lead()
            for node in self.runtime.peers:
                if not self.runtime.is_running(node):
                    self.propose(fifo.NodeDown(node))

    def _cancel_on_failover(self) -> None:
        """A mirrored queue's master moved: consumers that asked with x-cancel-on-ha-failover
        get basic.cancel (RabbitMQ's failover notification); the others carry on."""
        rt = self.queue_runtime()
        if rt is None:
            return
        for consumer in list(self.consumers.values()):
            flag = consumer.arguments.get("x-cancel-on-ha-failover")
            if flag is True or flag in (1, b"true", "true"):
                rt.remove_consumer(consumer.channel, consumer.tag)
                consumer.channel.consumer_cancelled(consumer.tag)

    def node_changed(self, node: str, up: bool) -> None:
        """The link to `node` dropped or came back (`runtime.watch`): the leader tells the
        queue, which suspects that node's consumers (returning their messages) or restores them."""
        if self.deleted or not self.ready or not self.runtime.driver.status(self.group).is_leader:
            return
        self.propose(fifo.NodeUp(node) if up else fifo.NodeDown(node))

    def audit(self) -> None:
        """Clustered, every few seconds: commands lost on their way to a leader that never
        said so (a dropped link, a full send queue) are sent again. Enqueues still
        unconfirmed since the last audit go again in order; a local consumer the replicated
        state no longer has (taken down while this node was cut off) checks out again, and a
        consumer of this node that no channel here holds is taken down. The leader also
        restores consumers suspected on a node it reaches (`_restore_suspected`)."""
        if self.deleted or not self.ready:
            return
        if self.runtime.driver.status(self.group).is_leader:
            self._restore_suspected()
        if self._effects.holding and not self.behind():
            self._effects.run(self.group, [])  # deliveries held while catching up
        oldest = min(self._unconfirmed) if self._unconfirmed else None
        if oldest is not None and oldest == self._audit_oldest:
            for seq in sorted(self._unconfirmed):
                self.runtime.propose(self.group, self._unconfirmed[seq])
        self._audit_oldest = oldest
        q = self.state.fifo
        for key, consumer in self.consumers.items():
            if q.find(key) is None and not consumer.channel.released:
                self._effects.new_consumer(key)
                self._check_out(key, consumer)
        # ...and the other way round: a consumer of this node the replicated state still has
        # though no channel here holds it (its ConsumerDown was lost, a resent Checkout landed
        # after it, or it belongs to this node's previous run) would keep its messages checked
        # out for good: take it down again
        dead = {c.key.pid for c in (*q.consumers.values(), *q.waiting)
                if c.key.node == self.node and self.live_channel(c.key.pid) is None}
        for pid in dead:
            self.propose(fifo.ConsumerDown(pid))

    def _restore_suspected(self) -> None:
        """Leader: consumers the state holds as suspected (a NodeDown) on a node whose link
        is up, or on this very node, get a NodeUp. The NodeUp that a link coming back makes
        the leader send (`node_changed`) is lost when that leader stops before it commits,
        and a node that sees the link come back while it follows sends none, nor does a
        leader for its own node: those consumers would get no deliveries for good (found by
        test_jepsen.py: confirmed messages ready on every node, live consumers idle)."""
        for node in sorted(fifo.suspected_nodes(self.state.fifo)):
            if self.runtime.is_running(node):
                self.propose(fifo.NodeUp(node))

    def _down_earlier_processes(self) -> None:
        """Consumers and publishers of this node's previous run are dead: say so (their
        messages return to the queue at once, not when someone notices)."""
        q = self.state.fifo
        prefix = self.runtime.pid_prefix
        is_current = self.runtime.is_current
        pids = {c.key.pid for c in (*q.consumers.values(), *q.waiting)} | set(q.enqueuers)
        for pid in pids:
            if pid.startswith(prefix) and not is_current(pid):
                self.propose(fifo.ConsumerDown(pid))

    def dlx_worker(self):
        """The at-least-once dead-letter worker beside this (leader) queue."""
        if self._dlx_worker is None:
            self._dlx_worker = self._dlx_worker_factory(self)
        return self._dlx_worker

    def queue_runtime(self):
        """The server's `QueueRuntime` of this queue (None once it is gone)."""
        vhost = self.broker.vhosts.get(self.vhost)
        rt = vhost.queues.get(self.name) if vhost is not None else None
        return rt if rt is not None and rt.queue is self else None

    # -- the dead-letter worker's source (server.dlx_port.DeadLetterSource) ---------------------
    def dead_letter_exchange(self) -> tuple[str | None, str | None]:
        """(DLX, dead-letter routing key) as configured now."""
        return self.config.dead_letter_exchange, self.config.dead_letter_routing_key

    def holds_dead_letter(self, dlx_id: int) -> bool:
        """Is `dlx_id` still held in the replicated state for at-least-once?"""
        return not self.deleted and dlx_id in self.state.fifo.dlx.held

    def settle_dead_letters(self, dlx_ids: tuple[int, ...]) -> None:
        """Every target confirmed these dead letters: release them (a `DlxSettle` command)."""
        self.propose(fifo.DlxSettle(dlx_ids))

    # -- the effect runner's host (quorum_effects.EffectHost) -----------------------------------
    def accepts_effects(self, force: bool) -> bool:
        return not self.deleted and (self.ready or force)

    def read_bodies(self, indexes: list[int]) -> list[Message | None]:
        return self.machine.bodies(self.state, indexes)

    def live_channel(self, pid: str) -> Any | None:
        channel = self.pids.get(pid)
        return None if channel is None or channel.released else channel

    def local_consumer(self, key: fifo.ConsumerKey) -> Consumer | None:
        return self.consumers.get(key)

    def behind(self) -> bool:
        return self.clustered and not self.deleted and self.runtime.driver.behind(self.group)

    def checked_out(self, key: fifo.ConsumerKey) -> dict | None:
        c = self.state.fifo.find(key)
        return None if c is None else c.checked_out

    def consumers_in_state(self) -> int:
        q = self.state.fifo
        return len(q.consumers) + len(q.waiting)

    def answer_confirms(self, publisher: str, seqs: Sequence[int], ok: bool) -> None:
        if publisher != self.publisher:
            return
        confirms = self.confirms
        if self._unconfirmed:
            for s in seqs:
                self._unconfirmed.pop(s, None)
        for s in seqs:
            confirm = confirms.pop(s, None)
            if confirm is not None:
                confirm[0].settle(confirm[1], ok)

    def hold_dead_letters(self, reason: str, held: list[tuple[int, Message]]) -> None:
        worker = self.dlx_worker()
        for dlx_id, msg in held:
            worker.add(dlx_id, reason, msg)
        if held:  # counted once, here on the leader, as rabbit_fifo's dead-letter effect does
            self.broker.count_dead_lettered(reason, "rabbit_quorum_queue", "at_least_once",
                                            len(held))
        worker.pump()

    def after_effects(self, touched: bool) -> None:
        rt = self.queue_runtime()
        if rt is None:
            return
        if touched:
            rt.mark_dirty()  # re-arm the timer, hand dead letters over
        self.broker.run_pending()

    def expire_now(self) -> None:
        rt = self.queue_runtime()
        if rt is not None:
            rt.expired()
            self.broker.run_pending()

    def consumer_key(self, channel: Any, tag: str) -> fifo.ConsumerKey:
        pid = self.runtime.pid_of(channel)
        self.pids[pid] = channel
        return fifo.ConsumerKey(tag, pid, self.node)

    def channel_down(self, pid: str) -> None:
        """The channel is gone: one ConsumerDown returns everything it held."""
        if self.pids.pop(pid, None) is not None:
            self.propose(fifo.ConsumerDown(pid))

    @property
    def _inflight(self) -> int:
        applied = self.machine.applied_enqueues - self._enqueue_base if self.ready else 0
        return max(0, self._proposed_enqueues - applied)

    # -- publishing ----------------------------------------------------------------------------
    def when_flow_ends(self, callback: Callable[[], None]) -> None:
        """`callback()` once no more than FLOW_PENDING // 2 of this node's Enqueues wait to be
        applied (at once if so), or the queue is deleted. The count is this node's view: a
        proposal lost with a leader is never applied, so callers also bound their wait. A
        callback given again while it waits is kept once."""
        if self.deleted or self._inflight <= FLOW_PENDING // 2:
            self.flow = False
            callback()
            return
        self._flow_waiters[callback] = None
        self.machine.wake_at = (self._enqueue_base + self._proposed_enqueues
                                - FLOW_PENDING // 2)
        self.machine.on_wake = self._flow_ended

    def _flow_ended(self) -> None:
        self.flow = False
        waiters, self._flow_waiters = self._flow_waiters, {}
        for callback in waiters:
            callback()

    def _enqueue(self, msg: Message, publisher: str | None, seq: int | None,
                 partition: int | None = None) -> None:
        self._proposed_enqueues += 1
        if not self._proposed_enqueues % FLOW_CHECK_EVERY:
            self.flow = self._inflight > FLOW_PENDING
        # A large body is copied once, into the command, not into a payload first; the machine
        # applies `cmd` with `msg` (`QuorumMachine._cached`), so then it needs no payload (a
        # replica decodes `data`).
        big = len(msg.body) >= _JOIN_BELOW
        cmd = fifo.Enqueue(publisher, seq, msg.size, b"" if big else encode_payload(msg),
                           msg.priority or None, msg.expiration_ms, msg.persistent, partition)
        data = (fifo.encode_enqueue(publisher, seq, cmd.size, payload_pieces(msg), cmd.priority,
                                    cmd.ttl, cmd.persistent, partition)
                if big else encode_command(cmd))
        if seq is not None and self.clustered:
            self._unconfirmed[seq] = data
        if self.ready and not self.deleted:
            # the machine applies this very command and message, not decoded copies
            self.machine.outbox.append((data, cmd, msg))
        self.propose(cmd, data=data)

    def publish(self, message: Message, now_ms: int, confirm: Confirm | None = None) -> bool:
        """Proposed as an Enqueue. Without `confirm` a reject-publish refusal is silent; with it,
        settled ok once the Enqueue is committed, fsynced and applied, not ok when the queue
        refuses it (reject-publish). Always returns True: nothing is refused at once."""
        if confirm is None:
            self._enqueue(message, None, None)
            return True
        if self.deleted:
            confirm[0].settle(confirm[1], True)
            return True
        self._pub_seq += 1
        self.confirms[self._pub_seq] = confirm
        self._enqueue(message, self.publisher, self._pub_seq)
        return True

    # -- consumers -----------------------------------------------------------------------------
    def add_consumer(self, consumer: Consumer, now_ms: int) -> None:
        if self._exclusive or (consumer.exclusive and self.consumers):
            where = vhost_resource("queue", self.name, self.vhost)
            raise AccessRefused(f"{where} in exclusive use")
        self._exclusive = consumer.exclusive
        key = self.consumer_key(consumer.channel, consumer.tag)
        self.consumers[key] = consumer
        self._effects.new_consumer(key)
        self._check_out(key, consumer)

    def _check_out(self, key: fifo.ConsumerKey, consumer: Consumer) -> None:
        """Check `consumer` out, beyond its prefetch when it is alone on a plain quorum
        queue (lookahead.py; the effect runner ends that once another consumer comes)."""
        prefetch = 0 if consumer.no_ack else getattr(consumer.channel, "prefetch", 0)
        alone = bool(prefetch and self.ready and self.counts_deliveries
                     and self.state.fifo.parts is None and self.consumers_in_state() == 0)
        credit = self._effects.lookahead.credit(key, prefetch, alone)
        self.propose(fifo.Checkout(key, credit, consumer.priority))

    def _give_back_unsent(self, key: fifo.ConsumerKey) -> None:
        """`key` is leaving: what its lookahead held goes back to the queue, uncounted
        (before its Cancel or ConsumerDown, which would count it)."""
        ids = self._effects.lookahead.end(key)
        if ids:
            self.propose(fifo.Unsent(key, ids))

    def remove_consumer(self, channel: Any, tag: str, now_ms: int) -> Consumer | None:
        key = fifo.ConsumerKey(tag, self.runtime.pid_of(channel), self.node)
        consumer = self.consumers.pop(key, None)
        if consumer is None:
            return None
        self._give_back_unsent(key)
        self._effects.new_consumer(key)  # forget its msg ids
        if consumer.exclusive:
            self._exclusive = False
        self._effects.release_settles(gone=(key,))  # what was sent is not given back
        if channel.released:
            self.channel_down(key.pid)
        else:
            self.propose(fifo.Cancel(key))
        return consumer

    def remove_channel(self, channel: Any, now_ms: int) -> list[Consumer]:
        pid = self.runtime.pid_of(channel)
        gone = [k for k in self.consumers if k.pid == pid]
        out = [self.consumers.pop(k) for k in gone]
        for k in gone:
            self._give_back_unsent(k)
            self._effects.new_consumer(k)  # forget their msg ids
        self._effects.release_settles(gone=gone)  # what was sent is not given back
        self.channel_down(pid)
        return out

    def dispatch(self, now_ms: int, deliver: Callable | None = None) -> list:
        # Deliveries come from the fifo's Deliver effects; run after a kick, so what a full
        # connection held back goes out now.
        if self._effects.blocked:
            self._effects.release_blocked()
        return []

    def get(self, now_ms: int, no_ack: bool) -> Entry | None:
        """The management API's synchronous get (basic.get uses `basic_get`): the next
        ready message of the applied state, in delivery order, without taking it (a Dequeue
        would have to commit first). Its msg_id is `(PEEK, index)`: `requeue` of such ids
        leaves the messages where they are, `settle` / `discard` take them off the head
        with Dequeue commands (if a consumer took the head meanwhile, the next ones go)."""
        if self.deleted:
            return None
        n = self._peeked
        head = self.state.fifo.ready.head(n + 1)
        if len(head) <= n:
            return None
        m = head[n]
        msg = self.machine.body(self.state, m.index, keep=True)
        if msg is None:
            return None
        self._peeked = n + 1
        d = fifo.Delivery(m.index, m.index, m.size, m.acquired, m.delivery_failed)
        return delivery_entry(PEEK, d, msg)

    def _take_peeked(self, msg_ids: Iterable) -> tuple[list, int]:
        """Split off the ids handed out by `get` (ending that look) from channel ones."""
        ids = list(msg_ids)
        mine = [i for i in ids if i[0] is not PEEK]
        peeked = len(ids) - len(mine)
        if peeked:
            self._peeked = 0
        return mine, peeked

    def _dequeue_peeked(self, n: int, discard: bool) -> None:
        key = fifo.ConsumerKey("mgmt-get", self.publisher, self.node)
        for _ in range(n):
            if not discard:
                self.propose(fifo.Dequeue(key, settled=True))
                continue

            def taken(result: Any, error: BaseException | None) -> None:
                if error is None and isinstance(result, tuple) and result[1] is not None:
                    self.propose(fifo.Discard(key, (result[0].delivery.msg_id,)))

            self.propose(fifo.Dequeue(key, settled=False), taken)

    def basic_get(self, channel: Any, no_ack: bool, now_ms: int, reply: GetReply) -> None:
        """basic.get as a Dequeue command; `reply(entry or None, messages left)` once applied
        ((None, 0) if the queue is deleted first)."""
        key = self.consumer_key(channel, "")
        self._get_seq += 1
        token = self._get_seq
        self._gets[token] = reply

        def done(result: Any, error: BaseException | None) -> None:
            if self._gets.pop(token, None) is None:
                return  # answered already (queue deleted meanwhile)
            if error is not None or not isinstance(result, tuple):
                reply(None, 0)
                return
            dq, msg = result
            if msg is None:
                reply(None, dq.ready)
                return
            reply(delivery_entry(key, dq.delivery, msg), dq.ready)

        self.propose(fifo.Dequeue(key, settled=no_ack), done)

    # -- settlement ----------------------------------------------------------------------------
    def _by_consumer(self, msg_ids: Iterable) -> dict:
        out: dict = {}
        for key, mid in msg_ids:
            out.setdefault(key, []).append(mid)
        return out

    def settle(self, msg_ids: Iterable) -> None:
        """Acks are buffered per consumer and proposed as one Settle per consumer at the end
        of the session's batch (`next_deadline`, which `QueueRuntime.run` calls then), or
        before any other command of this queue."""
        if type(msg_ids) is list and len(msg_ids) == 1 and msg_ids[0][0] is not PEEK:
            key, mid = msg_ids[0]  # one consumer ack (the common case): no splitting
            ids = self._settles.get(key)
            if ids is None:
                self._settles[key] = [mid]
            else:
                ids.append(mid)
            self._release(msg_ids)
            return
        msg_ids, peeked = self._take_peeked(msg_ids)
        if peeked:
            self._dequeue_peeked(peeked, discard=False)
        settles = self._settles
        for key, mid in msg_ids:
            ids = settles.get(key)
            if ids is None:
                settles[key] = [mid]
            else:
                ids.append(mid)
        self._release(msg_ids)

    def _release(self, msg_ids: Iterable) -> None:
        """Their channel has room again: what the consumers' lookaheads hold goes out."""
        if self._effects.lookahead.held_count:
            for key in {key for key, _mid in msg_ids}:
                self._effects.release(key)

    def _flush_settles(self) -> None:
        settles, self._settles = self._settles, {}
        self._settles_due = None
        for key, ids in settles.items():
            self.propose(fifo.Settle(key, tuple(ids)))

    def requeue(self, msg_ids: Iterable) -> None:
        msg_ids, _ = self._take_peeked(msg_ids)  # looked at only: nothing to put back
        for key, ids in self._by_consumer(msg_ids).items():
            channel = self.pids.get(key.pid)
            if channel is None:
                continue  # its ConsumerDown already returns them
            if channel.released:
                self.channel_down(key.pid)
                continue
            cmd = fifo.Return(key, tuple(ids))
            for c in fifo.return_commands(self.state.fifo, cmd, self._payload):
                self.propose(c)
        self._release(msg_ids)

    def _payload(self, index: int) -> bytes:
        data = self.machine.payload(self.state, index)
        if data is None:  # a live message's entry is never compacted away
            raise LookupError(f"quorum queue {self.name!r}: no log entry at {index}")
        return data

    def discard(self, msg_ids: Iterable, reason: str = REASON_REJECTED) -> None:
        msg_ids, peeked = self._take_peeked(msg_ids)
        if peeked:
            self._dequeue_peeked(peeked, discard=True)
        for key, ids in self._by_consumer(msg_ids).items():
            self.propose(fifo.Discard(key, tuple(ids)))
        self._release(msg_ids)

    def take_dead_letters(self) -> list[DeadLetter]:
        return self._effects.take_dead_letters()

    # -- whole queue ---------------------------------------------------------------------------
    def purge(self) -> int:
        """Answers at once (purge-ok); until the Purge applies, counts show only the
        messages published after it."""
        n = self.message_count
        mark = self._proposed_enqueues
        self._purge_mark = mark

        def done(_reply: Any, _err: BaseException | None) -> None:
            if self._purge_mark == mark:
                self._purge_mark = None

        self.propose(fifo.Purge(), done)
        return n

    def delete(self) -> int:
        """Stop the group and forget it; pending confirms are acked (the queue is gone)."""
        if self.deleted:
            return 0
        n = self.message_count
        self.deleted = True
        self._flow_ended()
        if self._dlx_worker is not None:
            self._dlx_worker.stop()
        self.runtime.remove_group(self.group)
        self.runtime.unwatch(self)
        self._unconfirmed.clear()
        confirms, self.confirms = self.confirms, {}
        for sink, seq in confirms.values():
            sink.settle(seq, True)
        gets, self._gets = self._gets, {}
        for reply in gets.values():
            reply(None, 0)  # the Dequeue will never apply: get-empty
        return n

    def touch(self, now_ms: int) -> None:
        pass  # a redeclare does not renew a quorum queue's x-expires lease

    def restore(self, recovered: Recovered, now_ms: int) -> None:
        pass  # recovered from its own Raft log, not the classic journal

    def apply_policy(self, policy: dict | None) -> None:
        self._policy = policy
        self.settings = resolve_queue_settings(self.arguments, policy, self.queue_type)
        config = self._make_config()
        if config != self.config:
            self.config = config
            warn_dead_letter_strategy(config, self.name)
            self.propose(fifo.UpdateConfig(config))

    # -- timers --------------------------------------------------------------------------------
    def next_deadline(self, now_ms: int) -> int | None:
        """The batch-end hook: QueueRuntime.run always calls this (after a kick too: a
        connection that drained kicks its consumers' queues). Buffered acks are proposed now
        if the Raft driver has a pass coming anyway or messages wait for the credit they give
        back; otherwise (a low rate, the queue empty) they wait up to `SETTLE_DELAY_MS` for the
        next publish to this queue, so that one fdatasync covers both: at 1000 msg/s that
        halves the WAL's fsyncs. Nothing waits on a Settle's commit but the consumer's
        credit, and an ack is no promise to the client."""
        self._effects.release_settles()
        timer_at = None if self._tick_inflight else self._effects.timer_at
        if self._settles:
            if self.runtime.driver.pass_due or len(self.state.fifo.ready):
                self._flush_settles()
            else:
                if self._settles_due is None:
                    self._settles_due = now_ms + SETTLE_DELAY_MS
                return self._settles_due if timer_at is None else min(timer_at, self._settles_due)
        return timer_at

    def expire(self, now_ms: int) -> bool:
        """A deadline is due: held-back acks go; if the fifo's timer is due, propose a Tick
        (expiry happens when it applies)."""
        if self._settles_due is not None and now_ms >= self._settles_due:
            self._flush_settles()
        timer_at = self._effects.timer_at
        if timer_at is None or timer_at > now_ms or self._tick_inflight or self.deleted:
            return False
        self._tick_inflight = True

        def done(_reply: Any, _err: BaseException | None) -> None:
            self._tick_inflight = False
            rt = self.queue_runtime()
            if rt is not None:
                rt.rearm_timer()  # from the (possibly unchanged) timer_at

        self.propose(fifo.Tick(), done)
        return False

    # -- counters ------------------------------------------------------------------------------
    @property
    def message_count(self) -> int:
        if self.deleted:
            return 0
        if self._purge_mark is not None:
            return max(0, self._proposed_enqueues - self._purge_mark)
        # held by a lookahead here: checked out in the fifo, but no client has them
        held = self._effects.lookahead.held_count
        return max(0, len(self.state.fifo.ready) + held + self._inflight - self._peeked)

    @property
    def unacked_count(self) -> int:
        if self.deleted:
            return 0
        return max(0, self.state.fifo.messages_checked_out() - self._effects.lookahead.held_count)

    @property
    def consumer_count(self) -> int:
        return len(self.consumers)

    @property
    def message_bytes(self) -> int:
        if self.deleted:
            return 0
        q = self.state.fifo
        return q.ready.bytes + q.checked_bytes

    @property
    def active_consumer(self) -> Consumer | None:
        """Single active consumer: the local consumer the fifo has made active."""
        if self.deleted or not self.config.single_active_consumer:
            return None
        c = fifo.active_consumer(self.state.fifo)
        return self.consumers.get(c.key) if c is not None else None

    def placement(self, local_node: str) -> Placement:
        """The Raft group's voters; the leader as this replica knows it; the members whose
        node is up (learners are not members)."""
        if not self.clustered:
            node = (local_node or self.node,)
            return Placement(node[0], node, node, replicated=True, group=self.group)
        leader = self.runtime.driver.status(self.group).leader if not self.deleted else None
        members = self.voters()
        online = tuple(n for n in members if self.runtime.is_running(n))
        return Placement(leader or "", members, online, replicated=True, group=self.group)

    def voters(self) -> tuple[str, ...]:
        """The members as the Raft group's membership stands now (they change with
        add_member / delete_member / forget_cluster_node); the declared ones once deleted."""
        if self.deleted or not self.runtime.driver.has_group(self.group):
            return self.members
        return tuple(sorted(self.runtime.driver.raft(self.group).config.voters))

    def unavailable_error(self) -> None:
        return None  # always usable where it is

    def is_full(self) -> bool:
        """reject-publish refuses only once the queue is over its limit (RabbitMQ's quorum
        rule), so at the limit it still takes one more."""
        s = self.settings
        if s.overflow not in ("reject-publish", "reject-publish-dlx"):
            return False
        if s.max_length is not None and self.message_count > s.max_length:
            return True
        return s.max_length_bytes is not None and self.message_bytes > s.max_length_bytes

    def overview(self) -> dict:
        """The fifo's counters (management / list_queues)."""
        return fifo.overview(self.state.fifo)
