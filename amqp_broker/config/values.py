"""Value types of rabbitmq.conf, as cuttlefish and rabbit.schema accept them.

Each converter takes the raw text of a value and returns the typed value, or raises
``BadValue`` whose text completes the sentence "expected ..." (the caller adds the file, line,
key and the offending value). Used by ``amqp_broker.config.schema``. Pure.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Callable

__all__ = [
    "BadValue", "Converter", "boolean", "bytesize", "choice", "fraction", "information_unit", "integer", "ip_address",
    "listener", "millis_or_infinity", "node_name", "peer_node", "text",
]

Converter = Callable[[str], object]


class BadValue(ValueError):
    """``str(exc)`` says what was expected, e.g. "a non-negative integer (seconds)"."""


def integer(minimum: int | None = None, maximum: int | None = None, unit: str = "") -> Converter:
    """An integer in [minimum, maximum]; the description names the range and the unit."""
    if minimum == 0 and maximum is None:
        what = "a non-negative integer"
    elif minimum == 1 and maximum is None:
        what = "a positive integer"
    elif minimum is not None and maximum is not None:
        what = f"an integer from {minimum} to {maximum}"
    else:
        what = "an integer"
    if unit:
        what += f" ({unit})"

    def convert(raw: str) -> int:
        if not re.fullmatch(r"[+-]?[0-9]+", raw):
            raise BadValue(what)
        n = int(raw)
        if (minimum is not None and n < minimum) or (maximum is not None and n > maximum):
            raise BadValue(what)
        return n

    return convert


def boolean(raw: str) -> bool:
    # cuttlefish's {enum, [true, false]}: lower case only.
    if raw == "true":
        return True
    if raw == "false":
        return False
    raise BadValue("true or false")


def choice(*allowed: str) -> Converter:
    def convert(raw: str) -> str:
        if raw not in allowed:
            raise BadValue("one of " + ", ".join(allowed))
        return raw

    return convert


def text(raw: str) -> str:
    return raw


_BYTESIZE_RE = re.compile(r"([0-9]+)(KB|MB|GB)?")
_UNITS = {None: 1, "KB": 1024, "MB": 1024**2, "GB": 1024**3}


def bytesize(minimum: int = 0, maximum: int | None = None) -> Converter:
    """cuttlefish ``bytesize``: an integer number of bytes, optionally with KB, MB or GB (x1024)."""
    what = "a size in bytes (an integer, optionally with KB, MB or GB)"

    def convert(raw: str) -> int:
        m = _BYTESIZE_RE.fullmatch(raw)
        if m is None:
            raise BadValue(what)
        n = int(m.group(1)) * _UNITS[m.group(2)]
        if n < minimum or (maximum is not None and n > maximum):
            bounds = f"from {minimum} to {maximum}" if maximum is not None else f"at least {minimum}"
            raise BadValue(f"{what} {bounds}")
        return n

    return convert


def millis_or_infinity(minimum: int = 0) -> Converter:
    """Milliseconds, or ``infinity``; returned as seconds (float, ``None`` for infinity)."""
    ms = integer(minimum, None, "milliseconds")

    def convert(raw: str) -> float | None:
        if raw == "infinity":
            return None
        try:
            return ms(raw) / 1000.0
        except BadValue as exc:
            raise BadValue(f"{exc} or 'infinity'") from None

    return convert


def ip_address(raw: str) -> str:
    """An IPv4 or IPv6 address (RabbitMQ's ``is_ip`` validator); brackets are allowed for IPv6."""
    bare = raw[1:-1] if raw.startswith("[") and raw.endswith("]") else raw
    try:
        return str(ipaddress.ip_address(bare))
    except ValueError:
        raise BadValue("an IP address such as 0.0.0.0, 127.0.0.1 or ::1") from None


_PORT = integer(0, 65535)


def listener(raw: str) -> tuple[str, int]:
    """``5672`` (all interfaces) or ``IP:port``: ``127.0.0.1:5672``, ``::1:5672``, ``[::1]:5672``.

    Like cuttlefish's ``ip`` type the port follows the last colon. Port 0 (pick a free port) is
    this broker's addition, for tests.
    """
    what = "a port (0-65535) or IP:port, e.g. 5672, 127.0.0.1:5672 or [::1]:5672"
    if re.fullmatch(r"[0-9]+", raw):
        try:
            return "0.0.0.0", _PORT(raw)
        except BadValue:
            raise BadValue(what) from None
    host, sep, port = raw.rpartition(":")
    if not sep or not host:
        raise BadValue(what)
    try:
        return ip_address(host), _PORT(port)
    except BadValue:
        raise BadValue(what) from None


_NODE_RE = re.compile(r"[A-Za-z0-9_.-]+@[A-Za-z0-9_.-]+")


def node_name(raw: str) -> str:
    """An Erlang-style node name ``name@host``."""
    if not _NODE_RE.fullmatch(raw):
        raise BadValue("a node name like rabbit@hostname")
    return raw


def peer_node(raw: str) -> str:
    """A cluster peer: ``name@host``, or ``name@host:port`` naming its distribution port (for
    several nodes on one host, where RabbitMQ would ask epmd)."""
    name, sep, port = raw.partition(":")
    node_name(name)
    if sep and not (port.isdigit() and 0 < int(port) < 65536):
        raise BadValue("a node name like rabbit@hostname, optionally with :port")
    return raw


# RabbitMQ's information units (rabbit_resource_monitor_misc): k/KiB/M/MiB/G/GiB are powers
# of 1024; kB/KB/MB/GB are powers of 1000.
_INFO_UNITS = {
    "": 1, "k": 1024, "KiB": 1024, "kB": 1000, "KB": 1000,
    "M": 1024**2, "MiB": 1024**2, "MB": 1000**2,
    "G": 1024**3, "GiB": 1024**3, "GB": 1000**3,
}
_INFO_RE = re.compile(r"([0-9]+)(" + "|".join(u for u in _INFO_UNITS if u) + r")?")


def information_unit(raw: str) -> int:
    """Bytes, optionally with a unit: 2GB (10^9), 2GiB or 2G (2^30), 512MB, 512MiB, 100kB ..."""
    m = _INFO_RE.fullmatch(raw)
    if m is None or int(m.group(1)) == 0:
        raise BadValue("a positive number of bytes, optionally with a unit (kB, KiB, MB, MiB, GB, GiB)")
    return int(m.group(1)) * _INFO_UNITS[m.group(2) or ""]


def fraction(raw: str) -> float:
    """A number in (0, 1], e.g. 0.4."""
    try:
        x = float(raw)
    except ValueError:
        raise BadValue("a number greater than 0 and at most 1, e.g. 0.4") from None
    if not 0 < x <= 1:
        raise BadValue("a number greater than 0 and at most 1, e.g. 0.4")
    return x
