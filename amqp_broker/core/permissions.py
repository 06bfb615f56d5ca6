"""Per-user, per-vhost permissions and the checks every AMQP operation needs, as RabbitMQ does.

A user has, in each vhost, three regular expressions: configure, write and read. A resource
name is allowed when the expression *matches somewhere in it* (``re.search``, like Erlang's
``re:run``); an empty expression allows nothing (RabbitMQ turns "" into "^$"). The default
exchange "" is checked under the name ``amq.default``.

Which permission an AMQP method needs (``rabbit_channel`` check_*_permitted), in RabbitMQ's
order, so the first refusal names the same resource RabbitMQ names:

=====================  ==========================================================
queue.declare          configure on the queue; with x-dead-letter-exchange also read
                       on the queue and write on the DLX
  passive              nothing (3.x, leaks existence), or with ``passive_needs_any``
                       (RabbitMQ 4.3.1+) at least one of the three on the queue
queue.delete           configure on the queue
queue.purge            read on the queue
queue.bind / unbind    write on the queue, then read on the exchange
exchange.declare       configure on the exchange; with alternate-exchange also read on
                       the exchange and write on the AE. Passive: as queue.declare
exchange.delete        configure on the exchange
exchange.bind / unbind write on the destination, then read on the source
basic.publish          write on the exchange
basic.consume / get    read on the queue
=====================  ==========================================================

Topic permissions (per-exchange routing-key patterns) are not implemented: every routing key
is allowed once write on the exchange is.

Callers: ``server/admin.py`` owns the node's ``PermissionStore`` (persisting every change; the
management API and CLI edit it through there) and ``server/broker.py`` calls
``check_vhost_access`` on connection.open. ``server/session.py`` then builds one
``AccessChecker`` per connection with ``PermissionStore.checker``; its channels
(``channel.py``, ``declares.py``, ``consumers.py``) call it before each operation.
Pure: no IO.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Container, Iterable, Literal, Mapping

from .errors import AccessRefused, NotAllowed, vhost_resource

__all__ = [
    "AccessChecker", "Permission", "PermissionError_", "PermissionStore", "Requirement",
    "access_refused", "checker_options", "requirements",
]

Kind = Literal["configure", "write", "read"]
Resource = Literal["queue", "exchange"]
_KINDS: tuple[Kind, ...] = ("configure", "write", "read")
_DEFAULT_REFUSED = "operation not permitted on the default exchange"


class PermissionError_(ValueError):  # trailing _ : do not shadow the builtin
    """Invalid permission input (a bad regular expression)."""


def _compile(pattern: str, kind: str) -> re.Pattern[str]:
    if not isinstance(pattern, str):  # e.g. a number in a management API body
        raise PermissionError_(f"invalid {kind} regular expression {pattern!r}: not a string")
    try:
        return re.compile(pattern or "^$")
    except re.error as exc:
        raise PermissionError_(f"invalid {kind} regular expression {pattern!r}: {exc}") from None


@dataclass(frozen=True, slots=True)
class Permission:
    """One user's permissions in one vhost."""

    user: str
    vhost: str
    configure: str = ".*"
    write: str = ".*"
    read: str = ".*"
    _compiled: tuple[re.Pattern[str], ...] = field(default=(), repr=False, compare=False)

    def __post_init__(self) -> None:
        compiled = tuple(_compile(getattr(self, k), k) for k in _KINDS)
        object.__setattr__(self, "_compiled", compiled)

    def allows(self, kind: Kind, name: str) -> bool:
        return self._compiled[_KINDS.index(kind)].search(name) is not None

    def allows_any(self, name: str) -> bool:
        return any(p.search(name) is not None for p in self._compiled)

    def as_definition(self) -> dict[str, str]:
        return {"user": self.user, "vhost": self.vhost, "configure": self.configure,
                "write": self.write, "read": self.read}

    @classmethod
    def from_definition(cls, d: Mapping[str, Any]) -> "Permission":
        return cls(d["user"], d["vhost"], d.get("configure", ""), d.get("write", ""), d.get("read", ""))


@dataclass(frozen=True, slots=True)
class Requirement:
    """One check: ``kind`` permission on the ``resource`` called ``name`` ("" = any of the three).

    ``name == ""`` (exchange) is RabbitMQ's check_not_default_exchange: never allowed.
    """

    resource: Resource
    name: str
    kind: Kind | Literal[""]


def _exchange(name: str) -> str:
    return name or "amq.default"


def _not_default(*exchanges: str) -> list[Requirement]:
    # Binding to or from the default exchange: refused after the write check, before read.
    return [Requirement("exchange", "", "")] if "" in exchanges else []


def requirements(operation: str, *, queue: str = "", exchange: str = "", destination: str = "",
                 source: str = "", arguments: Mapping[str, Any] | None = None, passive: bool = False,
                 passive_needs_any: bool = False) -> list[Requirement]:
    """The checks ``operation`` (an AMQP method name such as "queue.bind") needs, in order."""
    args = arguments or {}
    match operation:
        case "queue.declare" if passive:
            return [Requirement("queue", queue, "")] if passive_needs_any else []
        case "queue.declare":
            reqs = [Requirement("queue", queue, "configure")]
            dlx = args.get("x-dead-letter-exchange")
            if isinstance(dlx, (str, bytes)):
                dlx = dlx.decode() if isinstance(dlx, bytes) else dlx
                reqs += [Requirement("queue", queue, "read"), Requirement("exchange", _exchange(dlx), "write")]
            return reqs
        case "queue.delete":
            return [Requirement("queue", queue, "configure")]
        case "queue.purge" | "basic.consume" | "basic.get":
            return [Requirement("queue", queue, "read")]
        case "queue.bind" | "queue.unbind":
            return [Requirement("queue", queue, "write"), *_not_default(exchange),
                    Requirement("exchange", exchange, "read")]
        case "exchange.declare" if passive:
            return [Requirement("exchange", _exchange(exchange), "")] if passive_needs_any else []
        case "exchange.declare":
            name = _exchange(exchange)
            reqs = [Requirement("exchange", name, "configure")]
            ae = args.get("alternate-exchange")
            if isinstance(ae, (str, bytes)):
                ae = ae.decode() if isinstance(ae, bytes) else ae
                reqs += [Requirement("exchange", name, "read"), Requirement("exchange", _exchange(ae), "write")]
            return reqs
        case "exchange.delete":
            return [Requirement("exchange", _exchange(exchange), "configure")]
        case "exchange.bind" | "exchange.unbind":
            return [Requirement("exchange", _exchange(destination), "write"), *_not_default(destination, source),
                    Requirement("exchange", source, "read")]
        case "basic.publish":
            return [Requirement("exchange", _exchange(exchange), "write")]
    raise ValueError(f"no permission rule for {operation!r}")


def access_refused(req: Requirement, vhost: str, user: str, name_permission: bool = False) -> AccessRefused:
    """RabbitMQ's text: "access to queue 'q' in vhost '/' refused for user 'u'".

    RabbitMQ 3.10 sends exactly that; later versions put the permission first
    ("configure access to ..."), which ``name_permission=True`` reproduces.
    """
    if req.resource == "exchange" and req.name == "":
        return AccessRefused(_DEFAULT_REFUSED)
    prefix = f"{req.kind or 'configure'} " if name_permission else ""
    return AccessRefused(f"{prefix}access to {vhost_resource(req.resource, req.name, vhost)} refused for user '{user}'")


def checker_options(compat_profile: str) -> dict[str, bool]:
    """``PermissionStore.checker`` options for a compat profile ("rabbitmq-3.10", "-4.2", "-4.3").

    3.10 sends "access to ..." (checked against 3.10.8); 4.x names the permission
    ("configure access to ..."); 4.3(.1) also refuses passive declares without any permission.
    """
    return {"name_permission": compat_profile != "rabbitmq-3.10",
            "passive_needs_any": compat_profile == "rabbitmq-4.3"}


class PermissionStore:
    """Permissions by (user, vhost). Mutable; the metadata layer owns one and replicates it."""

    def __init__(self, permissions: Iterable[Permission] = ()) -> None:
        self._perms: dict[tuple[str, str], Permission] = {}
        # Bumped on every change, so checkers know when their per-name cache is stale.
        self.version = 0
        for p in permissions:
            self.put(p)

    def set(self, user: str, vhost: str, configure: str, write: str, read: str) -> Permission:
        """rabbitmqctl set_permissions -p VHOST USER CONF WRITE READ (validates the regexes)."""
        p = Permission(user, vhost, configure, write, read)
        self.put(p)
        return p

    def put(self, permission: Permission) -> None:
        self._perms[(permission.user, permission.vhost)] = permission
        self.version += 1

    def clear(self, user: str, vhost: str) -> bool:
        """rabbitmqctl clear_permissions; True if there was something to clear."""
        self.version += 1
        return self._perms.pop((user, vhost), None) is not None

    def get(self, user: str, vhost: str) -> Permission | None:
        return self._perms.get((user, vhost))

    def list(self) -> list[Permission]:
        """Sorted by vhost, then user (deterministic on every node)."""
        return [self._perms[k] for k in sorted(self._perms, key=lambda k: (k[1], k[0]))]

    def for_vhost(self, vhost: str) -> list[Permission]:
        return [p for p in self.list() if p.vhost == vhost]

    def for_user(self, user: str) -> list[Permission]:
        return [p for p in self.list() if p.user == user]

    def delete_user(self, user: str) -> None:
        for key in [k for k in self._perms if k[0] == user]:
            self.clear(*key)

    def delete_vhost(self, vhost: str) -> None:
        for key in [k for k in self._perms if k[1] == vhost]:
            self.clear(*key)

    def check_vhost_access(self, user: str, vhost: str, vhosts: Container[str] | None = None) -> None:
        """connection.open: 530 if the vhost does not exist or the user has no permissions in it."""
        if vhosts is not None and vhost not in vhosts:
            raise NotAllowed(f"vhost {vhost} not found")
        if (user, vhost) not in self._perms:
            raise NotAllowed(f"access to vhost '{vhost}' refused for user '{user}'")

    def checker(self, user: str, vhost: str, *, passive_needs_any: bool = False,
                name_permission: bool = False) -> "AccessChecker":
        """Checks for one connection (or channel). Later changes to the store apply to it."""
        return AccessChecker(self, user, vhost, passive_needs_any, name_permission)


class AccessChecker:
    """Raises ``AccessRefused`` (403, closes the channel) when ``user`` may not do an operation.

    ``passive_needs_any``: RabbitMQ 4.3.1's rule for passive declares (compat profile 4.3).
    ``name_permission``: the 4.x text that names the permission ("write access to ...").

    Results are cached per (permission kind, name) until the store changes, so an operation on a
    name already seen costs a version compare and one dict lookup (``basic_publish`` relies
    on it). The cache lives as long as the checker: one connection.
    """

    __slots__ = ("store", "user", "vhost", "passive_needs_any", "name_permission", "_version", "_cache")

    def __init__(self, store: PermissionStore, user: str, vhost: str, passive_needs_any: bool = False,
                 name_permission: bool = False) -> None:
        self.store = store
        self.user = user
        self.vhost = vhost
        self.passive_needs_any = passive_needs_any
        self.name_permission = name_permission
        self._version = -1  # never a store version: the first check fills the cache
        self._cache: dict[tuple[str, str], bool] = {}  # (kind, name) -> allowed; kind "" = any

    def check(self, operation: str, **names: Any) -> None:
        """``check("queue.bind", queue="q", exchange="x")``; see ``requirements`` for names."""
        for req in requirements(operation, passive_needs_any=self.passive_needs_any, **names):
            if not self._allows(req):
                raise access_refused(req, self.vhost, self.user, self.name_permission)

    def _allows(self, req: Requirement) -> bool:
        if req.resource == "exchange" and req.name == "":
            return False  # RabbitMQ's check_not_default_exchange
        if self._version != self.store.version:
            self._cache.clear()
            self._version = self.store.version
        key = (req.kind, req.name)
        allowed = self._cache.get(key)
        if allowed is None:
            perm = self.store.get(self.user, self.vhost)
            allowed = perm is not None and (perm.allows(req.kind, req.name) if req.kind
                                            else perm.allows_any(req.name))
            self._cache[key] = allowed
        return allowed

    # One method per AMQP operation, for readable call sites in the channel.
    def queue_declare(self, queue: str, arguments: Mapping[str, Any] | None = None, passive: bool = False) -> None:
        self.check("queue.declare", queue=queue, arguments=arguments, passive=passive)

    def queue_delete(self, queue: str) -> None:
        self.check("queue.delete", queue=queue)

    def queue_purge(self, queue: str) -> None:
        self.check("queue.purge", queue=queue)

    def queue_bind(self, queue: str, exchange: str) -> None:
        self.check("queue.bind", queue=queue, exchange=exchange)

    def queue_unbind(self, queue: str, exchange: str) -> None:
        self.check("queue.unbind", queue=queue, exchange=exchange)

    def exchange_declare(self, exchange: str, arguments: Mapping[str, Any] | None = None,
                         passive: bool = False) -> None:
        self.check("exchange.declare", exchange=exchange, arguments=arguments, passive=passive)

    def exchange_delete(self, exchange: str) -> None:
        self.check("exchange.delete", exchange=exchange)

    def exchange_bind(self, destination: str, source: str) -> None:
        self.check("exchange.bind", destination=destination, source=source)

    def exchange_unbind(self, destination: str, source: str) -> None:
        self.check("exchange.unbind", destination=destination, source=source)

    def basic_publish(self, exchange: str) -> None:
        # Every publish comes here: answer from the cache when the name was allowed before.
        if self._version != self.store.version or not self._cache.get(("write", exchange or "amq.default")):
            self.check("basic.publish", exchange=exchange)

    def basic_consume(self, queue: str) -> None:
        self.check("basic.consume", queue=queue)

    def basic_get(self, queue: str) -> None:
        self.check("basic.get", queue=queue)
