"""One client connection: a trio reader task and writer task around a sans-IO ServerConnection.

Created by `listener.py` for each accepted socket. The reader feeds bytes to the protocol object
and handles its events synchronously (publish, route, enqueue, deliver all happen inside the
reader's turn: no task switch per message). Anything that wants bytes on the wire (this
connection's channels, or queues delivering to this connection's consumers from another task)
calls `wake()`; the writer then drains everything queued since it last woke with a single
`send_all`. Channels with pending publisher confirms register in `_flush_hooks` so that confirms
are coalesced once per writer wake-up.

Back-pressure: what the writer has not yet handed to the kernel (the send in progress and what is
queued behind it) is bounded. Above OUTPUT_BOUND the connection's consumers get no more
deliveries (`output_full`, checked by their `take_credit`; the queues keep the messages and their
depth shows them) until the writer is below it again and kicks them; above READ_PAUSE_BOUND the
reader stops reading the socket. A publisher is otherwise slowed by the reader handling each
read completely before the next one. A client that opens channels or declares queues faster than
its per-connection rate (`connection_limits.*`) is slowed the same way: the reader waits out the
debt of its token bucket before the next read (state "flow" in the listings meanwhile).

In a cluster, a method that changes the durable topology (a declaration, a binding) makes
metadata proposals (`cluster_meta.PendingChange`). Its reply bytes are then taken back from the
output and the connection's later input waits (a barrier) until the change is committed: the
-ok goes out only then, or, if the cluster cannot commit it (this node is on a minority side),
the connection is closed with 541 INTERNAL_ERROR instead.
"""

from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Callable, Iterator

import trio
from pamqp import commands as C

from amqp_broker.core.errors import AMQPError, InternalError
from amqp_broker.core.permissions import AccessChecker
from amqp_broker.core.ratelimit import TokenBucket
from amqp_broker.protocol.states import OPEN
from amqp_broker.protocol import (
    Ack,
    Acks,
    ChannelClosed,
    ChannelCloseRequested,
    ChannelFailed,
    ChannelOpened,
    ConnectionClosed,
    ConnectionCloseRequested,
    HeartbeatTimeout,
    LoginRequest,
    MethodReceived,
    Nack,
    OpenRequest,
    Publish,
    Reject,
    ServerConnection,
    Tuned,
)
from quorum.signal import Signal

from . import sockio
from .channel import Channel
from .counters import Counters, session_totals

if TYPE_CHECKING:
    from .broker import Broker, VHost

__all__ = ["Session"]

_log = logging.getLogger(__name__)
_RECV_SIZE = 256 * 1024
# A connection whose full reads carry fewer than _FEW_EVENTS events (large messages) reads up
# to _RECV_SIZE_LARGE at a time: a read's fixed costs (a pass of the loop, the batch's end, the
# dispatch) are then shared by more messages (classic 64 KiB: 15-20% less broker CPU a message,
# publish and end to end). Small messages keep 256 KiB reads, each handled in one step: 1 MiB of
# 16 B publishes would hold every other connection for tens of milliseconds.
_RECV_SIZE_LARGE = 1024 * 1024
_FEW_EVENTS = 32
# Back-pressure. Bytes written but not yet taken by the client (the send in progress plus what is
# queued behind it) above which this connection's consumers get no more deliveries; the queues
# keep the messages and deliver again once the writer is below the bound. One delivery may
# overshoot it by its own size. Deliveries are refilled only after the writer drained: at 1 MiB
# the classic 64 KiB end-to-end bench lost 10% of its rate. (A quorum queue's deliveries stop at
# a bound of their own, queues/quorum_effects.py's _OUTPUT_BOUND, through `output_full(bound)`.)
OUTPUT_BOUND = 4 * 1024 * 1024
# Above this much unsent output (replies to the client's own input: returns of mandatory
# publishes, confirms, method replies) the reader stops reading the socket until the writer has
# drained it, so a client that publishes without reading cannot grow it without bound. Kept above
# OUTPUT_BOUND: a client blocked writing to us while we are blocked writing to it is a deadlock,
# which only a client sending this much without reading can walk into. (A quorum queue's
# deliveries can reach it, as they could before they were bounded at all; raising it to 32 MiB
# would let a client that never reads its returns hold four times the memory.)
READ_PAUSE_BOUND = 8 * 1024 * 1024
# A write that waits this long (seconds) for room in the client's socket means the client reads
# slower than the broker writes (`client_lagging`): its consumers do not keep up. A client that
# keeps up drains a full OUTPUT_BOUND in about 15 ms here at 64 KiB a message.
CLIENT_LAG = 0.05


class _Barrier:
    __slots__ = ("changes", "reply", "rest")

    def __init__(self, changes: list, reply: bytes, rest: list) -> None:
        self.changes = changes  # cluster_meta.PendingChange
        self.reply = reply      # the bytes the method answered with, held back
        self.rest = rest        # events that came after it


class Session:
    """State of one AMQP connection on the server side."""

    def __init__(self, broker: "Broker", stream: trio.SocketStream, peer: tuple) -> None:
        self.broker = broker
        self.settings = broker.settings
        self.stream = stream
        self._io = sockio.for_stream(stream)  # reads and writes, with fewer scheduler passes
        self._direct = isinstance(self._io, sockio.DirectSocket)  # can write without waiting
        self._batch = broker.output_batch   # wakes inside it are written at its end
        # the node's Raft driver (None without quorum queues): a publish's pass runs here
        self._raft = broker.quorum.driver if broker.quorum is not None else None
        self.peer = peer
        self.name = f"{peer[0]}:{peer[1]}" if len(peer) >= 2 else str(peer)
        self.conn = ServerConnection(broker.protocol_config)
        self.channels: dict[int, Channel] = {}
        self.vhost: VHost | None = None
        self.access: AccessChecker | None = None  # set at connection.open; channels share it
        self.exclusive_queues: list = []  # QueueRuntimes this connection owns (vhost.py)
        self.user: str | None = None
        self.client_properties: dict = {}
        self.capabilities: dict = {}
        self.opened = False
        self._wake_event = trio.Event()
        self._retime = trio.Event()  # set when the protocol's tick_interval changed (Tuned)
        self._flush_hooks: dict[int, Callable[[], None]] = {}
        self._cancel: trio.CancelScope | None = None
        self._barrier: _Barrier | None = None  # a reply waiting for a cluster-wide commit
        self._blocked_sent = False
        self._in_flight = 0  # bytes taken from the protocol and not yet sent
        self._unsent: list = []  # what `flush_now` could not write: the writer sends it first
        self._writer_idle = False  # the writer waits for a wake (nothing of ours in flight)
        self._stalled = False  # a delivery was refused for output_full(): kick when drained
        self._drained = Signal()  # fired after each send; the reader waits on it
        self.has_published = False  # set by channels; alarms stop reading from publishers
        self.auth_mechanism = ""  # the SASL mechanism the client logged in with
        # Socket counters as RabbitMQ's connection stats: bytes and reads / writes.
        self.recv_oct = self.recv_cnt = self.send_oct = self.send_cnt = 0
        self.retired_counters = Counters()  # counts of this connection's closed channels
        s = self.settings  # buckets start full whatever the clock reads: no `now` needed
        self._open_rate = None if s.channel_open_rate is None else TokenBucket(s.channel_open_rate)
        self._declare_rate = (None if s.queue_declare_rate is None
                              else TokenBucket(s.queue_declare_rate))
        # a bucket went into debt: the reader waits before reading more (checked per read)
        self._rate_owed = False
        self._throttled = False  # waiting out a rate limit's debt, or a queue's flow
        self._flow_queues: list = []  # queues that asked this publisher to pause (`pause_for`)
        self._flow_ended = trio.Event()  # set by `_on_flow_ended`: the awaited queue let go

    def counter_totals(self) -> Counters:
        """This connection's message totals: its closed channels' and its open ones'."""
        return session_totals(self)

    # -- called by channels, queues and the broker -------------------------------------------
    def wake(self) -> None:
        """Ask the writer to flush; cheap and idempotent, callable from any task. Inside the
        broker's `OutputBatch` an idle writer is not woken: the batch's end writes."""
        if self._batch.active and self._writer_idle:
            self._batch.defer(self)
        else:
            self._wake_event.set()

    def add_flush_hook(self, key: int, hook: Callable[[], None]) -> None:
        """Run `hook` once just before the next flush (used to coalesce confirms)."""
        self._flush_hooks[key] = hook
        self.wake()

    def flush_now(self) -> None:
        """At the end of an `OutputBatch`: write what is queued from the calling task if the
        writer is idle and the kernel takes it all; the writer does the rest (and all of it on
        TLS, for a closing connection, or once deliveries stalled on a full output)."""
        conn = self.conn
        if (not self._direct or not self._writer_idle or self._wake_event.is_set()
                or self._stalled or conn.closed):
            self._wake_event.set()
            return
        self._run_flush_hooks()
        size = conn.output_size()
        if not size:
            return
        pieces = conn.take_output()
        self.send_oct += size
        self.send_cnt += 1
        try:
            rest = self._io.try_send(pieces)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            rest = pieces  # the writer meets the error again and closes the session
        if rest:
            self._unsent = rest
            self._in_flight = sum(map(len, rest))
            self._wake_event.set()
            return
        self._drained.fire()

    def _run_flush_hooks(self) -> None:
        if self._flush_hooks:
            hooks = list(self._flush_hooks.values())
            self._flush_hooks.clear()
            for hook in hooks:
                hook()

    @property
    def client_lagging(self) -> bool:
        """A write has waited for room in the client's socket for CLIENT_LAG or longer: the
        client reads slower than we write (a burst of deliveries that fills the socket for a
        moment does not count)."""
        since = self._io.blocked_since
        return since is not None and trio.current_time() - since >= CLIENT_LAG

    def _consumes_from(self, queue) -> bool:
        """Whether a channel of this connection consumes from `queue`."""
        return any(st.rt.queue is queue for ch in self.channels.values()
                   for st in ch.consumers.values())

    def output_full(self, bound: int = OUTPUT_BOUND) -> bool:
        """True while the client has not taken `bound` bytes: no more deliveries. The writer
        kicks this connection's consumers once it is below OUTPUT_BOUND again."""
        if self._in_flight + self.conn.output_size() < bound:
            return False
        self._stalled = True
        return True

    def notify_blocked(self, reason: str) -> None:
        """A resource alarm went off (RabbitMQ tells only clients with the capability)."""
        if self.opened and self.capabilities.get("connection.blocked") and not self._blocked_sent:
            self._blocked_sent = True
            self.conn.send_method(0, C.Connection.Blocked(reason=reason))
            self.wake()

    def notify_unblocked(self) -> None:
        if self._blocked_sent:
            self._blocked_sent = False
            self.conn.send_method(0, C.Connection.Unblocked())
            self.wake()

    def force_close(self, code: int, text: str) -> None:
        """Close the connection from the server side (e.g. CONNECTION_FORCED on shutdown)."""
        if self.conn.state == OPEN:
            self._start_close(code, text, 0, 0)

    def info(self) -> dict:
        """A listing row (rabbitmqctl list_connections / management API)."""
        return {"name": self.name, "peer_host": self.peer[0], "peer_port": self.peer[1],
                "user": self.user, "vhost": self.vhost.name if self.vhost else None,
                "channels": len(self.channels), "client_properties": self.client_properties,
                "state": ("blocked" if self._blocked_sent else
                          "flow" if self._throttled else "running")}

    # -- task bodies ---------------------------------------------------------------------------
    async def run(self) -> None:
        """Serve the connection until the protocol says the socket should close."""
        try:
            async with trio.open_nursery() as nursery:
                self._cancel = nursery.cancel_scope
                nursery.start_soon(self._writer)
                nursery.start_soon(self._heartbeat)
                await self._reader()
                self.wake()  # the writer flushes the last bytes (close frames), then cancels
            if self.conn.linger:
                # RabbitMQ's silent-close delay after pre-auth and framing errors.
                await trio.sleep(self.conn.linger)
            if self.conn.drain:
                await self._discard_input(self.conn.drain)
        finally:
            self._cleanup()
            with trio.move_on_after(1) as scope:
                scope.shield = True
                await self.stream.aclose()

    async def _discard_input(self, limit: float) -> None:
        """After the client's connection.close: read and drop what it still sends (frames it
        queued behind the close) until it closes the socket, for at most `limit` seconds, so
        that those frames do not meet a reset socket."""
        with trio.move_on_after(limit):
            try:
                while await self._io.receive_some(_RECV_SIZE):
                    pass
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass

    async def _reader(self) -> None:
        conn = self.conn
        recv_size = _RECV_SIZE
        while not conn.closed:
            if self.has_published and self.broker.alarm_active:
                # Back-pressure during a resource alarm: stop reading this publisher's socket.
                self.notify_blocked(self.broker.alarm_reason)
                conn.pause_monitor()  # unread heartbeats must not count as missed
                try:
                    await self.broker.wait_alarms_cleared()
                finally:
                    conn.resume_monitor()
            if self._rate_owed:
                await self._wait_out_rate_limits()
            if self._flow_queues:
                await self._wait_out_flow()
            while self._in_flight + conn.output_size() >= READ_PAUSE_BOUND and not conn.closed:
                # The client is not taking what we send: stop reading until it does.
                conn.pause_monitor()
                try:
                    self.wake()
                    await self._drained.wait()
                finally:
                    conn.resume_monitor()
            try:
                data = await self._io.receive_some(recv_size)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                data = b""
            self.recv_oct += len(data)
            self.recv_cnt += 1
            conn.feed(data)  # b"" tells the protocol the peer went away
            raft = self._raft
            if raft is not None:
                raft.hold()  # the quorum queues' pass that this batch calls for runs below
            try:
                with self._batch:  # replies, and deliveries to other connections, written at its end
                    events = conn.next_events()
                    if len(data) == recv_size:
                        recv_size = _RECV_SIZE_LARGE if len(events) < _FEW_EVENTS else _RECV_SIZE
                    self._handle_events(events)
                    if self._barrier is None and (conn.output_size() or conn.closed):
                        self.wake()
            except BaseException:
                if raft is not None:
                    raft.release()
                    raft.wake()
                raise
            if raft is not None and raft.release():
                await raft.run_held()
            while self._barrier is not None:
                self.wake()  # what came before the barrier goes out meanwhile
                await self._pass_barrier()
            if conn.output_size() or conn.closed:
                self.wake()  # else nothing to write: most reads (publishes, acks) answer later

    def pause_for(self, queue) -> None:
        """`queue` asks its publishers to pause (`QueueType.flow`): read nothing more until it
        says they may go on; what was read already is handled. Not for a queue this
        connection consumes from: the acks that let it go on would not be read."""
        if queue not in self._flow_queues and not self._consumes_from(queue):
            self._flow_queues.append(queue)

    async def _wait_out_flow(self) -> None:
        """Before reading more: wait until every queue that asked for a pause lets go, or the
        longest of their `flow_wait`s has passed (a quorum queue's count of unapplied publishes
        is its own node's view, which a lost leader can leave too high; a classic queue's
        consumer may share a thread with the publisher in its client)."""
        queues, self._flow_queues = self._flow_queues, []
        with self._throttling(), trio.move_on_after(max(q.flow_wait for q in queues)):
            for queue in queues:
                self._flow_ended = trio.Event()
                # one callback for every wait: a queue keeps it once however often a wait
                # that timed out asks again
                queue.when_flow_ends(self._on_flow_ended)
                await self._flow_ended.wait()

    def _on_flow_ended(self) -> None:
        self._flow_ended.set()

    def _take_rate(self, bucket: TokenBucket) -> None:
        bucket.take(trio.current_time())
        if bucket.in_debt:
            self._rate_owed = True

    async def _wait_out_rate_limits(self) -> None:
        """Before reading more: wait until this client is back under its channel-open and
        queue-declare rates (the replies to what it sent already go out meanwhile)."""
        buckets = [b for b in (self._open_rate, self._declare_rate) if b is not None and b.in_debt]
        if not buckets:
            self._rate_owed = False
            return
        delay = max(b.wait_time(trio.current_time()) for b in buckets)
        if delay <= 0:
            return
        with self._throttling():
            await trio.sleep(delay)

    @contextmanager
    def _throttling(self) -> Iterator[None]:
        """While the reader holds back on purpose (state "flow"): what is queued for the
        client goes out, and unread heartbeats do not count as missed."""
        self._throttled = True
        self.conn.pause_monitor()
        try:
            self.wake()
            yield
        finally:
            self.conn.resume_monitor()
            self._throttled = False

    async def _writer(self) -> None:
        conn = self.conn
        while True:
            self._writer_idle = True
            await self._wake_event.wait()
            self._writer_idle = False
            self._wake_event = trio.Event()
            closed = conn.closed  # read before draining, so nothing queued later is lost
            self._run_flush_hooks()
            size = conn.output_size()
            if size or self._unsent:
                pieces, self._unsent = self._unsent, []  # flush_now's rest goes first
                if size:  # large bodies among the pieces, never copied
                    pieces = pieces + conn.take_output() if pieces else conn.take_output()
                    self.send_oct += size
                    self.send_cnt += 1
                self._in_flight += size  # counts against OUTPUT_BOUND until sent
                try:
                    await self._io.send_pieces(pieces)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    conn.feed(b"")
                    self._handle_events()
                    self._cancel_all()
                    return
                finally:
                    self._in_flight = 0
                self._drained.fire()
                if self._stalled and not self.output_full():
                    # Back under the bound: the queues deliver again what they held back.
                    self._stalled = False
                    for ch in self.channels.values():
                        ch.kick_consumers(include_no_ack=True)
                    self.broker.run_pending()
                    if conn.output_size():
                        self.wake()
            if closed:
                self._cancel_all()
                return

    async def _heartbeat(self) -> None:
        """Every `conn.tick_interval` seconds (1 s, or heartbeat/2 when that is shorter, from
        the moment tune-ok arrives): protocol timers (heartbeats, handshake and close-ok
        timeouts) and the consumer timeout of every channel."""
        timeout = self.settings.consumer_timeout
        while True:
            with trio.move_on_after(self.conn.tick_interval):
                await self._retime.wait()
            self._retime = trio.Event()
            self.conn.tick(trio.current_time())
            self._handle_events()
            if self.opened:
                self._check_consumer_timeouts(timeout)
            self.wake()

    def _check_consumer_timeouts(self, timeout: float | None) -> None:
        now = time.monotonic()
        for number, ch in list(self.channels.items()):
            try:
                ch.check_consumer_timeout(now, timeout)
            except AMQPError as err:
                self._on_error(number, err)
        self.broker.run_pending()

    # -- event dispatch -----------------------------------------------------------------------
    def _handle_events(self, events: list | None = None) -> None:
        conn = self.conn
        if events is None:
            events = conn.next_events()
        if not events:
            return
        if self._barrier is not None:  # e.g. a timer's events while a reply waits
            self._barrier.rest += events
            return
        broker = self.broker
        broker.update_clock()
        meta = broker.cluster_meta
        while events:
            for i, ev in enumerate(events):
                if meta is None or type(ev) is not MethodReceived:
                    self._handle_one(ev)  # the hot path: publishes, acks
                    continue
                # a method may change the metadata: its reply waits for the commit
                mark = conn.output_mark()
                _, changes = meta.collect(lambda: self._handle_one(ev))
                if changes:
                    self._barrier = _Barrier(changes, conn.take_output_since(mark),
                                             events[i + 1:] + conn.next_events())
                    broker.run_pending()
                    return
            # accept_login()/accept_open() parse the input buffered while they were pending:
            # handle what that produced now, not on the next read.
            events = conn.next_events()
        # Dispatch once for the whole batch (deliveries, dead letters, timers).
        broker.run_pending()

    def _handle_one(self, ev) -> None:
        try:
            self._handle(ev)
        except AMQPError as err:
            self._on_error(getattr(ev, "channel", 0), err)
        except Exception:  # a bug in our code must not kill the node
            _log.exception("%s: internal error handling %r", self.name, type(ev).__name__)
            self._on_error(0, InternalError("internal error"))

    async def _pass_barrier(self) -> None:
        """Wait for the barrier's changes; then send the held reply (or fail the connection)
        and handle the input that waited behind it."""
        barrier = self._barrier
        ok = True
        for change in barrier.changes:
            ok = await change.wait() and ok
        self._barrier = None
        if ok:
            self.conn.put_output(barrier.reply)
        elif self.conn.state == OPEN:
            self._on_error(0, InternalError(
                "metadata store unavailable: this node cannot reach a majority of the cluster "
                "(the change was not committed in time; it may still take effect once the "
                "cluster is whole again)"))
        self._handle_events(barrier.rest)

    def _handle(self, ev) -> None:
        # Ordered by frequency: the hot path first.
        match ev:
            case Publish():
                ch = self.channels.get(ev.channel)
                if ch is not None:
                    ch.on_publish(ev)
            case Acks():
                ch = self.channels.get(ev.channel)
                if ch is not None:
                    ch.on_acks(ev.delivery_tags)
            case Ack():
                ch = self.channels.get(ev.channel)
                if ch is not None:
                    ch.on_ack(ev.delivery_tag, ev.multiple)
            case MethodReceived():
                ch = self.channels.get(ev.channel)
                if ch is not None:
                    if self._declare_rate is not None and type(ev.method) is C.Queue.Declare:
                        self._take_rate(self._declare_rate)
                    ch.on_method(ev.method)
                elif ev.channel == 0:
                    self._on_update_secret()
            case Nack():
                ch = self.channels.get(ev.channel)
                if ch is not None:
                    ch.on_nack(ev.delivery_tag, ev.multiple, ev.requeue)
            case Reject():
                ch = self.channels.get(ev.channel)
                if ch is not None:
                    ch.on_nack(ev.delivery_tag, False, ev.requeue, (60, 90))
            case ChannelOpened():
                self.channels[ev.channel] = Channel(self, ev.channel)
                if self._open_rate is not None:
                    self._take_rate(self._open_rate)
            case ChannelCloseRequested() | ChannelClosed() | ChannelFailed():
                ch = self.channels.pop(ev.channel, None)
                if ch is not None:
                    ch.release()
            case LoginRequest():
                self._on_login(ev)
            case OpenRequest():
                self._on_open(ev)
            case ConnectionCloseRequested():
                self._cleanup()
            case ConnectionClosed():
                if ev.bug:
                    _log.error("%s: internal error in the protocol layer: %s\n%s", self.name,
                               ev.reason, ev.bug)
                _log.debug("%s: connection over: %s", self.name, ev.reason)
                self._cleanup()
            case Tuned():
                self._retime.set()  # tick on the heartbeat's period from now on
            case HeartbeatTimeout():
                _log.info("%s: missed heartbeats from client, closing", self.name)
                self._cleanup()

    def _on_update_secret(self) -> None:
        # connection.update-secret (the only channel-0 method after open). The internal user
        # database's credentials do not expire, so, as RabbitMQ's internal backend, the new
        # secret is accepted as it is and the connection carries on.
        self.conn.send_method(0, C.Connection.UpdateSecretOk())

    def _on_login(self, ev: LoginRequest) -> None:
        self.client_properties = ev.client_properties or {}
        caps = self.client_properties.get("capabilities")
        self.capabilities = caps if isinstance(caps, dict) else {}
        self.auth_mechanism = ev.mechanism
        username, password = ev.username, ev.password
        if ev.mechanism == "ANONYMOUS":  # offered only when a user is configured for it
            username = self.settings.anonymous_login_user or ""
            password = self.settings.anonymous_login_pass
        refusal = self.broker.login_refusal(username, password, self.peer)
        if refusal is None:
            self.user = username
            self.conn.accept_login()
        else:  # self.name is the peer's address and port
            _log.warning("%s: %s login refused for user %r: %s", self.name, ev.mechanism,
                         username, refusal)
            self.conn.refuse_login()

    def _on_open(self, ev: OpenRequest) -> None:
        try:
            self.vhost = self.broker.open_vhost(self.user or "", ev.virtual_host)
        except AMQPError as err:
            self.conn.refuse_open(err.message)
            return
        # RabbitMQ 3.10's texts ("access to ...") whatever the compat profile, and 4.3.1's
        # passive-declare rule (no existence leak): what PROTOCOL-ERRORS.md rows 32-35 pin.
        self.access = self.broker.admin.permissions.checker(self.user or "", ev.virtual_host,
                                                            passive_needs_any=True)
        self.opened = True
        user = self.user or ""
        self.conn.channel_guard = lambda: self.broker.channel_refusal(user)  # max-channels
        self.conn.accept_open()
        self.broker.register_session(self)
        _log.info("%s: connection open (user %r, vhost %r)", self.name, self.user, ev.virtual_host)

    def _on_error(self, channel: int, err: AMQPError) -> None:
        ch = self.channels.get(channel) if channel else None
        if err.is_soft and ch is not None:
            self.channels.pop(channel, None)
            ch.release()
            self.conn.close_channel(channel, err.reply_code, err.reply_text, err.class_id, err.method_id)
            # Keep the number reserved until close-ok (the protocol layer discards the rest).
            return
        self._start_close(err.reply_code, err.reply_text, err.class_id, err.method_id)

    def _start_close(self, code: int, text: str, class_id: int, method_id: int) -> None:
        _log.info("%s: closing connection: %s", self.name, text)
        self._release_channels()
        self.conn.close_connection(code, text, class_id, method_id)  # tick() caps the close-ok wait
        self.wake()

    # -- teardown -----------------------------------------------------------------------------
    def _release_channels(self) -> None:
        channels, self.channels = self.channels, {}
        for ch in channels.values():
            ch.release()

    def _cancel_all(self) -> None:
        if self._cancel is not None:
            self._cancel.cancel()

    def _cleanup(self) -> None:
        """The connection is over: requeue unacked, drop consumers and exclusive queues now
        (not when the socket finally closes), so other connections see it at once."""
        self._release_channels()
        if self.opened:
            self.opened = False
            self.broker.unregister_session(self)
