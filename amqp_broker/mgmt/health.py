"""The health checks of the management API (`/api/health/checks/...`) with RabbitMQ 3.10's
status codes and bodies: 200 {"status": "ok", ...} when the check passes, 503 {"status":
"failed", "reason": ...} when it does not, 400 for a malformed argument.

Called by `routes.py` (`_health`); it gets the node's alarms and listener rows
(`admin.alarms()`, `admin.listeners`, `admin.tls_listeners`) and returns (status, body). Checks
that only make sense in a cluster answer as a single-node RabbitMQ does. Only the
certificate-expiration check reads files: the certfile and cacertfile of each TLS listener, as
they are on disk now (`tls.certificate_dates`).
"""

from __future__ import annotations

import datetime
import re

from amqp_broker.tls import certificate_dates

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


_DAY = 86400
# RabbitMQ's lengths: a month is a twelfth of a 365-day year
_UNIT_SECONDS = {"days": _DAY, "weeks": 7 * _DAY, "months": _DAY * 365 / 12, "years": 365 * _DAY}


def certificate_expiration(within: str, unit: str, tls_listeners: list[dict],
                           now: datetime.datetime | None = None) -> tuple[int, dict]:
    """503 listing every TLS listener whose certfile or cacertfile holds a certificate that
    expires within `within` `unit`s (or cannot be read), with the dates of those certificates;
    200 {"status": "ok"} when none does."""
    if not _INTEGER.fullmatch(within):
        raise BadRequest("Invalid expiration value.")
    seconds = _UNIT_SECONDS.get(unit.lower())
    if seconds is None:
        raise BadRequest("Time unit not recognised. Supported units: days, weeks, months, years.")
    now = now or datetime.datetime.now(datetime.timezone.utc)
    limit = now + datetime.timedelta(seconds=int(within) * seconds)
    expiring = []
    for ln in tls_listeners:
        certfile = _expiring(ln["certfile"], limit)
        cacertfile = _expiring(ln["cacertfile"], limit)
        if certfile or cacertfile:
            expiring.append({**ln, "certfile_expires_on": certfile,
                             "cacertfile_expires_on": cacertfile})
    if expiring:
        return 503, {"status": "failed", "reason": "Certificates expiring", "expired": expiring}
    return 200, {"status": "ok"}


def _expiring(path: str | None, limit: datetime.datetime) -> list[str] | dict:
    """The dates of the certificates in `path` that expire before `limit`, in RabbitMQ's
    layout ("2026-01-02 3:04:05"); {"error": why} when the file cannot be used."""
    if not path:
        return []
    dates = certificate_dates(path)
    if isinstance(dates, str):
        return {"error": dates}
    return [f"{d:%Y-%m-%d} {d.hour}:{d:%M:%S}" for d in dates if d < limit]
