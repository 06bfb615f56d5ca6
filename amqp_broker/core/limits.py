"""Vhost limits (max-connections, max-queues) and user limits (max-connections, max-channels):
validation with RabbitMQ 3.10's management API texts, and the refusals clients see.

Pure. Called by `server/admin.py` (validates what it stores), `server/broker.py` (connection
limits at connection.open), `server/session.py` (a user's channel limit, through the protocol's
channel guard), `server/vhost.py` (the queue limit at queue.declare) and the management API.

A negative value means no limit, 0 allows nothing; a name that is not set is no limit either.
"""

from __future__ import annotations

from typing import Any, Mapping

from .erlterm import pretty
from .errors import NotAllowed, PreconditionFailed

__all__ = ["LimitError", "USER_LIMITS", "VHOST_LIMITS", "reached", "validate_user_limits",
           "validate_vhost_limits", "vhost_connections_refused", "user_connections_refused",
           "user_channels_refused", "vhost_queues_refused"]

VHOST_LIMITS = ("max-connections", "max-queues")
USER_LIMITS = ("max-connections", "max-channels")


class LimitError(ValueError):
    """A limits definition RabbitMQ would refuse; the text is its 400 reason."""


def _term(value: Any) -> str:
    if isinstance(value, str):
        return pretty(value.encode())
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return pretty(str(value).encode())


def _unknown(defn: Mapping[str, Any], allowed: tuple[str, ...]) -> str | None:
    bad = [(k, v) for k, v in defn.items() if k not in allowed]
    if not bad:
        return None
    return "Unrecognised terms [" + ",".join(f"{{{_term(k)},{_term(v)}}}" for k, v in bad) + "]"


def _integers(defn: Mapping[str, Any]) -> dict[str, int]:
    out = {}
    for key, value in defn.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise LimitError(f"Validation failed\n\n{key} should be a number, actually was "
                             f"{_term(value)}\n")
        out[key] = value
    return out


def validate_vhost_limits(defn: Any) -> dict[str, int]:
    """{"max-connections": n, "max-queues": n} (either or both), as set_vhost_limits takes."""
    if not isinstance(defn, Mapping):
        raise LimitError("Validation failed\n\nlimits should be a JSON object\n")
    unknown = _unknown(defn, VHOST_LIMITS)
    if unknown:
        raise LimitError(f"Validation failed\n\n{unknown} in limits\n")
    return _integers(defn)


def validate_user_limits(defn: Any) -> dict[str, int]:
    """{"max-connections": n, "max-channels": n} (either or both), as set_user_limits takes."""
    if not isinstance(defn, Mapping):
        raise LimitError("user-limits should be a JSON object")
    unknown = _unknown(defn, USER_LIMITS)
    if unknown:
        raise LimitError(f"{unknown} in user-limits")
    return _integers(defn)


def reached(limits: Mapping[str, int] | None, name: str, current: int) -> int | None:
    """The limit `name` if `current` things already use all of it, else None."""
    if not limits:
        return None
    limit = limits.get(name)
    if limit is None or limit < 0 or current < limit:
        return None
    return limit


def vhost_connections_refused(vhost: str, user: str, limit: int) -> NotAllowed:
    return NotAllowed(f"access to vhost '{vhost}' refused for user '{user}': connection limit "
                      f"({limit}) is reached")


def user_connections_refused(user: str, limit: int) -> NotAllowed:
    return NotAllowed(f"connection refused for user '{user}': user connection limit ({limit}) "
                      f"is reached")


def user_channels_refused(user: str, limit: int) -> str:
    """The text of the 530 that closes the connection (the protocol layer adds the code)."""
    return (f"number of channels opened for user '{user}' has reached the maximum allowed user "
            f"limit of ({limit})")


def vhost_queues_refused(queue: str, vhost: str, limit: int) -> PreconditionFailed:
    return PreconditionFailed(f"cannot declare queue '{queue}': queue limit in vhost '{vhost}' "
                              f"({limit}) is reached")
