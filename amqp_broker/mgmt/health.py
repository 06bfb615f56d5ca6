"""The health checks of the management API (`/api/health/checks/...`) with RabbitMQ 3.10's
status codes and bodies: 200 {"status": "ok", ...} when the check passes, 503 {"status":
"failed", "reason": ...} when it does not, 400 for a malformed argument.

Called by `routes.py` (`_health`); pure: it gets the node's alarms and listener rows
(`admin.alarms()`, `admin.listeners`) and returns (status, body). Checks that only make sense in
a cluster answer as a single-node RabbitMQ does; no listener uses TLS, so no certificate can
expire.
"""

from __future__ import annotations

import re

from .errors import BadRequest

__all__ = ["alarms", "certificate_expiration", "port_listener", "protocol_listener",
           "single_node"]

_INTEGER = re.compile(r"[+-]?[0-9]+")
_UNITS = ("days", "weeks", "months", "years")
# Other names RabbitMQ accepts for the protocols this node can listen on.
_PROTOCOL_ALIASES = {
    **dict.fromkeys(("amqp091", "amqp0.9.1", "amqp0-9-1", "amqp0_9_1", "amqp10", "amqp1.0",
                     "amqp1-0", "amqp1_0"), "amqp"),
    **dict.fromkeys(("http1", "http1.1", "http_api", "management", "management_ui", "ui"), "http"),
    **dict.fromkeys(("cli", "distribution"), "clustering"),
    "amqps": "amqp/ssl",
}


def alarms(node: str, active: list[str]) -> tuple[int, dict]:
    """health/checks/alarms and local-alarms (one node: the same answer)."""
    if active:
        return 503, {"status": "failed", "reason": "resource alarm(s) in effect in the cluster",
                     "alarms": [{"node": node, "resource": a} for a in active]}
    return 200, {"status": "ok"}


def single_node() -> tuple[int, dict]:
    """node-is-quorum-critical and node-is-mirror-sync-critical: never, on one node."""
    return 200, {"status": "ok", "reason": "single node cluster"}


def port_listener(listeners: list[dict], port: str) -> tuple[int, dict]:
    if not _INTEGER.fullmatch(port):
        raise BadRequest("Invalid port")
    wanted = int(port)
    ports = [ln["port"] for ln in listeners]
    if wanted in ports:
        return 200, {"status": "ok", "port": wanted}
    return 503, {"status": "failed", "reason": "No active listener", "missing": wanted,
                 "ports": ports}


def protocol_listener(listeners: list[dict], protocol: str) -> tuple[int, dict]:
    wanted = _PROTOCOL_ALIASES.get(protocol.lower(), protocol.lower())
    protocols = [ln["protocol"] for ln in listeners]
    if wanted in protocols:
        return 200, {"status": "ok", "protocol": wanted}
    return 503, {"status": "failed", "reason": "No active listener", "missing": wanted,
                 "protocols": protocols}


def certificate_expiration(within: str, unit: str) -> tuple[int, dict]:
    """Validates the arguments as RabbitMQ does; with no TLS listener nothing expires."""
    if not _INTEGER.fullmatch(within):
        raise BadRequest("Invalid expiration value.")
    if unit.lower() not in _UNITS:
        raise BadRequest("Time unit not recognised. Supported units: days, weeks, months, years.")
    return 200, {"status": "ok"}
