"""The management API's paths: one `dispatch(admin, req)` from (method, path segments, query,
JSON body, user) to a `Reply`, with RabbitMQ's paths, status codes and JSON shapes.

Called by `http.py` after authentication (which already read the body and decoded each path
segment separately, so "%2F" is the vhost "/"). Sync and free of HTTP framework types, so it is
easy to test and to read; everything it does goes through `admin.Admin`.
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field
from typing import Any

from . import health
from .errors import BadRequest, NotFoundError
from .rows import same_properties_key

__all__ = ["Req", "Reply", "dispatch", "needs_admin"]


@dataclass(slots=True)
class Req:
    method: str
    segs: list[str]
    query: dict[str, str] = field(default_factory=dict)
    body: Any = None
    user: Any = None  # core.users.User
    headers: dict[str, str] = field(default_factory=dict)

    def field(self, name: str, default: Any = None) -> Any:
        return self.body.get(name, default) if isinstance(self.body, dict) else default


@dataclass(slots=True)
class Reply:
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    pageable: bool = False  # a listing `http.py` sorts and pages (`paging.paginate`)


def _listing(rows: list[dict]) -> Reply:
    return Reply(200, rows, pageable=True)


_OK = Reply(204)
_MOVE_BATCH = 10_000  # messages one move request takes (it runs in one step of the node's loop)
_ADMIN_ONLY = ("users", "permissions", "definitions", "user-limits", "ctl", "rebalance")


def needs_admin(req: Req) -> bool:
    """Endpoints only administrators may use (RabbitMQ answers 401 "Not administrator user")."""
    if not req.segs:
        return False
    top = req.segs[0]
    if top in _ADMIN_ONLY:
        return True
    if top == "queues" and len(req.segs) >= 4 and req.segs[3] == "members":
        return True  # replica membership: rabbitmq-queues is an operator's tool
    # any management user may read operator policies (of the vhosts they can access)
    return top in ("vhosts", "vhost-limits", "operator-policies") and \
        req.method in ("PUT", "DELETE")


def _created(flag: bool) -> Reply:
    return Reply(201) if flag else Reply(204)


def _bool(v: Any) -> bool:
    return v in (True, "true", "True", 1)


def dispatch(admin, req: Req) -> Reply:
    top = req.segs[0] if req.segs else ""
    handler = _HANDLERS.get(top)
    if handler is None:
        raise NotFoundError()
    return handler(admin, req, req.method, req.segs[1:])


def _overview(admin, req, m, rest) -> Reply:
    match m, rest:
        case "GET", []:
            return Reply(200, admin.overview_with_history(_age(req, "msg_rates_age"),
                                                          _age(req, "lengths_age")))
    raise NotFoundError()


def _age(req: Req, key: str) -> float | None:
    """A positive number of seconds from the query, else None."""
    try:
        value = float(req.query.get(key, ""))
    except ValueError:
        return None
    return value if value > 0 else None


def _whoami(admin, req, m, rest) -> Reply:
    return Reply(200, {"name": req.user.name, "tags": list(req.user.tags)})


def _nodes(admin, req, m, rest) -> Reply:
    match m, rest:
        case "GET", []:
            return Reply(200, admin.nodes())
        case "GET", [name]:
            return Reply(200, admin.get_node(name))
    raise NotFoundError()


def _vhosts(admin, req, m, rest) -> Reply:
    match m, rest:
        case "GET", []:
            return Reply(200, admin.list_vhosts())
        case "GET", [vhost]:
            return Reply(200, admin.get_vhost(vhost))
        case "PUT", [vhost]:
            return _created(admin.add_vhost(vhost, description=req.field("description"),
                                            tags=req.field("tags"),
                                            default_queue_type=req.field("default_queue_type"),
                                            acting_user=req.user.name if req.user else None))
        case "DELETE", [vhost]:
            admin.delete_vhost(vhost)
            return _OK
        case "GET", [vhost, "permissions"]:
            admin.get_vhost(vhost)
            return Reply(200, admin.list_permissions(vhost=vhost))
        case "GET", [vhost, "connections"]:
            admin.get_vhost(vhost)
            return _listing(admin.list_connections(vhost))
        case "GET", [vhost, "channels"]:
            admin.get_vhost(vhost)
            return _listing(admin.list_channels(vhost))
    raise NotFoundError()


def _users(admin, req, m, rest) -> Reply:
    match m, rest:
        case "GET", []:
            return Reply(200, admin.list_users())
        case "POST", ["bulk-delete"]:
            users = req.field("users")
            if users is None:
                raise BadRequest("[{key_missing,users}]")
            if not isinstance(users, list):
                raise BadRequest("users must be a list")
            admin.delete_users(users)
            return _OK
        case _, ["bulk-delete"]:  # RabbitMQ routes this path before /users/NAME
            return Reply(405, None, {"allow": "POST, OPTIONS"})
        case "GET", [name]:
            return Reply(200, admin.get_user(name))
        case "PUT", [name]:
            return _created(admin.put_user(name, password=req.field("password"),
                                           password_hash=req.field("password_hash"),
                                           hashing_algorithm=req.field("hashing_algorithm"),
                                           tags=req.field("tags", "")))
        case "DELETE", [name]:
            admin.delete_user(name)
            return _OK
        case "GET", [name, "permissions"]:
            admin.get_user(name)
            return Reply(200, admin.list_permissions(user=name))
    raise NotFoundError()


def _limit_value(req) -> Any:
    if req.field("value") is None:
        raise BadRequest("[{key_missing,value}]")
    return req.field("value")


def _vhost_limits(admin, req, m, rest) -> Reply:
    match m, rest:
        case "GET", []:
            return Reply(200, admin.list_vhost_limits())
        case "GET", [vhost]:
            return Reply(200, admin.list_vhost_limits(vhost))
        case "PUT", [vhost, name]:
            admin.set_vhost_limit(vhost, name, _limit_value(req))
            return _OK
        case "DELETE", [vhost, name]:
            admin.clear_vhost_limit(vhost, name)
            return _OK
    raise NotFoundError()


def _user_limits(admin, req, m, rest) -> Reply:
    match m, rest:
        case "GET", []:
            return Reply(200, admin.list_user_limits())
        case "GET", [user]:
            return Reply(200, admin.list_user_limits(user))
        case "PUT", [user, name]:
            admin.set_user_limit(user, name, _limit_value(req))
            return _OK
        case "DELETE", [user, name]:
            admin.clear_user_limit(user, name)
            return _OK
    raise NotFoundError()


def _permissions(admin, req, m, rest) -> Reply:
    match m, rest:
        case "GET", []:
            return Reply(200, admin.list_permissions())
        case "GET", [vhost, user]:
            return Reply(200, admin.get_permission(vhost, user))
        case "PUT", [vhost, user]:
            for key in ("configure", "write", "read"):
                if not isinstance(req.field(key), str):
                    raise BadRequest(f"[{{key_missing,{key}}}]")
            return _created(admin.set_permissions(vhost, user, req.field("configure"),
                                                  req.field("write"), req.field("read")))
        case "DELETE", [vhost, user]:
            admin.clear_permissions(vhost, user)
            return _OK
    raise NotFoundError()


def _queues(admin, req, m, rest) -> Reply:
    match m, rest:
        case "GET", []:
            return _listing(admin.list_queues())
        case "GET", [vhost]:
            return _listing(admin.list_queues(vhost))
        case "GET", [vhost, name]:
            return Reply(200, admin.get_queue(vhost, name))
        case "PUT", [vhost, name]:
            args = req.field("arguments") or {}
            if not isinstance(args, dict):
                raise BadRequest("arguments must be an object")
            return _created(admin.declare_queue(vhost, name, durable=_bool(req.field("durable", False)),
                                                auto_delete=_bool(req.field("auto_delete", False)),
                                                arguments=args))
        case "DELETE", [vhost, name]:
            admin.delete_queue(vhost, name, if_empty=_bool(req.query.get("if-empty")),
                               if_unused=_bool(req.query.get("if-unused")))
            return _OK
        case "DELETE", [vhost, name, "contents"]:
            admin.purge_queue(vhost, name)
            return _OK
        case "GET", [vhost, name, "bindings"]:
            admin.get_queue(vhost, name)
            return Reply(200, admin.list_bindings(vhost, dest=("queue", name)))
        case "POST", [vhost, name, "members"]:
            node = req.field("node")
            if not isinstance(node, str):
                raise BadRequest("[{key_missing,node}]")
            return _created(admin.add_member(vhost, name, node))
        case "POST", [vhost, name, "actions"]:
            action = req.field("action")
            if action not in ("sync", "cancel_sync"):
                raise BadRequest(f"Unknown action {action!r}")
            admin.get_queue(vhost, name)
            admin.sync_queue(vhost, name, action)
            return _OK
        case "DELETE", [vhost, name, "members", node]:
            admin.delete_member(vhost, name, node)
            return _OK
        case "POST", [vhost, name, "move"]:
            destination = req.field("destination")
            if not isinstance(destination, str) or not destination:
                raise BadRequest("[{key_missing,destination}]")
            limit = req.field("count", _MOVE_BATCH)
            if not isinstance(limit, int) or isinstance(limit, bool) or not 0 < limit <= _MOVE_BATCH:
                raise BadRequest(f"count must be an integer from 1 to {_MOVE_BATCH}")
            return Reply(200, admin.move_messages(vhost, name, destination, limit))
        case "POST", [vhost, name, "get"]:
            missing = [k for k in ("ackmode", "encoding") if req.field(k) is None]
            if missing:
                raise BadRequest("[" + ",".join(f"{{key_missing,{k}}}" for k in missing) + "]")
            truncate = req.field("truncate")
            return Reply(200, admin.get_messages(
                vhost, name, count=int(req.field("count", 1)), ackmode=req.field("ackmode"),
                encoding=req.field("encoding"), truncate=int(truncate) if truncate else None))
    raise NotFoundError()


def _rebalance(admin, req, m, rest) -> Reply:
    match m, rest:
        case "POST", ["queues"]:
            return Reply(200, admin.rebalance(req.field("vhost_pattern") or ".*",
                                              req.field("queue_pattern") or ".*"))
    raise NotFoundError()


def _x(name: str) -> str:
    """RabbitMQ's URLs name the default exchange "amq.default"."""
    return "" if name == "amq.default" else name


def _exchanges(admin, req, m, rest) -> Reply:
    if len(rest) >= 2:
        rest = [rest[0], _x(rest[1]), *rest[2:]]
    match m, rest:
        case "GET", []:
            return _listing(admin.list_exchanges())
        case "GET", [vhost]:
            return _listing(admin.list_exchanges(vhost))
        case "GET", [vhost, name]:
            return Reply(200, admin.get_exchange(vhost, name))
        case "PUT", [vhost, name]:
            type_ = req.field("type")
            if not isinstance(type_, str):
                raise BadRequest("[{key_missing,type}]")
            return _created(admin.declare_exchange(
                vhost, name, type_, durable=_bool(req.field("durable", False)),
                auto_delete=_bool(req.field("auto_delete", False)),
                internal=_bool(req.field("internal", False)), arguments=req.field("arguments") or {}))
        case "DELETE", [vhost, name]:
            admin.delete_exchange(vhost, name, if_unused=_bool(req.query.get("if-unused")))
            return _OK
        case "POST", [vhost, name, "publish"]:
            for key in ("routing_key", "payload", "payload_encoding", "properties"):
                if req.field(key) is None:
                    raise BadRequest(f"[{{key_missing,{key}}}]")
            routed = admin.publish(vhost, name, req.field("routing_key"), req.field("payload"),
                                   req.field("payload_encoding"), req.field("properties"))
            return Reply(200, {"routed": routed})
        case "GET", [vhost, name, "bindings", "source"]:
            admin.get_exchange(vhost, name)
            return Reply(200, admin.list_bindings(vhost, source=name))
        case "GET", [vhost, name, "bindings", "destination"]:
            admin.get_exchange(vhost, name)
            return Reply(200, admin.list_bindings(vhost, dest=("exchange", name)))
    raise NotFoundError()


_KINDS = {"q": "queue", "e": "exchange"}


def _bindings(admin, req, m, rest) -> Reply:
    if len(rest) >= 3 and rest[1] == "e":
        rest = [rest[0], "e", _x(rest[2]), *rest[3:]]
    match m, rest:
        case "GET", []:
            return Reply(200, admin.list_bindings())
        case "GET", [vhost]:
            return Reply(200, admin.list_bindings(vhost))
        case "GET", [vhost, "e", source, kind, dest] if kind in _KINDS:
            _exists(admin, vhost, source, _KINDS[kind], dest)
            return Reply(200, [b for b in admin.list_bindings(vhost, dest=(_KINDS[kind], dest))
                               if b["source"] == source])
        case "POST", [vhost, "e", source, kind, dest] if kind in _KINDS:
            key = admin.bind(vhost, source, _KINDS[kind], dest, req.field("routing_key", "") or "",
                             req.field("arguments") or {})
            return Reply(201, None, {"location": urllib.parse.quote(dest, safe="") + "/"
                                     + urllib.parse.quote(key, safe="")})
        case "GET", [vhost, "e", source, kind, dest, props] if kind in _KINDS:
            for b in admin.list_bindings(vhost, dest=(_KINDS[kind], dest)):
                if b["source"] == source and same_properties_key(props, b["properties_key"]):
                    return Reply(200, b)
            raise NotFoundError()
        case "DELETE", [vhost, "e", source, kind, dest, props] if kind in _KINDS:
            admin.unbind(vhost, source, _KINDS[kind], dest, props)
            return _OK
    raise NotFoundError()


def _exists(admin, vhost: str, source: str, kind: str, dest: str) -> None:
    admin.get_exchange(vhost, source)
    if kind == "queue":
        admin.get_queue(vhost, dest)
    else:
        admin.get_exchange(vhost, dest)


def _policies(admin, req, m, rest, operator: bool = False) -> Reply:
    match m, rest:
        case "GET", []:
            return Reply(200, admin.list_policies(operator=operator))
        case "GET", [vhost]:
            return Reply(200, admin.list_policies(vhost, operator=operator))
        case "GET", [vhost, name]:
            return Reply(200, admin.get_policy(vhost, name, operator=operator))
        case "PUT", [vhost, name]:
            for key in ("pattern", "definition"):
                if req.field(key) is None:
                    raise BadRequest(f"[{{key_missing,{key}}}]")
            return _created(admin.set_policy(vhost, name, req.field("pattern"), req.field("definition"),
                                             priority=req.field("priority", 0),
                                             apply_to=req.field("apply-to", "all"),
                                             operator=operator))
        case "DELETE", [vhost, name]:
            admin.clear_policy(vhost, name, operator=operator)
            return _OK
    raise NotFoundError()


def _operator_policies(admin, req, m, rest) -> Reply:
    """/api/operator-policies: as /api/policies, for operator policies (only administrators
    may set or clear them)."""
    return _policies(admin, req, m, rest, operator=True)


def _connections(admin, req, m, rest) -> Reply:
    match m, rest:
        case "GET", []:
            return _listing(admin.list_connections())
        case "GET", [name]:
            return Reply(200, admin.get_connection(name))
        case "DELETE", [name]:
            admin.close_connection(name, req.headers.get("x-reason"))
            return _OK
        case "GET", [name, "channels"]:
            admin.get_connection(name)
            return Reply(200, [c for c in admin.list_channels()
                               if c["connection_details"]["name"] == name])
    raise NotFoundError()


def _channels(admin, req, m, rest) -> Reply:
    match m, rest:
        case "GET", []:
            return _listing(admin.list_channels())
        case "GET", [name]:
            for c in admin.list_channels():
                if c["name"] == name:
                    return Reply(200, c)
    raise NotFoundError()


def _consumers(admin, req, m, rest) -> Reply:
    match m, rest:
        case "GET", []:
            return Reply(200, admin.list_consumers())
        case "GET", [vhost]:
            admin.get_vhost(vhost)
            return Reply(200, admin.list_consumers(vhost))
    raise NotFoundError()


def _definitions(admin, req, m, rest) -> Reply:
    match m, rest:
        case "GET", []:
            return Reply(200, admin.export_definitions(), {"content-disposition":
                                                           'attachment; filename="definitions.json"'})
        case "POST", []:
            admin.import_definitions(req.body)
            return _OK
    raise NotFoundError()


def _health(admin, req, m, rest) -> Reply:
    if m != "GET" or len(rest) < 2 or rest[0] != "checks":
        raise NotFoundError()
    match rest[1:]:
        case ["alarms"] | ["local-alarms"]:
            return Reply(*health.alarms(admin.node, admin.alarms()))
        case ["virtual-hosts"]:
            return Reply(200, {"status": "ok"})
        case ["node-is-quorum-critical"]:
            return Reply(*admin.quorum_critical())
        case ["node-is-mirror-sync-critical"]:
            return Reply(*admin.quorum_critical(mirrored=True))
        case ["port-listener", port]:
            return Reply(*health.port_listener(admin.listeners, port))
        case ["protocol-listener", protocol]:
            return Reply(*health.protocol_listener(admin.listeners, protocol))
        case ["certificate-expiration", within, unit]:
            return Reply(*health.certificate_expiration(within, unit, admin.tls_listeners))
    raise NotFoundError()


def _healthchecks(admin, req, m, rest) -> Reply:
    """The older /api/healthchecks/node[/NODE]: the node is up if it answers."""
    match m, rest:
        case "GET", ["node"]:
            return Reply(200, {"status": "ok"})
        case "GET", ["node", node]:
            if not admin.get_node(node)["running"]:
                return Reply(200, {"status": "failed", "reason": f"node {node} is not running"})
            return Reply(200, {"status": "ok"})
    raise NotFoundError()


def _aliveness(admin, req, m, rest) -> Reply:
    match m, rest:
        case "GET", [vhost]:
            admin.aliveness_test(vhost)
            return Reply(200, {"status": "ok"})
    raise NotFoundError()


_HANDLERS = {
    "overview": _overview, "whoami": _whoami, "nodes": _nodes, "vhosts": _vhosts,
    "users": _users, "permissions": _permissions, "queues": _queues, "exchanges": _exchanges,
    "bindings": _bindings, "policies": _policies, "operator-policies": _operator_policies,
    "connections": _connections,
    "channels": _channels, "consumers": _consumers, "definitions": _definitions,
    "health": _health, "healthchecks": _healthchecks, "aliveness-test": _aliveness,
    "rebalance": _rebalance, "vhost-limits": _vhost_limits, "user-limits": _user_limits,
}
