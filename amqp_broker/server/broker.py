"""The node's broker state: users, vhosts, sessions, and the services the channels share.

Created once by `node.run_node` (tests may build one directly). Sessions call `authenticate`,
`open_vhost`, `register_session`/`unregister_session`; channels reach vhosts (`vhost.py`) for
routing and queues, and the shared services: `pending` + `run_pending()` (end-of-batch dispatch),
`timers` (deadline heap), `durability` (confirms after fsync), `reply_to` (direct reply-to) and
`dead_letter` (dead-letter routing of dropped, rejected and expired messages).
"""

from __future__ import annotations

import base64
import logging
import os
import time
from typing import TYPE_CHECKING, Any

import trio

from amqp_broker.core import limits
from amqp_broker.core.errors import NotAllowed
from amqp_broker.core.users import loopback_allowed
from amqp_broker.protocol import ProtocolConfig, default_server_properties
from amqp_broker.queues import queue_type_module
from amqp_broker.settings import Settings

from .admin import Admin
from .counters import Counters, node_totals
from .durability import Durability
from .output_batch import OutputBatch
from .reply_to import ReplyTo
from .timers import DeadlineHeap
from .vhost import VHost

if TYPE_CHECKING:
    from .queue_runtime import QueueRuntime
    from .session import Session

__all__ = ["Broker"]

_log = logging.getLogger(__name__)


class Broker:
    """Everything one node serves over AMQP."""

    def __init__(self, settings: Settings, store: Any = None, load_admin: bool = True) -> None:
        """`load_admin`: read users, vhosts, permissions and policies from the local store
        (False in a cluster: they come from the cluster's metadata)."""
        self.settings = settings
        self.store = store
        # connection.blocked is real: resource alarms send it (alarms.py).
        props = default_server_properties(settings.product, settings.version,
                                          platform=settings.platform, connection_blocked=True)
        props["cluster_name"] = settings.cluster_name
        props["capabilities"]["consumer_priorities"] = True
        self.protocol_config = ProtocolConfig(
            server_properties=props,
            # in RabbitMQ 4.2's order; ANONYMOUS only when a user is configured for it
            mechanisms="PLAIN AMQPLAIN ANONYMOUS" if settings.anonymous_login_user else "PLAIN AMQPLAIN",
            channel_max=settings.channel_max,
            frame_max=settings.frame_max,
            heartbeat=settings.heartbeat,
            # rabbitmq.conf `handshake_timeout = infinity` arrives as None
            handshake_timeout=(settings.handshake_timeout if settings.handshake_timeout is not None
                               else float("inf")),
            max_message_size=settings.max_message_size,
        )
        self.vhosts: dict[str, VHost] = {}
        self.sessions: set["Session"] = set()
        self.pending: list["QueueRuntime"] = []
        self.now_ms = int(time.time() * 1000)
        self.timers = DeadlineHeap()
        self.output_batch = OutputBatch()  # clients' output written at a batch's end
        journal = getattr(store, "journal", None)
        self.journal = journal
        if journal is not None:   # a publish's write and fsync at the end of its reader's batch
            journal.defer_wakeup = self.output_batch.at_end
        self.spill = getattr(store, "spill", None)   # where classic queues page out
        self.durability = Durability(journal, self.run_pending, self.output_batch)
        self.reply_to = ReplyTo()
        self.alarms: set[str] = set()
        self.started_at = time.time()  # the application's start (node uptime)
        self._alarm_cleared = trio.Event()
        self._alarm_cleared.set()
        # x-queue-type -> factory(name, vhost, *, durable, auto_delete, exclusive, arguments,
        # now_ms) -> QueueType. Classic queues are built in; a quorum adapter registers here.
        self.queue_factories: dict[str, Any] = {}
        # a classic queue under an ha-mode policy, in a cluster (cluster.install_quorum)
        self.mirrored_queue_factory: Any = None
        self.quorum: Any = None  # cluster.QuorumRuntime once node.open_broker installed it
        self.node_name = getattr(settings, "node_name", "") or "rabbit@localhost"
        # cluster_meta.ReplicatedMetadata when the node has peers (node.open_broker), else None
        self.cluster_meta: Any = None
        self.remote_queues: Any = None  # remote_queues.RemoteQueues in a cluster
        self.membership: Any = None  # membership.Membership: node records, join / leave
        # mirror_convert.MirrorConversions in a cluster: classic queues an ha policy now covers
        self.mirror_conversions: Any = None
        # TLS of the listeners.ssl.* listeners (tls.ServerTls; node.serve_broker builds it), and
        # every listener once bound: {"protocol", "ip_address", "port", "tls"} (listener.py)
        self.amqp_tls: Any = None
        self.https_tls: Any = None  # the management API's, when management.ssl.port is set
        self.bound_listeners: list[dict] = []
        # closed channels' counts and dead letters; counters.node_totals adds the open channels'
        self.counters = Counters()
        self.resource_usage: dict[str, int] = {}  # last readings of alarms.check_alarms
        # (reason, queue_type, dead_letter_strategy) -> messages: /metrics labels them as
        # rabbitmq_prometheus does (queue_type rabbit_classic_queue / rabbit_quorum_queue)
        self.dead_lettered: dict[tuple[str, str, str], int] = {}
        self.admin = Admin(self)
        if load_admin:
            self.admin.load()  # users, vhosts, permissions, policies (defaults on first start)

    # -- clock ---------------------------------------------------------------------------------
    def clock_ms(self) -> int:
        return int(time.time() * 1000)

    def update_clock(self) -> int:
        """Refresh the coarse clock (once per batch of events, not per message)."""
        self.now_ms = now = int(time.time() * 1000)
        return now

    # -- auth and vhosts -----------------------------------------------------------------------
    def authenticate(self, username: str, password: str, peer: Any) -> bool:
        return self.login_refusal(username, password, peer) is None

    def login_refusal(self, username: str, password: str, peer: Any) -> str | None:
        """Why a login is refused, for the node's log only (None: accepted). The client gets
        one answer whatever the reason (a 403 that names none), after the same work: the
        password is checked (or a dummy hash, for an unknown user) before anything else."""
        if self.admin.users.authenticate(username, password) is None:
            return "invalid credentials (unknown user or wrong password)"
        # A loopback-only user from elsewhere gets the same refusal as a wrong password
        # (RabbitMQ names the reason in its 403; that would tell a stranger the password
        # was right).
        if not loopback_allowed(username, peer, self.settings.loopback_users):
            return f"user '{username}' can only connect via localhost"
        return None

    def open_vhost(self, username: str, name: str) -> VHost:
        """connection.open: access to the vhost, then its connection limit, the user's, the
        node's (RabbitMQ's texts, 530 NOT_ALLOWED)."""
        self.admin.permissions.check_vhost_access(username, name, self.vhosts)
        vhost = self.vhosts[name]
        vhost_limits = self.admin.vhost_limits.get(name)
        if vhost_limits:
            opened = (sum(1 for s in self.sessions if s.vhost is vhost)
                      + self._peer_tally("vhost", name))
            full = limits.reached(vhost_limits, "max-connections", opened)
            if full is not None:
                raise limits.vhost_connections_refused(name, username, full)
        user = self.admin.users.get(username)
        if user is not None and user.limits:
            opened = (sum(1 for s in self.sessions if s.user == username)
                      + self._peer_tally("user", username))
            full = limits.reached(user.limits, "max-connections", opened)
            if full is not None:
                raise limits.user_connections_refused(username, full)
        limit = self.settings.connection_max
        if limit is not None and len(self.sessions) >= limit:
            raise NotAllowed(f"connection refused: node connection limit ({limit}) is reached")
        return vhost

    def channel_refusal(self, username: str) -> str | None:
        """Why `username` may not open one more channel (its max-channels limit, counted over
        all its connections), or None."""
        user = self.admin.users.get(username)
        if user is None or user.limits.get("max-channels", -1) < 0:
            return None
        opened = (sum(len(s.channels) for s in self.sessions if s.user == username)
                  + self._peer_tally("user_channels", username))
        full = limits.reached(user.limits, "max-channels", opened)
        return None if full is None else limits.user_channels_refused(username, full)

    def connection_tally(self) -> dict[str, dict[str, int]]:
        """This node's client connections per vhost and per user, and its users' channels:
        what it reports to its peers, which add it when they check vhost and user limits."""
        vhosts: dict[str, int] = {}
        users: dict[str, int] = {}
        channels: dict[str, int] = {}
        for s in self.sessions:
            if s.vhost is None or s.user is None:
                continue
            vhosts[s.vhost.name] = vhosts.get(s.vhost.name, 0) + 1
            users[s.user] = users.get(s.user, 0) + 1
            channels[s.user] = channels.get(s.user, 0) + len(s.channels)
        return {"vhost": vhosts, "user": users, "user_channels": channels}

    def _peer_tally(self, kind: str, name: str) -> int:
        """The other nodes' count (their last report, at most two seconds old; RabbitMQ's
        connection tracking is eventually consistent across the cluster too)."""
        remote = self.remote_queues
        return 0 if remote is None else remote.peer_tally(kind, name)

    def add_vhost(self, name: str) -> VHost:
        vhost = self.vhosts.get(name)
        if vhost is None:
            vhost = self.vhosts[name] = VHost(self, name)
        return vhost

    # -- sessions ------------------------------------------------------------------------------
    def register_session(self, session: "Session") -> None:
        self.sessions.add(session)

    def unregister_session(self, session: "Session") -> None:
        self.sessions.discard(session)
        if session.vhost is not None:
            session.vhost.drop_exclusive(session)
        session.exclusive_queues.clear()
        self.run_pending()

    # -- resource alarms (alarms.py) ------------------------------------------------------------
    @property
    def alarm_active(self) -> bool:
        return bool(self.alarms)

    def set_alarms(self, active: set[str]) -> None:
        was = bool(self.alarms)
        self.alarms = set(active)
        if active and not was:
            self._alarm_cleared = trio.Event()
            for session in list(self.sessions):
                if session.has_published:
                    session.notify_blocked(self.alarm_reason)
        elif was and not active:
            self._alarm_cleared.set()
            for session in list(self.sessions):
                session.notify_unblocked()

    @property
    def alarm_reason(self) -> str:
        return "low on memory" if "memory" in self.alarms else "low on disk space"

    async def wait_alarms_cleared(self) -> None:
        await self._alarm_cleared.wait()

    def session_count(self) -> int:
        return len(self.sessions)

    def new_name(self, prefix: str) -> str:
        """Server-generated names: amq.ctag-..., amq.gen-... (random, URL-safe)."""
        return prefix + base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")

    # -- batch end -----------------------------------------------------------------------------
    def run_pending(self) -> None:
        """Dispatch every queue touched since the last call (and those its work touches)."""
        pending = self.pending
        rounds = 0
        while pending and rounds < 100:
            rounds += 1
            batch = pending[:]
            pending.clear()
            for rt in batch:
                rt.run()

    # -- dead lettering ------------------------------------------------------------------------
    def counter_totals(self) -> Counters:
        """The node's message totals: closed channels' counts and dead letters plus the open
        channels' (for /metrics and the management API's sampler)."""
        return node_totals(self)

    def count_dead_lettered(self, reason: str, queue_type: str, strategy: str, n: int = 1) -> None:
        """Count `n` dead-lettered messages (metrics: rabbitmq_global_messages_dead_lettered_*)."""
        key = (reason, queue_type, strategy)
        self.dead_lettered[key] = self.dead_lettered.get(key, 0) + n
        self.counters.dead_lettered(reason, n)

    def dead_letter(self, vhost: VHost, dead_letters: list) -> None:
        from . import deadletter

        for dl in dead_letters:
            # queues hand over dead letters only when they have a DLX (at_most_once here;
            # quorum at-least-once ones go through dlx/worker.py and are counted there)
            rt = vhost.queues.get(dl.queue)
            kind = queue_type_module(rt.queue_type if rt is not None else "classic")
            self.count_dead_lettered(dl.reason, kind, "at_most_once")
        deadletter.route_dead_letters(self, vhost, dead_letters)
