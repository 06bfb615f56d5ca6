"""Persisted node administration: users, permissions, vhosts, vhost limits and policies.

`Admin` is the node's `broker.admin`, built by `Broker`. Every mutation is validated by the pure
cores (`core.users`, `core.permissions`, `core.policies`), applied to the live broker and
proposed to the metadata Raft group (`use_replicated`, `server/cluster_meta.py`), from which
every node of the cluster (this one on restart too) applies it with `apply_record`.

Callers: the management facade `mgmt.admin.Admin` (HTTP API and, through it, `amqp-brokerctl`)
for every mutation; `permissions` is the node's one `core.permissions.PermissionStore`:
`Broker.open_vhost` calls its `check_vhost_access` and `Session` builds its `AccessChecker` from
it at connection.open; `VHost` calls `apply_queue_policy` for a new queue and reads `policies`
for exchanges; `node.open_broker` calls `apply_policies` after recovery. Listings (RabbitMQ's
JSON rows) are `mgmt`'s, not here.

Vhost limits are records of their own kind (`VHOST_LIMITS`, key [vhost], as RabbitMQ's
"vhost-limits" runtime parameters); user limits live in the user's record (its `limits`).

The defaults (default vhost, user and its permissions) are created by the first node that
finds the metadata without users (`seed`, through `ReplicatedMetadata.seed_defaults`).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Any

from amqp_broker.core.errors import NotFound
from amqp_broker.core.limits import validate_user_limits, validate_vhost_limits
from amqp_broker.core.permissions import Permission, PermissionStore
from amqp_broker.core.policies import PolicyStore, effective_definition, make_policy
from amqp_broker.core.users import User, UserStore
from amqp_broker.store import POLICY, USER, VHOST

if TYPE_CHECKING:
    from .broker import Broker
    from .vhost import VHost

__all__ = ["Admin"]

_log = logging.getLogger(__name__)
PERMISSION = "permission"
VHOST_LIMITS = "vhost-limits"
OPERATOR_POLICY = "operator_policy"  # a metadata record kind, as POLICY


class Admin:
    def __init__(self, broker: "Broker") -> None:
        self.broker = broker
        self.users = UserStore()
        self.permissions = PermissionStore()
        self.policies: dict[str, PolicyStore] = {}
        self.vhost_limits: dict[str, dict[str, int]] = {}  # only vhosts that have some
        self.replicated: Any = None  # cluster_meta.ReplicatedMetadata in a cluster

    # -- start-up -------------------------------------------------------------------------------
    def load(self) -> None:
        """A broker without a node (tests, tools): the defaults, in memory."""
        if not len(self.users):
            self.seed()

    def seed(self) -> None:
        """The default vhost, user and permissions (a first start)."""
        s = self.broker.settings
        self.add_vhost(s.default_vhost)
        tags = getattr(s, "default_user_tags", ("administrator",))
        self.add_user(s.default_user, s.default_pass, tags)
        perms = getattr(s, "default_permissions", (".*", ".*", ".*"))
        self.set_permissions(s.default_vhost, s.default_user, *perms)

    def use_replicated(self, replicated: Any) -> None:
        """From now on the cluster's metadata holds users, vhosts, permissions and policies."""
        self.replicated = replicated

    def apply_record(self, kind: str, key: tuple, value: Any) -> None:
        """A committed change of the cluster's metadata, applied to this node (the
        replicated store ignores what this reports while it applies)."""
        if kind == USER:
            if value is not None:
                self.put_user(User.from_definition(value))
            elif key[0] in self.users:
                self.delete_user(key[0])
        elif kind == VHOST:
            if value is not None:
                self.add_vhost(key[0])
            elif key[0] in self.broker.vhosts:
                self.delete_vhost(key[0])
        elif kind == PERMISSION:
            vhost, user = key
            if value is not None:
                self.permissions.set(user, vhost, *value)
            else:
                self.permissions.clear(user, vhost)
        elif kind == VHOST_LIMITS:
            if value:
                self.vhost_limits[key[0]] = dict(value)
            else:
                self.vhost_limits.pop(key[0], None)
        elif kind in (POLICY, OPERATOR_POLICY):
            vhost, name = key
            operator = kind == OPERATOR_POLICY
            if value is not None:
                self.broker.add_vhost(vhost)
                self.set_policy(vhost, name, value["pattern"], value["definition"],
                                value["priority"], value["apply-to"], operator=operator)
            else:
                self.clear_policy(vhost, name, operator=operator)

    def _put(self, kind: str, key: Any, value: Any) -> None:
        if self.replicated is not None:
            self.replicated.put_record(kind, key, value)

    def _delete(self, kind: str, key: Any) -> None:
        if self.replicated is not None:
            self.replicated.delete_record(kind, key)

    # -- users and permissions ----------------------------------------------------------------
    def add_user(self, name: str, password: str | None, tags=()) -> None:
        user = self.users.add(name, password, tags)
        self._put(USER, name, user.as_definition())

    def put_user(self, user: User) -> None:
        """Insert or replace `user` as is, and store it (definitions import of hash-only users)."""
        self.users.put(user)
        self._put(USER, user.name, user.as_definition())

    def delete_user(self, name: str) -> None:
        self.users.delete(name)
        self._delete(USER, name)
        for p in self.permissions.for_user(name):
            self.clear_permissions(p.vhost, p.user)

    def change_password(self, name: str, password: str) -> None:
        user = self.users.change_password(name, password)
        self._put(USER, name, user.as_definition())

    def set_user_tags(self, name: str, tags) -> None:
        user = self.users.set_tags(name, tags)
        self._put(USER, name, user.as_definition())

    def set_permissions(self, vhost: str, user: str, configure: str, write: str, read: str) -> Permission:
        """Raises NotFound, NoSuchUser, or PermissionError_ for a bad regular expression."""
        if vhost not in self.broker.vhosts:
            raise NotFound(f"vhost '{vhost}' not found")
        self.users[user]  # raises NoSuchUser
        p = self.permissions.set(user, vhost, configure, write, read)
        self._put(PERMISSION, [vhost, user], [configure, write, read])
        return p

    def clear_permissions(self, vhost: str, user: str) -> None:
        self.permissions.clear(user, vhost)
        self._delete(PERMISSION, [vhost, user])

    def set_user_limits(self, name: str, limits: dict) -> None:
        """Merge `limits` into the user's (rabbitmqctl set_user_limits, PUT
        /api/user-limits/USER/NAME). Raises NoSuchUser, LimitError."""
        user = self.users[name]
        merged = {**user.limits, **validate_user_limits(limits)}
        self.put_user(dataclasses.replace(user, limits=merged))

    def clear_user_limits(self, name: str, which: str = "all") -> None:
        """Drop one of the user's limits, or all of them."""
        user = self.users[name]
        kept = {} if which == "all" else {k: v for k, v in user.limits.items() if k != which}
        self.put_user(dataclasses.replace(user, limits=kept))

    def can_access_vhost(self, user: str, vhost: str) -> bool:
        return self.permissions.get(user, vhost) is not None

    # -- vhosts ---------------------------------------------------------------------------------
    def add_vhost(self, name: str) -> "VHost":
        vhost = self.broker.add_vhost(name)
        self._put(VHOST, name, {})
        return vhost

    def set_vhost_limits(self, vhost: str, limits: dict) -> None:
        """Replace the vhost's limits (rabbitmqctl set_vhost_limits; {} clears them). Raises
        NotFound, LimitError."""
        if vhost not in self.broker.vhosts:
            raise NotFound(f"vhost '{vhost}' not found")
        limits = validate_vhost_limits(limits)
        if limits:
            self.vhost_limits[vhost] = limits
            self._put(VHOST_LIMITS, [vhost], limits)
        elif self.vhost_limits.pop(vhost, None) is not None:
            self._delete(VHOST_LIMITS, [vhost])

    def delete_vhost(self, name: str) -> None:
        vhost = self.broker.vhosts.pop(name, None)
        if vhost is None:
            raise NotFound(f"vhost '{name}' not found")
        for session in list(self.broker.sessions):
            if session.vhost is vhost:
                session.force_close(320, f"CONNECTION_FORCED - vhost '{name}' is deleted")
        for rt in list(vhost.queues.values()):
            vhost.delete_queue_now(rt)
        for x in list(vhost.topology.exchanges()):
            if x.name and not x.name.startswith("amq."):
                vhost.delete_exchange(x.name, False)
        self._delete(VHOST, name)
        if self.vhost_limits.pop(name, None) is not None:
            self._delete(VHOST_LIMITS, [name])
        for p in self.permissions.for_vhost(name):
            self.clear_permissions(p.vhost, p.user)

    # -- policies -------------------------------------------------------------------------------
    def _policy_store(self, vhost: str) -> PolicyStore:
        store = self.policies.get(vhost)
        if store is None:
            store = self.policies[vhost] = PolicyStore(vhost)
        return store

    def set_policy(self, vhost: str, name: str, pattern: str, definition: dict,
                   priority: int = 0, apply_to: str = "all", *, operator: bool = False) -> None:
        """Validate (raises PolicyError), store, and apply to matching queues and exchanges.
        `operator`: an operator policy (its own names and keys; it caps what policies set)."""
        if vhost not in self.broker.vhosts:
            raise NotFound(f"vhost '{vhost}' not found")
        policy = make_policy(name, vhost, pattern, definition, priority, apply_to, operator=operator)
        self._policy_store(vhost).set(policy)
        self._put(OPERATOR_POLICY if operator else POLICY, [vhost, name],
                  {"pattern": pattern, "definition": dict(definition),
                   "priority": policy.priority, "apply-to": policy.apply_to})
        self.apply_policies(vhost)

    def clear_policy(self, vhost: str, name: str, *, operator: bool = False) -> None:
        if self._policy_store(vhost).delete(name, operator=operator):
            self._delete(OPERATOR_POLICY if operator else POLICY, [vhost, name])
            self.apply_policies(vhost)

    def list_policies(self, vhost: str | None = None) -> list[dict]:
        out = []
        for name, store in self.policies.items():
            if vhost is None or vhost == name:
                out.extend(p.as_dict() for p in store.list())
        return out

    def apply_policies(self, vhost_name: str) -> None:
        """Re-apply the vhost's policies to all its queues and exchanges (after a change)."""
        vhost = self.broker.vhosts.get(vhost_name)
        if vhost is None:
            return
        for rt in vhost.queues.values():
            self.apply_queue_policy(vhost_name, rt)
        store = self._policy_store(vhost_name)
        for x in vhost.topology.exchanges():
            x.policy_alternate = store.exchange_alternate(x.name) if x.name else None
        self.broker.run_pending()

    def apply_queue_policy(self, vhost_name: str, rt) -> None:
        """Give queue runtime `rt` the arguments of the policy (and operator policy) matching it."""
        store = self.policies.get(vhost_name)
        if store is None:
            return
        policy, op = store.for_queue(rt.name, rt.queue_type)
        rt.queue.apply_policy(effective_definition(policy, op) if (policy or op) else None)
        rt.kick()
        mirrors = getattr(self.broker, "mirror_conversions", None)
        if mirrors is not None and policy is not None and "ha-mode" in policy.definition:
            mirrors.consider(vhost_name, rt)  # an existing classic queue becomes mirrored
