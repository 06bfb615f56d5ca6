"""`Admin`: the one facade through which the management API and the CLI act on a node.

Built once per node next to the `Broker` (`Admin(broker)`), handed to `serve_management` and
`serve_metrics`. Methods return plain JSON-ready dicts and lists with RabbitMQ's field names and
raise `errors.AdminError` subclasses (404 / 400 / 401). Nothing else in `mgmt/` or `cli/` knows
the broker's internals: this facade, its mixins (`topology_ops.py`, `definitions.py`) and the row
builders in `rows.py` are the only readers. All methods are plain functions that must run in
the broker's trio thread.

Users, permissions, vhosts and policies are kept (and persisted) by the server's own
`broker.admin` (`server/admin.py`); this facade validates input, maps its errors to HTTP ones and
adds what the API needs on top (vhost descriptions, connection start times, node info).
"""

from __future__ import annotations

import os
import re
import socket
import time
from typing import Any

from amqp_broker.core.errors import AMQPError
from amqp_broker.core.limits import LimitError
from amqp_broker.core.permissions import PermissionError_
from amqp_broker.core.policies import PolicyError, PolicyStore
from amqp_broker.core.users import User, UserError

from .definitions import DefinitionsOps
from .errors import BadRequest, NotFoundError
from .rates import (CHANNEL_KEYS, DEPTH_KEYS, NODE_KEYS, OCTET_KEYS, Rates, channel_stats,
                    queue_stats, with_samples)
from .rows import (TLS_KEYS, channel_name, channel_row, connection_name, connection_row,
                   consumer_rows)
from .replicas import ReplicaOps
from .topology_ops import TopologyOps

__all__ = ["Admin", "parse_tags"]

_EXCHANGE_TYPES = (
    ("direct", "AMQP direct exchange, as per the AMQP specification"),
    ("fanout", "AMQP fanout exchange, as per the AMQP specification"),
    ("headers", "AMQP headers exchange, as per the AMQP specification"),
    ("topic", "AMQP topic exchange, as per the AMQP specification"),
)


def parse_tags(tags) -> list[str]:
    """RabbitMQ accepts tags as "a,b" (or "a b") or as a JSON list."""
    if tags is None:
        return []
    if isinstance(tags, str):
        return [t for t in re.split(r"[,\s]+", tags) if t]
    return [str(t) for t in tags]


class Admin(TopologyOps, DefinitionsOps, ReplicaOps):
    def __init__(self, broker: Any, *, node: str | None = None) -> None:
        self.broker = broker
        self._srv = broker.admin  # server/admin.py: users, permissions, vhosts, policies
        self.settings = broker.settings
        self.node = node or getattr(broker, "node_name", None) or \
            f"amqp-broker@{socket.gethostname().split('.')[0]}"
        self._vhost_meta: dict[str, dict] = {}
        self._connected_at: dict[int, int] = {}
        self.started_at = time.time()
        self.listeners: list[dict] = []  # filled by the servers as they bind
        # TLS listeners and their certificate files (the certificate-expiration check)
        self.tls_listeners: list[dict] = []
        self.rates = Rates()  # message_stats, sampled by rates.run_sampler (http.py starts it)

    def add_tls_listener(self, protocol: str, host: str, port: int, options: Any) -> None:
        """A listener serving TLS with `options` (`tls.TlsOptions`)."""
        self.tls_listeners.append({"node": self.node, "protocol": protocol, "interface": host,
                                   "port": port, "certfile": options.certfile,
                                   "cacertfile": options.cacertfile})

    # -- helpers for the mixins ---------------------------------------------------------------
    def _vhost(self, name: str):
        v = self.broker.vhosts.get(name)
        if v is None:
            raise NotFoundError()
        return v

    def _vhosts(self, name: str | None):
        return [self._vhost(name)] if name is not None else list(self.broker.vhosts.values())

    def _policy_store(self, vhost: str) -> PolicyStore:
        return self._srv.policies.get(vhost) or PolicyStore(vhost)

    def _with_rates(self, row: dict, key: tuple, stats: tuple[str, ...],
                    gauges: tuple[str, ...] = ()) -> dict:
        """`row` with its message_stats and `<gauge>_details` from the last sample."""
        ms = self.rates.message_stats(key, stats)
        if ms is not None:
            row["message_stats"] = ms
        if gauges:
            row.update(self.rates.details(key, gauges))
        return row

    # -- rates ---------------------------------------------------------------------------------
    def sample_totals(self) -> dict[tuple, dict[str, int]]:
        """Every object's totals now, for `Rates.record`: the node, vhosts, connections,
        channels, queues and exchanges. O(objects); run by the sampler, not per request."""
        broker = self.broker
        out: dict[tuple, dict[str, int]] = {}
        depth_node = dict.fromkeys(DEPTH_KEYS, 0)
        vhosts = list(broker.vhosts.values())
        # a vhost's totals: its closed channels' plus its connections' (one pass over them)
        per_vhost = {v.name: {**channel_stats(v.retired_counters), "recv_oct": 0, "send_oct": 0}
                     for v in vhosts}
        for s in list(broker.sessions):
            cs = channel_stats(s.counter_totals())
            cs.update(recv_oct=s.recv_oct, send_oct=s.send_oct)
            out[("connection", connection_name(s))] = cs
            for ch in list(s.channels.values()):
                out[("channel", channel_name(s, ch.number))] = channel_stats(ch.counters)
            acc = per_vhost.get(s.vhost.name) if s.vhost is not None else None
            if acc is not None:
                for k, n in cs.items():
                    acc[k] += n
        for v in vhosts:
            depth = dict.fromkeys(DEPTH_KEYS, 0)
            for rt in list(v.queues.values()):
                q = rt.queue
                ready, unacked = q.message_count, q.unacked_count
                sample = queue_stats(rt.counters)
                sample.update(messages=ready + unacked, messages_ready=ready,
                              messages_unacknowledged=unacked)
                out[("queue", v.name, rt.name)] = sample
                for k in DEPTH_KEYS:
                    depth[k] += sample[k]
            for x in v.topology.exchanges():
                out[("exchange", v.name, x.name)] = {"publish_in": x.publish_in,
                                                     "publish_out": x.publish_out}
            out[("vhost", v.name)] = {**per_vhost[v.name], **depth}
            for k in DEPTH_KEYS:
                depth_node[k] += depth[k]
        totals = broker.counter_totals()
        node = channel_stats(totals)
        node["dead_lettered"] = sum(totals[k] for k in totals if k.startswith("dead_lettered_"))
        node.update(depth_node)
        out[("node",)] = node
        return out

    def overview_with_history(self, msg_rates_age: float | None, lengths_age: float | None) -> dict:
        """The overview; with an age (seconds), the node's samples over that age in the
        message_stats / queue_totals details, as RabbitMQ's ?msg_rates_age=&lengths_age=."""
        out = self.overview()
        if msg_rates_age:
            with_samples(out["message_stats"], self.rates.node_history(msg_rates_age, NODE_KEYS))
        if lengths_age:
            with_samples(out["queue_totals"], self.rates.node_history(lengths_age, DEPTH_KEYS))
        return out

    # -- overview and nodes -------------------------------------------------------------------
    def overview(self) -> dict:
        queues = self.list_queues()
        s = self.settings
        return {
            "management_version": s.version, "rabbitmq_version": s.version,
            "product_name": s.product, "product_version": s.version,
            "cluster_name": s.cluster_name, "node": self.node, "rates_mode": "basic",
            "erlang_version": "", "erlang_full_version": "", "disable_stats": False,
            "enable_queue_totals": True,
            "exchange_types": [{"name": n, "description": d, "enabled": True}
                               for n, d in _EXCHANGE_TYPES],
            "message_stats": self.rates.message_stats(("node",), NODE_KEYS) or {},
            "churn_rates": {},
            "queue_totals": {
                "messages": sum(q["messages"] for q in queues),
                "messages_ready": sum(q["messages_ready"] for q in queues),
                "messages_unacknowledged": sum(q["messages_unacknowledged"] for q in queues),
                **self.rates.details(("node",), DEPTH_KEYS),
            },
            "object_totals": {
                "connections": len(self.broker.sessions),
                "channels": sum(len(x.channels) for x in self.broker.sessions),
                "consumers": sum(q["consumers"] for q in queues),
                "exchanges": sum(len(v.topology.exchanges()) for v in self.broker.vhosts.values()),
                "queues": len(queues),
            },
            "statistics_db_event_queue": 0,
            "listeners": list(self.listeners),
            "contexts": [],
        }

    def nodes(self) -> list[dict]:
        """Every node of the cluster (a lone node: itself), sorted by name. This node has the
        full row; a peer has what this node knows of it: name, type, and `running` (its link
        is up), as RabbitMQ lists a node it cannot reach."""
        quorum = getattr(self.broker, "quorum", None)
        names = sorted({self.node, *(quorum.nodes if quorum is not None else ())})
        return [self._local_node() if name == self.node else self._peer_node(name, quorum)
                for name in names]

    def _peer_node(self, name: str, quorum: Any) -> dict:
        """A peer as it last told this node (`remote_wire.NodeStats`, every two seconds)
        while its link is up; only its name and `running` false when it is down."""
        row = {"name": name, "type": "disc", "running": quorum.is_running(name)}
        remote = getattr(self.broker, "remote_queues", None)
        stats = remote.peer_stats.get(name) if remote is not None else None
        if row["running"] and stats is not None:
            row.update(os_pid=stats.os_pid, uptime=stats.uptime, processors=stats.processors,
                       mem_alarm="memory" in stats.alarms, disk_free_alarm="disk" in stats.alarms,
                       partitions=[], **stats.usage)
        return row

    def _local_node(self) -> dict:
        alarms = self.alarms()
        return {
            "name": self.node, "type": "disc", "running": True, "os_pid": str(os.getpid()),
            "uptime": int((time.time() - self.started_at) * 1000),
            "mem_alarm": "memory" in alarms, "disk_free_alarm": "disk" in alarms,
            "processors": os.cpu_count() or 1, "partitions": [], "rates_mode": "basic",
            "exchange_types": [{"name": n, "description": d, "enabled": True}
                               for n, d in _EXCHANGE_TYPES],
            # mem_used, mem_limit, disk_free, disk_free_limit: the alarm task's last readings
            **getattr(self.broker, "resource_usage", {}),
        }

    def get_node(self, name: str) -> dict:
        for row in self.nodes():
            if row["name"] == name:
                return row
        raise NotFoundError()

    def alarms(self) -> list[str]:
        return sorted(self.broker.alarms)

    # -- vhosts -------------------------------------------------------------------------------
    def list_vhosts(self) -> list[dict]:
        return [self._vhost_row(name) for name in sorted(self.broker.vhosts)]

    def get_vhost(self, name: str) -> dict:
        self._vhost(name)
        return self._vhost_row(name)

    def _vhost_row(self, name: str) -> dict:
        meta = self._vhost_meta.get(name, {})
        qs = self.list_queues(name)
        desc = meta.get("description", "Default virtual host" if name == self.settings.default_vhost else "")
        tags = meta.get("tags", [])
        return self._with_rates({"name": name, "description": desc, "tags": tags,
                "metadata": {"description": desc, "tags": tags},
                "default_queue_type": meta.get("default_queue_type", "undefined"), "tracing": False,
                "cluster_state": {self.node: "running"},
                "messages": sum(q["messages"] for q in qs),
                "messages_ready": sum(q["messages_ready"] for q in qs),
                "messages_unacknowledged": sum(q["messages_unacknowledged"] for q in qs)},
            ("vhost", name), CHANNEL_KEYS, DEPTH_KEYS + OCTET_KEYS)

    def add_vhost(self, name: str, *, description: str | None = None, tags=None,
                  default_queue_type: str | None = None, acting_user: str | None = None) -> bool:
        """PUT /api/vhosts/name; True when created. As RabbitMQ, the user who creates a vhost
        gets full permissions in it (an update leaves permissions alone)."""
        if not name:
            raise BadRequest("vhost name must not be empty")
        created = name not in self.broker.vhosts
        if created:
            self._srv.add_vhost(name)
            if acting_user is not None and self.user_exists(acting_user):
                self._srv.set_permissions(name, acting_user, ".*", ".*", ".*")
        meta = self._vhost_meta.setdefault(name, {})
        if description is not None:
            meta["description"] = description
        if tags is not None:
            meta["tags"] = parse_tags(tags)
        if default_queue_type:
            meta["default_queue_type"] = default_queue_type
        return created

    def delete_vhost(self, name: str) -> None:
        """Closes its connections and drops its queues, exchanges, permissions and policies."""
        self._vhost(name)
        self._srv.delete_vhost(name)
        self._srv.policies.pop(name, None)
        self._vhost_meta.pop(name, None)
        self.broker.run_pending()

    # -- limits (/api/vhost-limits, /api/user-limits) ----------------------------------------
    def list_vhost_limits(self, vhost: str | None = None) -> list[dict]:
        if vhost is not None:
            self._vhost(vhost)
        return [{"vhost": name, "value": dict(limits)}
                for name, limits in sorted(self._srv.vhost_limits.items())
                if vhost is None or name == vhost]

    def set_vhost_limit(self, vhost: str, name: str, value: Any) -> None:
        """PUT /api/vhost-limits/VHOST/NAME {"value": N}: one limit, the others kept."""
        self._vhost(vhost)
        current = self._srv.vhost_limits.get(vhost, {})
        try:
            self._srv.set_vhost_limits(vhost, {**current, name: value})
        except LimitError as err:
            raise BadRequest(str(err)) from None

    def clear_vhost_limit(self, vhost: str, name: str) -> None:
        self._vhost(vhost)
        current = self._srv.vhost_limits.get(vhost, {})
        self._srv.set_vhost_limits(vhost, {k: v for k, v in current.items() if k != name})

    def list_user_limits(self, user: str | None = None) -> list[dict]:
        if user is not None and not self.user_exists(user):
            raise NotFoundError()
        return [{"user": u.name, "value": dict(u.limits)} for u in self._srv.users.list()
                if u.limits and (user is None or u.name == user)]

    def set_user_limit(self, user: str, name: str, value: Any) -> None:
        """PUT /api/user-limits/USER/NAME {"value": N}: one limit, the others kept."""
        if not self.user_exists(user):
            raise BadRequest(f"User {user} does not exist")
        try:
            self._srv.set_user_limits(user, {name: value})
        except LimitError as err:
            raise BadRequest(str(err)) from None

    def clear_user_limit(self, user: str, name: str) -> None:
        if not self.user_exists(user):
            raise NotFoundError()
        self._srv.clear_user_limits(user, name)

    # -- users and permissions ----------------------------------------------------------------
    def list_users(self) -> list[dict]:
        return [u.as_definition() for u in self._srv.users.list()]

    def get_user(self, name: str) -> dict:
        u = self._srv.users.get(name)
        if u is None:
            raise NotFoundError()
        return u.as_definition()

    def user_exists(self, name: str) -> bool:
        return self._srv.users.get(name) is not None

    def put_user(self, name: str, *, password: str | None = None, password_hash: str | None = None,
                 hashing_algorithm: str | None = None, tags=None) -> bool:
        """PUT /api/users/name: create or update; True when created. With neither password nor
        hash a new user cannot log in with a password (as RabbitMQ)."""
        if not name:
            raise BadRequest("user name must not be empty")
        srv = self._srv
        created = srv.users.get(name) is None
        try:
            if password_hash is not None and password is None:
                user = User.from_definition({"name": name, "password_hash": password_hash,
                                             "hashing_algorithm": hashing_algorithm,
                                             "tags": parse_tags(tags)})
                srv.put_user(user)
                return created
            if created:
                srv.add_user(name, password, parse_tags(tags))
                return True
            if password is not None:
                srv.change_password(name, password)
            if tags is not None:
                srv.set_user_tags(name, parse_tags(tags))
        except UserError as e:
            raise BadRequest(str(e)) from None
        return created

    def change_password(self, name: str, password: str) -> None:
        if not self.user_exists(name):
            raise NotFoundError()
        self._srv.change_password(name, password)

    def delete_user(self, name: str) -> None:
        if not self.user_exists(name):
            raise NotFoundError()
        self._srv.delete_user(name)

    def delete_users(self, names: list) -> None:
        """POST /api/users/bulk-delete: in order, stopping at the first unknown name (the ones
        before it stay deleted), as RabbitMQ."""
        for name in names:
            if not isinstance(name, str) or not self.user_exists(name):
                raise BadRequest(["no_such_user", name])
            self._srv.delete_user(name)

    def authenticate(self, name: str, password: str) -> User | None:
        return self._srv.users.authenticate(name, password)

    def collecting_changes(self, fn: Any) -> tuple[Any, list]:
        """Run `fn()` and return (its result, the metadata changes it proposed): the HTTP
        layer answers once they are committed, as an AMQP declaration does."""
        meta = getattr(self.broker, "cluster_meta", None)
        return (fn(), []) if meta is None else meta.collect(fn)

    def can_access(self, user: str, vhost: str) -> bool:
        return self._srv.can_access_vhost(user, vhost)

    def list_permissions(self, vhost: str | None = None, user: str | None = None) -> list[dict]:
        return [p.as_definition() for p in self._srv.permissions.list()
                if (vhost is None or p.vhost == vhost) and (user is None or p.user == user)]

    def get_permission(self, vhost: str, user: str) -> dict:
        found = self.list_permissions(vhost, user)
        if not found:
            raise NotFoundError()
        return found[0]

    def set_permissions(self, vhost: str, user: str, configure: str, write: str, read: str) -> bool:
        if vhost not in self.broker.vhosts or not self.user_exists(user):
            raise BadRequest("vhost_or_user_not_found")
        created = self._srv.permissions.get(user, vhost) is None
        try:
            self._srv.set_permissions(vhost, user, configure, write, read)
        except PermissionError_ as e:
            raise BadRequest(str(e)) from None
        return created

    def clear_permissions(self, vhost: str, user: str) -> None:
        if self._srv.permissions.get(user, vhost) is None:
            raise NotFoundError()
        self._srv.clear_permissions(vhost, user)

    # -- policies -----------------------------------------------------------------------------
    def list_policies(self, vhost: str | None = None, *, operator: bool = False) -> list[dict]:
        return [p.as_dict() for v in self._vhosts(vhost)
                for p in self._policy_store(v.name).list(operator=operator)]

    def get_policy(self, vhost: str, name: str, *, operator: bool = False) -> dict:
        self._vhost(vhost)
        p = self._policy_store(vhost).get(name, operator=operator)
        if p is None:
            raise NotFoundError()
        return p.as_dict()

    def set_policy(self, vhost: str, name: str, pattern: Any, definition: Any, *, priority: Any = 0,
                   apply_to: str | None = "all", operator: bool = False) -> bool:
        """Create or replace a policy (or, with `operator`, an operator policy); the server
        applies it to existing queues at once."""
        self._vhost(vhost)
        if not isinstance(definition, dict):
            raise BadRequest("Validation failed\n\ndefinition must be an object\n")
        created = self._policy_store(vhost).get(name, operator=operator) is None
        try:
            self._srv.set_policy(vhost, name, pattern, definition, priority, apply_to or "all",
                                 operator=operator)
        except PolicyError as e:
            raise BadRequest(f"Validation failed\n\n{e}\n") from None
        except AMQPError as e:
            raise BadRequest(e.message) from None
        return created

    def clear_policy(self, vhost: str, name: str, *, operator: bool = False) -> None:
        self._vhost(vhost)
        if self._policy_store(vhost).get(name, operator=operator) is None:
            raise NotFoundError()
        self._srv.clear_policy(vhost, name, operator=operator)

    # -- connections, channels, consumers -----------------------------------------------------
    def _sessions(self) -> list:
        live = list(self.broker.sessions)
        now = int(time.time() * 1000)
        ids = {id(s) for s in live}
        for key in [k for k in self._connected_at if k not in ids]:
            del self._connected_at[key]
        for s in live:
            self._connected_at.setdefault(id(s), now)
        return live

    def list_connections(self, vhost: str | None = None) -> list[dict]:
        return [self._with_rates(connection_row(s, self.node, self._connected_at[id(s)]),
                                 ("connection", connection_name(s)), (), OCTET_KEYS)
                for s in self._sessions()
                if vhost is None or (s.vhost is not None and s.vhost.name == vhost)]

    def get_connection(self, name: str) -> dict:
        for row in self.list_connections():
            if row["name"] == name:
                return {**row, **{k: "" for k in TLS_KEYS if row[k] is None}}
        raise NotFoundError()

    def close_connection(self, name: str, reason: str | None = None) -> None:
        for s in self._sessions():
            if connection_name(s) == name:
                s.force_close(320, f"CONNECTION_FORCED - {reason or 'Closed via management plugin'}")
                return
        raise NotFoundError()

    def list_channels(self, vhost: str | None = None) -> list[dict]:
        return [self._with_rates(channel_row(s, ch, self.node),
                                 ("channel", channel_name(s, ch.number)), CHANNEL_KEYS)
                for s in self._sessions()
                if vhost is None or (s.vhost is not None and s.vhost.name == vhost)
                for ch in list(s.channels.values())]

    def list_consumers(self, vhost: str | None = None) -> list[dict]:
        return [row for s in self._sessions()
                if vhost is None or (s.vhost is not None and s.vhost.name == vhost)
                for ch in list(s.channels.values()) for row in consumer_rows(s, ch, self.node)]

