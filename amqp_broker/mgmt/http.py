"""The management HTTP API (RabbitMQ's /api/... on port 15672) as an ASGI app (Starlette) served
by `httpserver.serve_http` (h11 on trio), in the broker's own trio run.

Node startup calls `await nursery.start(serve_management, admin, settings)`; it reports the
bound port (so tests can bind port 0) and samples message rates every
`collect_statistics_interval` (`rates.py`). `build_app(admin)` gives the bare Starlette app.

Why one catch-all route: RabbitMQ puts vhost names in the path URL-encoded ("%2F" is "/"), so the
path must be split on "/" *before* percent-decoding. We take the raw path from the ASGI scope,
decode each segment on its own and hand the list to `routes.dispatch`.

Authentication is HTTP basic against the node's users (`admin.authenticate`), as RabbitMQ:
401 with `WWW-Authenticate` for missing or wrong credentials (and for loopback-only users
connecting from elsewhere; without the challenge for the web UI's `X-Requested-With` requests), 401 "Not management user" without a management tag, 401 "Not
administrator user" on administrator-only endpoints, and vhost access checked for users that
are neither administrators nor monitoring.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import logging
import urllib.parse
from typing import Any

import trio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from amqp_broker.core.users import loopback_allowed

from .errors import AdminError
from .httpserver import serve_http
from .paging import paginate, select_columns
from .rates import run_sampler
from .webui import ui_routes
from .routes import Req, dispatch, needs_admin

__all__ = ["build_app", "http_listener", "serve_management"]

_log = logging.getLogger(__name__)

_MGMT_TAGS = ("administrator", "monitoring", "management", "policymaker")
_CHALLENGE = {"www-authenticate": 'Basic realm="RabbitMQ Management"'}
_METHODS = ["GET", "PUT", "POST", "DELETE", "HEAD"]


def _json(status: int, body: Any, headers: dict | None = None) -> Response:
    content = b"" if body is None else json.dumps(body).encode()
    return Response(content, status_code=status, headers=headers,
                    media_type="application/json" if body is not None else None)


def _error(err: AdminError, headers: dict | None = None) -> Response:
    return _json(err.status, err.body(), headers)


def _segments(request: Request) -> list[str] | None:
    raw = request.scope.get("raw_path") or request.scope["path"].encode()
    parts = raw.split(b"?", 1)[0].split(b"/")
    if len(parts) < 2 or parts[1] != b"api":
        return None
    segs = [urllib.parse.unquote(p.decode("latin-1")) for p in parts[2:]]
    if segs and segs[-1] == "":
        segs.pop()  # trailing slash
    return segs


def _credentials(request: Request) -> tuple[str, str] | None:
    auth = request.headers.get("authorization", "")
    scheme, _, value = auth.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        user, sep, password = base64.b64decode(value.strip(), validate=True).decode().partition(":")
    except (binascii.Error, ValueError, UnicodeDecodeError):
        return None
    return (user, password) if sep else None


def _unauthenticated(request: Request) -> Response:
    """401 with the Basic challenge; without it for the web UI's own requests (marked
    `X-Requested-With: XMLHttpRequest`), which a browser would otherwise answer with its own
    login dialog instead of letting the page show the failure."""
    if request.headers.get("x-requested-with", "").lower() == "xmlhttprequest":
        return _json(401, {"error": "not_authorised", "reason": "Login failed"})
    return Response(status_code=401, headers=_CHALLENGE)


def _authorise(admin, request: Request, req: Req) -> Response | None:
    """None when allowed, else the 401 response."""
    creds = _credentials(request)
    if creds is None:
        return _unauthenticated(request)
    user = admin.authenticate(*creds)
    peer = request.client.host if request.client else None
    if user is None or not loopback_allowed(creds[0], peer, admin.settings.loopback_users):
        return _unauthenticated(request)
    tags = set(user.tags)
    if not tags & set(_MGMT_TAGS):
        return _json(401, {"error": "not_authorised", "reason": "Not management user"})
    req.user = user
    if "administrator" in tags:
        return None
    if needs_admin(req):
        return _json(401, {"error": "not_authorised", "reason": "Not administrator user"})
    if req.method == "GET" and "monitoring" in tags:
        return None
    vhost = _vhost_of(req)
    if vhost is not None and not admin.can_access(user.name, vhost):
        return _json(401, {"error": "not_authorised",
                           "reason": "User not authorised to access virtual host"})
    if req.segs and req.segs[0] == "policies" and req.method != "GET" and "policymaker" not in tags:
        return _json(401, {"error": "not_authorised", "reason": "Not policymaker user"})
    return None


_VHOST_SCOPED = ("queues", "exchanges", "bindings", "policies", "operator-policies",
                 "aliveness-test", "consumers")


def _vhost_of(req: Req) -> str | None:
    if len(req.segs) >= 2 and req.segs[0] in _VHOST_SCOPED:
        return req.segs[1]
    return None


async def _endpoint(request: Request) -> Response:
    admin = request.app.state.admin
    segs = _segments(request)
    if segs is None:
        return _json(404, {"error": "Object Not Found", "reason": "Not Found"})
    method = "GET" if request.method == "HEAD" else request.method
    req = Req(method, segs, dict(request.query_params),
              headers={k.lower(): v for k, v in request.headers.items()})
    denied = _authorise(admin, request, req)
    if denied is not None:
        return denied
    if method in ("PUT", "POST"):
        raw = await request.body()
        if raw.strip():
            try:
                req.body = json.loads(raw)
            except ValueError:
                return _json(400, {"error": "bad_request", "reason": "not_json"})
        else:
            req.body = {}
    if segs[:1] == ["ctl"]:
        return await _control(admin, req)
    if getattr(admin, "stopped", False):
        return _json(503, {"error": "app_stopped", "reason": _STOPPED.format(node=admin.node)})
    try:
        reply, changes = admin.collecting_changes(lambda: dispatch(admin, req))
    except AdminError as err:
        return _error(err)
    except Exception:  # a bug must not take the node down; RabbitMQ answers 500 too
        _log.exception("management API: %s %s failed", request.method, request.url.path)
        return _json(500, {"error": "internal_error", "reason": "internal error"})
    for change in changes:  # metadata changes answer once committed
        if not await change.wait():
            return _json(503, {"error": "timeout", "reason": "metadata store unavailable: this "
                               "node cannot reach a majority of the cluster"})
    body = reply.body if reply.status not in (201, 204) else None
    if isinstance(body, list) and not _sees_all(req.user):
        # management/policymaker users see only the vhosts they have permissions in
        key = "name" if req.segs == ["vhosts"] else "vhost"
        body = [r for r in body if not isinstance(r, dict) or key not in r
                or admin.can_access(req.user.name, r[key])]
    if reply.pageable:
        try:
            body = paginate(body, req.query)
        except AdminError as err:
            return _error(err)
    if method == "GET" and req.query.get("columns") and body is not None:
        body = select_columns(body, req.query["columns"])
    return _json(reply.status, body, reply.headers)


_STOPPED = ("this command requires the 'rabbit' app to be running on the target node "
            "{node}. Start it with 'amqp-brokerctl start_app'.")


async def _control(admin, req: Req) -> Response:
    """POST /api/ctl/<verb>: stop_app, start_app, reset, force_reset, join_cluster,
    forget_cluster_node (our extension: rabbitmqctl reaches these over Erlang distribution).
    Served by the node's process (`server/lifecycle.py`), which outlives its application."""
    control = getattr(admin, "node_control", None)
    if control is None:
        return _json(404, {"error": "Object Not Found",
                           "reason": "node control is served by the amqp-broker process only"})
    if req.method != "POST" or len(req.segs) != 2:
        return _json(405, {"error": "bad_request", "reason": "POST /api/ctl/<verb>"})
    try:
        body = await control(req.segs[1], req.body or {})
    except Exception as err:  # the process's ControlError: HTTP status and rabbitmqctl's text
        status = getattr(err, "status", None)
        if status is None:
            _log.exception("management API: control %s failed", req.segs[1])
            return _json(500, {"error": "internal_error", "reason": repr(err)})
        return _json(status, {"error": "control", "reason": err.reason})
    return _json(200, body)


def _sees_all(user) -> bool:
    return "administrator" in user.tags or "monitoring" in user.tags


def build_app(admin) -> Starlette:
    app = Starlette(routes=[*ui_routes(), Route("/api/{rest:path}", _endpoint, methods=_METHODS),
                            Route("/api", _endpoint, methods=_METHODS)])
    app.state.admin = admin
    return app


def http_listener(settings, name: str, default_port: int) -> tuple[str, int]:
    """(host, port) of the `management` or `prometheus` listener. `BrokerSettings` (from
    rabbitmq.conf: management.tcp.ip/port) has an `HttpListener` attribute of that name; other
    settings objects may give `<name>_port` / `<name>_host`; else RabbitMQ's default port on
    the AMQP host."""
    host = getattr(settings, "host", None) or "0.0.0.0"
    listener = getattr(settings, name, None)
    if listener is not None and hasattr(listener, "port"):
        return listener.host or host, listener.port
    port = getattr(settings, f"{name}_port", None)
    return getattr(settings, f"{name}_host", None) or host, default_port if port is None else port


async def serve_management(admin, settings, *, tls=None,
                           task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Run the management API on `settings.management` (default 0.0.0.0:15672; port 0 picks a
    free port) until cancelled; reports the bound port. With `tls` (a `tls.ServerTls`): HTTPS
    on `settings.management_ssl` instead."""
    if tls is None:
        host, port = http_listener(settings, "management", 15672)
    else:
        host, port = settings.management_ssl.host, settings.management_ssl.port
    if not any(ln["protocol"] == "amqp" for ln in admin.listeners) and getattr(settings, "port", 0):
        for ln in getattr(settings, "listeners", ()) or ():
            admin.listeners.append({"node": admin.node, "protocol": "amqp",
                                    "ip_address": ln.host, "port": ln.port, "socket_opts": {}})
    async with trio.open_nursery() as nursery:
        if not admin.rates.sampling:  # one sampler, though HTTP and HTTPS both serve
            admin.rates.sampling = True
            nursery.start_soon(run_sampler, admin.sample_totals, admin.rates,
                               getattr(admin.settings, "collect_statistics_interval", 5000))
        bound = await nursery.start(functools.partial(serve_http, build_app(admin), host, port,
                                                      tls=tls))
        scheme = "https" if tls is not None else "http"
        # (not an admin.tls_listeners row: RabbitMQ's certificate-expiration check looks at the
        # AMQPS listeners only)
        admin.listeners.append({"node": admin.node, "protocol": scheme, "ip_address": host,
                                "port": bound, "socket_opts": {}})
        _log.info("management API on %s://%s:%d/api", scheme, host, bound)
        task_status.started(bound)
