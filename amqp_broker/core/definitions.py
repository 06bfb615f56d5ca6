"""RabbitMQ's definitions JSON (export/import) to and from plain, validated records.

The format is the one ``rabbitmqctl export_definitions`` and ``GET /api/definitions`` produce:
an object with ``rabbit_version``, ``rabbitmq_version``, ``product_name``, ``product_version``
and the lists ``users``, ``vhosts``, ``permissions``, ``topic_permissions``, ``parameters``,
``global_parameters``, ``policies``, ``queues``, ``exchanges``, ``bindings``.
``parse_definitions`` validates a whole document and reports every problem with its place
(``queues[2].durable: expected true or false, got 'yes'``); ``export_definitions`` builds the
document from ``Definitions`` the server fills from its metadata.

Like RabbitMQ: a per-vhost export (no ``vhost`` fields) imports into the vhost given;
exchanges named ``amq.*`` or "" are not imported (reserved) but reported in ``skipped``;
users may carry 3.x's comma-separated tag string. Not covered: operator policies and vhost
limits beyond storing them. Callers: the management API (GET/POST /api/definitions), the
CLI (export_definitions / import_definitions), start-up definitions loading. Pure: JSON
text or data in, records out; no files.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from .permissions import Permission, PermissionError_
from .policies import APPLY_TO_ALL_VERSIONS, Policy, PolicyError, make_policy
from .users import RandomBytes, User, UserError

__all__ = [
    "Binding", "Definitions", "DefinitionsError", "Exchange", "GlobalParameter", "Parameter",
    "Queue", "TopicPermission", "VHost", "export_definitions", "initial_definitions", "parse_definitions",
]

_SECTIONS = ("users", "vhosts", "permissions", "topic_permissions", "parameters", "global_parameters",
             "policies", "queues", "exchanges", "bindings")
_EXCHANGE_TYPES = ("direct", "fanout", "topic", "headers", "x-consistent-hash", "x-delayed-message",
                   "x-local-random", "x-jms-topic", "x-random", "x-modulus-hash", "x-recent-history")


class DefinitionsError(ValueError):
    """The document cannot be imported; ``problems`` lists each as "place: what is wrong"."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("invalid definitions:\n" + "\n".join(self.problems))


@dataclass(frozen=True, slots=True)
class VHost:
    name: str
    description: str = ""
    tags: tuple[str, ...] = ()
    default_queue_type: str | None = None
    limits: Mapping[str, int] = field(default_factory=dict)

    def as_definition(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "description": self.description, "tags": list(self.tags),
                             "metadata": {"description": self.description, "tags": list(self.tags)}}
        if self.default_queue_type:
            d["default_queue_type"] = self.default_queue_type
            d["metadata"]["default_queue_type"] = self.default_queue_type
        if self.limits:
            d["limits"] = dict(self.limits)
        return d


@dataclass(frozen=True, slots=True)
class TopicPermission:
    user: str
    vhost: str
    exchange: str
    write: str
    read: str

    def as_definition(self) -> dict[str, Any]:
        return {"user": self.user, "vhost": self.vhost, "exchange": self.exchange,
                "write": self.write, "read": self.read}


@dataclass(frozen=True, slots=True)
class Parameter:
    """A runtime parameter (federation upstream, shovel ...): stored, not interpreted."""

    vhost: str
    component: str
    name: str
    value: Any

    def as_definition(self) -> dict[str, Any]:
        return {"value": self.value, "vhost": self.vhost, "component": self.component, "name": self.name}


@dataclass(frozen=True, slots=True)
class GlobalParameter:
    name: str
    value: Any

    def as_definition(self) -> dict[str, Any]:
        return {"name": self.name, "value": self.value}


@dataclass(frozen=True, slots=True)
class Queue:
    name: str
    vhost: str
    durable: bool = True
    auto_delete: bool = False
    arguments: Mapping[str, Any] = field(default_factory=dict)

    @property
    def queue_type(self) -> str:
        return str(self.arguments.get("x-queue-type", "classic"))

    def as_definition(self) -> dict[str, Any]:
        return {"name": self.name, "vhost": self.vhost, "durable": self.durable,
                "auto_delete": self.auto_delete, "arguments": dict(self.arguments)}


@dataclass(frozen=True, slots=True)
class Exchange:
    name: str
    vhost: str
    type: str
    durable: bool = True
    auto_delete: bool = False
    internal: bool = False
    arguments: Mapping[str, Any] = field(default_factory=dict)

    def as_definition(self) -> dict[str, Any]:
        return {"name": self.name, "vhost": self.vhost, "type": self.type, "durable": self.durable,
                "auto_delete": self.auto_delete, "internal": self.internal, "arguments": dict(self.arguments)}


@dataclass(frozen=True, slots=True)
class Binding:
    source: str
    vhost: str
    destination: str
    destination_type: str  # "queue" or "exchange"
    routing_key: str = ""
    arguments: Mapping[str, Any] = field(default_factory=dict)

    def as_definition(self) -> dict[str, Any]:
        return {"source": self.source, "vhost": self.vhost, "destination": self.destination,
                "destination_type": self.destination_type, "routing_key": self.routing_key,
                "arguments": dict(self.arguments)}


@dataclass(frozen=True)
class Definitions:
    """Everything a definitions document holds, as records. Lists keep the document's order."""

    users: tuple[User, ...] = ()
    vhosts: tuple[VHost, ...] = ()
    permissions: tuple[Permission, ...] = ()
    topic_permissions: tuple[TopicPermission, ...] = ()
    parameters: tuple[Parameter, ...] = ()
    global_parameters: tuple[GlobalParameter, ...] = ()
    policies: tuple[Policy, ...] = ()
    queues: tuple[Queue, ...] = ()
    exchanges: tuple[Exchange, ...] = ()
    bindings: tuple[Binding, ...] = ()
    # Version fields of the document read (empty when built by the server).
    versions: Mapping[str, str] = field(default_factory=dict)
    # What import leaves out on purpose, with why (e.g. reserved amq.* exchanges).
    skipped: tuple[str, ...] = ()


def initial_definitions(user: str, password: str, vhost: str = "/",
                        permissions: tuple[str, str, str] = (".*", ".*", ".*"),
                        tags: Iterable[str] = ("administrator",),
                        random_bytes: RandomBytes = os.urandom) -> Definitions:
    """What a node creates on its first start: default_vhost, default_user with its tags and
    permissions (configure, write, read) there. The server passes its ``BrokerSettings`` fields."""
    u = User(user, tags=tuple(tags)).with_password(password, random_bytes)
    return Definitions(users=(u,), vhosts=(VHost(vhost),), permissions=(Permission(user, vhost, *permissions),))


def export_definitions(defs: Definitions, *, product_name: str, product_version: str,
                       rabbit_version: str | None = None) -> dict[str, Any]:
    """The JSON-ready document. ``rabbit_version`` defaults to ``product_version``.

    Reserved exchanges (``amq.*``, "") are left out, as RabbitMQ does; the caller leaves out
    exclusive queues.
    """
    version = rabbit_version or product_version
    return {
        "rabbit_version": version, "rabbitmq_version": version,
        "product_name": product_name, "product_version": product_version,
        "users": [u.as_definition() for u in defs.users],
        "vhosts": [v.as_definition() for v in defs.vhosts],
        "permissions": [p.as_definition() for p in defs.permissions],
        "topic_permissions": [t.as_definition() for t in defs.topic_permissions],
        "parameters": [p.as_definition() for p in defs.parameters],
        "global_parameters": [g.as_definition() for g in defs.global_parameters],
        "policies": [p.as_dict() for p in defs.policies],
        "queues": [q.as_definition() for q in defs.queues],
        "exchanges": [e.as_definition() for e in defs.exchanges if not _reserved(e.name)],
        "bindings": [b.as_definition() for b in defs.bindings],
    }


def _reserved(exchange: str) -> bool:
    return exchange == "" or exchange.startswith("amq.")


def parse_definitions(document: Mapping[str, Any] | str | bytes, *, vhost: str | None = None,
                      apply_to_values: tuple[str, ...] = APPLY_TO_ALL_VERSIONS) -> Definitions:
    """Validate a definitions document (parsed JSON or its text) into ``Definitions``.

    ``vhost``: the target of a per-vhost export, used where an entry has no ``vhost``.
    ``apply_to_values``: policy apply-to values the compat profile knows.
    Raises ``DefinitionsError`` listing every problem.
    """
    if isinstance(document, (str, bytes)):
        try:
            document = json.loads(document)
        except ValueError as exc:
            raise DefinitionsError([f"not valid JSON: {exc}"]) from None
    if not isinstance(document, Mapping):
        raise DefinitionsError([f"expected a JSON object, got {type(document).__name__}"])
    r = _Reader(vhost)
    lists = {name: r.section(document, name) for name in _SECTIONS}
    defs = Definitions(
        users=r.each(lists["users"], "users", _user),
        vhosts=r.each(lists["vhosts"], "vhosts", _vhost),
        permissions=r.each(lists["permissions"], "permissions", _permission),
        topic_permissions=r.each(lists["topic_permissions"], "topic_permissions", _topic_permission),
        parameters=r.each(lists["parameters"], "parameters", _parameter),
        global_parameters=r.each(lists["global_parameters"], "global_parameters", _global_parameter),
        policies=r.each(lists["policies"], "policies", lambda r, e: _policy(r, e, apply_to_values)),
        queues=r.each(lists["queues"], "queues", _queue),
        exchanges=r.each(lists["exchanges"], "exchanges", _exchange),
        bindings=r.each(lists["bindings"], "bindings", _binding),
        versions={k: document[k] for k in _VERSION_KEYS if isinstance(document.get(k), str)},
    )
    defs = _drop_reserved(defs)
    r.duplicates(defs)
    if r.problems:
        raise DefinitionsError(r.problems)
    return defs


_VERSION_KEYS = ("rabbit_version", "rabbitmq_version", "product_name", "product_version")


class _Reader:
    """Reads fields of one entry at a time, collecting problems with their place."""

    def __init__(self, vhost: str | None) -> None:
        self.vhost = vhost
        self.problems: list[str] = []
        self.where = ""

    def fail(self, field_name: str, message: str) -> None:
        self.problems.append(f"{self.where}.{field_name}: {message}" if field_name else f"{self.where}: {message}")

    def section(self, document: Mapping[str, Any], name: str) -> list[Any]:
        value = document.get(name, [])
        if value is None:
            return []
        if not isinstance(value, list):
            self.problems.append(f"{name}: expected a list, got {_show(value)}")
            return []
        return value

    def each(self, entries: list[Any], section: str, read: Callable[["_Reader", Mapping[str, Any]], Any]) -> tuple:
        out = []
        for i, entry in enumerate(entries):
            self.where = f"{section}[{i}]"
            if not isinstance(entry, Mapping):
                self.fail("", f"expected an object, got {_show(entry)}")
                continue
            before = len(self.problems)
            try:
                record = read(self, entry)
            except (UserError, PermissionError_, PolicyError) as exc:
                self.fail("", str(exc))
                continue
            if len(self.problems) == before:
                out.append(record)
        return tuple(out)

    def text(self, e: Mapping[str, Any], key: str, default: str | None = None, *, empty_ok: bool = True) -> str:
        if key not in e or e[key] is None:
            if key == "vhost" and self.vhost is not None:
                return self.vhost
            if default is None:
                self.fail(key, "missing")
                return ""
            return default
        value = e[key]
        if not isinstance(value, str) or (not empty_ok and not value):
            self.fail(key, f"expected a {'non-empty ' if not empty_ok else ''}string, got {_show(value)}")
            return ""
        return value

    def flag(self, e: Mapping[str, Any], key: str, default: bool) -> bool:
        value = e.get(key, default)
        if isinstance(value, str) and value in ("true", "false"):  # older exports quoted them
            return value == "true"
        if not isinstance(value, bool):
            self.fail(key, f"expected true or false, got {_show(value)}")
            return default
        return value

    def table(self, e: Mapping[str, Any], key: str) -> dict[str, Any]:
        value = e.get(key)
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            self.fail(key, f"expected an object, got {_show(value)}")
            return {}
        return dict(value)

    def strings(self, e: Mapping[str, Any], key: str) -> tuple[str, ...]:
        value = e.get(key) or []
        if isinstance(value, str):
            value = [t for t in value.split(",") if t]
        if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
            self.fail(key, f"expected a list of strings, got {_show(value)}")
            return ()
        return tuple(value)

    def duplicates(self, defs: Definitions) -> None:
        keyed: list[tuple[str, Iterable[Any], Callable[[Any], str]]] = [
            ("users", defs.users, lambda u: f"user '{u.name}'"),
            ("vhosts", defs.vhosts, lambda v: f"vhost '{v.name}'"),
            ("permissions", defs.permissions, lambda p: f"permissions of user '{p.user}' in vhost '{p.vhost}'"),
            ("policies", defs.policies, lambda p: f"policy '{p.name}' in vhost '{p.vhost}'"),
            ("queues", defs.queues, lambda q: f"queue '{q.name}' in vhost '{q.vhost}'"),
            ("exchanges", defs.exchanges, lambda x: f"exchange '{x.name}' in vhost '{x.vhost}'"),
        ]
        for section, records, label in keyed:
            seen: set[str] = set()
            for rec in records:
                name = label(rec)
                if name in seen:
                    self.problems.append(f"{section}: {name} is defined twice")
                seen.add(name)


def _show(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _user(r: _Reader, e: Mapping[str, Any]) -> User:
    name = r.text(e, "name", empty_ok=False)
    password_hash = r.text(e, "password_hash", "")
    algorithm = r.text(e, "hashing_algorithm", "rabbit_password_hashing_sha256")
    tags = r.strings(e, "tags")
    limits = r.table(e, "limits")
    return User.from_definition({"name": name, "password_hash": password_hash, "hashing_algorithm": algorithm,
                                 "tags": list(tags), "limits": limits})


def _vhost(r: _Reader, e: Mapping[str, Any]) -> VHost:
    meta = r.table(e, "metadata")
    description = e.get("description", meta.get("description", "")) or ""
    if not isinstance(description, str):
        r.fail("description", f"expected a string, got {_show(description)}")
    tags = r.strings(e, "tags") if "tags" in e else r.strings(meta, "tags")
    dqt = e.get("default_queue_type", meta.get("default_queue_type"))
    if dqt is not None and dqt not in ("classic", "quorum", "stream"):
        r.fail("default_queue_type", f"expected classic, quorum or stream, got {_show(dqt)}")
    return VHost(r.text(e, "name", empty_ok=False), str(description), tags, dqt, r.table(e, "limits"))


def _permission(r: _Reader, e: Mapping[str, Any]) -> Permission:
    return Permission(r.text(e, "user", empty_ok=False), r.text(e, "vhost", empty_ok=False),
                      r.text(e, "configure"), r.text(e, "write"), r.text(e, "read"))


def _topic_permission(r: _Reader, e: Mapping[str, Any]) -> TopicPermission:
    return TopicPermission(r.text(e, "user", empty_ok=False), r.text(e, "vhost", empty_ok=False),
                           r.text(e, "exchange", empty_ok=False), r.text(e, "write"), r.text(e, "read"))


def _parameter(r: _Reader, e: Mapping[str, Any]) -> Parameter:
    if "value" not in e:
        r.fail("value", "missing")
    return Parameter(r.text(e, "vhost", empty_ok=False), r.text(e, "component", empty_ok=False),
                     r.text(e, "name", empty_ok=False), e.get("value"))


def _global_parameter(r: _Reader, e: Mapping[str, Any]) -> GlobalParameter:
    if "value" not in e:
        r.fail("value", "missing")
    return GlobalParameter(r.text(e, "name", empty_ok=False), e.get("value"))


def _policy(r: _Reader, e: Mapping[str, Any], apply_to_values: tuple[str, ...]) -> Policy | None:
    name, vhost = r.text(e, "name", empty_ok=False), r.text(e, "vhost", empty_ok=False)
    pattern, definition = r.text(e, "pattern"), r.table(e, "definition")
    apply_to = r.text(e, "apply-to", "all")
    if r.problems and r.problems[-1].startswith(r.where + "."):
        return None
    return make_policy(name, vhost, pattern, definition, e.get("priority", 0), apply_to,
                       apply_to_values=apply_to_values)


def _queue(r: _Reader, e: Mapping[str, Any]) -> Queue:
    q = Queue(r.text(e, "name", empty_ok=False), r.text(e, "vhost", empty_ok=False), r.flag(e, "durable", True),
              r.flag(e, "auto_delete", False), r.table(e, "arguments"))
    # 4.x exports carry "type"; keep it as the argument every queue layer reads.
    qtype = e.get("type")
    if isinstance(qtype, str) and qtype and "x-queue-type" not in q.arguments and qtype != "classic":
        q = Queue(q.name, q.vhost, q.durable, q.auto_delete, {**q.arguments, "x-queue-type": qtype})
    if q.queue_type not in ("classic", "quorum", "stream", "partitioned"):
        r.fail("arguments", "x-queue-type: expected classic, quorum, stream or partitioned, got "
               f"{_show(q.queue_type)}")
    return q


def _exchange(r: _Reader, e: Mapping[str, Any]) -> Exchange:
    xtype = r.text(e, "type", empty_ok=False)
    if xtype and xtype not in _EXCHANGE_TYPES:
        r.fail("type", f"unknown exchange type {xtype!r}")
    return Exchange(r.text(e, "name"), r.text(e, "vhost", empty_ok=False), xtype, r.flag(e, "durable", True),
                    r.flag(e, "auto_delete", False), r.flag(e, "internal", False), r.table(e, "arguments"))


def _binding(r: _Reader, e: Mapping[str, Any]) -> Binding:
    dtype = r.text(e, "destination_type", empty_ok=False)
    if dtype and dtype not in ("queue", "exchange"):
        r.fail("destination_type", f"expected queue or exchange, got {_show(dtype)}")
    return Binding(r.text(e, "source"), r.text(e, "vhost", empty_ok=False), r.text(e, "destination", empty_ok=False),
                   dtype, r.text(e, "routing_key", ""), r.table(e, "arguments"))


def _drop_reserved(defs: Definitions) -> Definitions:
    kept = tuple(x for x in defs.exchanges if not _reserved(x.name))
    skipped = tuple(f"exchange '{x.name}' in vhost '{x.vhost}': names starting with 'amq.' are reserved"
                    if x.name else f"the default exchange in vhost '{x.vhost}' cannot be redefined"
                    for x in defs.exchanges if _reserved(x.name))
    return Definitions(defs.users, defs.vhosts, defs.permissions, defs.topic_permissions, defs.parameters,
                       defs.global_parameters, defs.policies, defs.queues, kept, defs.bindings,
                       defs.versions, defs.skipped + skipped)
