"""Validation of queue.declare and basic.consume arguments for classic queues, and policy merging.

Who calls it: `ClassicQueue.__init__` (declare arguments) and `ClassicQueue.add_consumer`
(x-priority); the server may call `parse_queue_arguments` before creating a queue to fail early.
Errors are 406 PRECONDITION_FAILED with RabbitMQ's text from rabbit_amqqueue:check_arguments:
``invalid arg 'x-max-length' for queue 'q' in vhost '/': {value_negative,-1}`` (the last part is the
Erlang term RabbitMQ prints). Unknown x- arguments are ignored, as RabbitMQ does for classic queues.
"""

from __future__ import annotations

import datetime
import decimal
from dataclasses import dataclass, replace
from typing import Any

from amqp_broker.core.errors import PreconditionFailed, vhost_resource

__all__ = [
    "QueueSettings",
    "parse_queue_arguments",
    "parse_consumer_priority",
    "check_dead_letter_exchange_type",
    "apply_policy",
    "OVERFLOW_DROP_HEAD",
    "OVERFLOW_REJECT_PUBLISH",
    "OVERFLOW_REJECT_PUBLISH_DLX",
]

OVERFLOW_DROP_HEAD = "drop-head"
OVERFLOW_REJECT_PUBLISH = "reject-publish"
OVERFLOW_REJECT_PUBLISH_DLX = "reject-publish-dlx"
_OVERFLOW_MODES = (OVERFLOW_DROP_HEAD, OVERFLOW_REJECT_PUBLISH, OVERFLOW_REJECT_PUBLISH_DLX)
_QUEUE_TYPES = ("classic", "quorum", "stream")
_MAX_PRIORITY = 255
_MAX_EXPIRY = 4294967295  # rabbit_misc:check_expiry upper bound (ms)


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """The effective limits of one queue (arguments merged with a policy). None = no limit."""

    max_length: int | None = None
    max_length_bytes: int | None = None
    overflow: str = OVERFLOW_DROP_HEAD
    message_ttl: int | None = None
    expires: int | None = None
    max_priority: int | None = None
    single_active_consumer: bool = False
    dead_letter_exchange: str | None = None
    dead_letter_routing_key: str | None = None
    # x-consumer-timeout / policy consumer-timeout (ms, the lower wins); None: the node's
    # consumer_timeout applies. Read by the channel's consumer-timeout check.
    consumer_timeout: int | None = None


def _type_name(value: Any) -> str:
    """The AMQP field type RabbitMQ would print for a decoded Python value."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "long"
    if isinstance(value, (str, bytes)):
        return "longstr"
    if isinstance(value, float):
        return "double"
    if isinstance(value, decimal.Decimal):
        return "decimal"
    if isinstance(value, datetime.datetime):
        return "timestamp"
    if isinstance(value, dict):
        return "table"
    if isinstance(value, (list, tuple)):
        return "array"
    if value is None:
        return "void"
    return "binary"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _as_str(value: Any) -> str | None:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if isinstance(value, str) else None


def _check_int(v: Any) -> str | None:
    # rabbit_amqqueue:check_int_arg formats an Erlang string here (printed quoted), unlike the
    # {unacceptable_type,T} tuple of the bool and string checks.
    return None if _is_int(v) else f'"expected integer, got {_type_name(v)}"'


def _check_non_neg(v: Any) -> str | None:
    err = _check_int(v)
    if err is None and v < 0:
        return f"{{value_negative,{v}}}"
    return err


def _check_expiry(v: Any) -> str | None:
    err = _check_non_neg(v)
    if err is None and v > _MAX_EXPIRY:
        return f"{{value_too_large,{v},{_MAX_EXPIRY}}}"
    return err


def _check_expires(v: Any) -> str | None:
    if _is_int(v) and v == 0:
        return "{value_zero,0}"
    return _check_expiry(v)


def _check_max_priority(v: Any) -> str | None:
    err = _check_non_neg(v)
    if err is None and v > _MAX_PRIORITY:
        return f"{{max_value_exceeded,{v}}}"
    return err


def _check_bool(v: Any) -> str | None:
    return None if isinstance(v, bool) else f"{{unacceptable_type,{_type_name(v)}}}"


def _check_string(v: Any) -> str | None:
    return None if _as_str(v) is not None else f"{{unacceptable_type,{_type_name(v)}}}"


def _check_overflow(v: Any) -> str | None:
    s = _as_str(v)
    if s is None:
        return f"{{unacceptable_type,{_type_name(v)}}}"
    return None if s in _OVERFLOW_MODES else "invalid_overflow"


def _check_queue_type(v: Any) -> str | None:
    s = _as_str(v)
    if s is None:
        return f"{{unacceptable_type,{_type_name(v)}}}"
    return None if s in _QUEUE_TYPES else f"\"unsupported queue type '{s}'\""


_VALIDATORS = (
    ("x-expires", _check_expires),
    ("x-message-ttl", _check_expiry),
    ("x-dead-letter-exchange", _check_string),
    ("x-dead-letter-routing-key", _check_string),
    ("x-max-length", _check_non_neg),
    ("x-max-length-bytes", _check_non_neg),
    ("x-max-priority", _check_max_priority),
    ("x-overflow", _check_overflow),
    ("x-single-active-consumer", _check_bool),
    ("x-queue-type", _check_queue_type),
    ("x-consumer-timeout", _check_non_neg),
)


def _invalid(key: str, name: str, vhost: str, why: str) -> PreconditionFailed:
    return PreconditionFailed(f"invalid arg '{key}' for {vhost_resource('queue', name, vhost)}: {why}")


def parse_queue_arguments(name: str, vhost: str, arguments: dict[str, Any] | None) -> QueueSettings:
    """Validate declare arguments; return the settings they ask for. Raises PreconditionFailed."""
    args = arguments or {}
    for key, check in _VALIDATORS:
        if key in args:
            why = check(args[key])
            if why is not None:
                raise _invalid(key, name, vhost, why)
    if "x-dead-letter-routing-key" in args and "x-dead-letter-exchange" not in args:
        raise _invalid("x-dead-letter-routing-key", name, vhost, "routing_key_but_no_dlx_defined")
    overflow = _as_str(args.get("x-overflow")) or OVERFLOW_DROP_HEAD
    return QueueSettings(
        max_length=args.get("x-max-length"),
        max_length_bytes=args.get("x-max-length-bytes"),
        overflow=overflow,
        message_ttl=args.get("x-message-ttl"),
        expires=args.get("x-expires"),
        max_priority=args.get("x-max-priority"),
        single_active_consumer=bool(args.get("x-single-active-consumer", False)),
        dead_letter_exchange=_as_str(args.get("x-dead-letter-exchange")),
        dead_letter_routing_key=_as_str(args.get("x-dead-letter-routing-key")),
        consumer_timeout=args.get("x-consumer-timeout"),
    )


def check_dead_letter_exchange_type(name: str, vhost: str, arguments: dict[str, Any] | None) -> None:
    """RabbitMQ's channel checks the x-dead-letter-exchange type of a new queue (any queue type)
    before the queue's own argument validation, with a text of its own. Raises
    PreconditionFailed. Called by the server's vhost for new queues."""
    if not arguments or "x-dead-letter-exchange" not in arguments:
        return
    value = arguments["x-dead-letter-exchange"]
    if _as_str(value) is not None:
        return
    # The decoder loses the wire type; clients send small ints as 'I' (signedint).
    kind = _type_name(value)
    if kind == "long" and -2**31 <= value < 2**31:
        kind = "signedint"
    raise PreconditionFailed(f"invalid type '{kind}' for arg 'x-dead-letter-exchange' in "
                             f"{vhost_resource('queue', name, vhost)}")


def parse_consumer_priority(name: str, vhost: str, arguments: dict[str, Any] | None) -> int:
    """The x-priority of a basic.consume (default 0). Raises PreconditionFailed like RabbitMQ."""
    if not arguments or "x-priority" not in arguments:
        return 0
    value = arguments["x-priority"]
    why = _check_int(value)
    if why is not None:
        raise _invalid("x-priority", name, vhost, why)
    return value


def _lower(a: int | None, b: Any) -> int | None:
    if not _is_int(b):
        return a
    return b if a is None else min(a, b)


def apply_policy(settings: QueueSettings, policy: dict[str, Any] | None) -> QueueSettings:
    """Merge a policy definition into argument-derived settings with RabbitMQ's precedence:
    dead-letter-exchange/-routing-key: the argument wins; max-length, max-length-bytes,
    message-ttl, expires: the lower value wins; overflow: the policy wins."""
    if not policy:
        return settings
    overflow = _as_str(policy.get("overflow"))
    return replace(
        settings,
        max_length=_lower(settings.max_length, policy.get("max-length")),
        max_length_bytes=_lower(settings.max_length_bytes, policy.get("max-length-bytes")),
        message_ttl=_lower(settings.message_ttl, policy.get("message-ttl")),
        expires=_lower(settings.expires, policy.get("expires")),
        consumer_timeout=_lower(settings.consumer_timeout, policy.get("consumer-timeout")),
        overflow=overflow if overflow in _OVERFLOW_MODES else settings.overflow,
        dead_letter_exchange=settings.dead_letter_exchange
        if settings.dead_letter_exchange is not None
        else _as_str(policy.get("dead-letter-exchange")),
        dead_letter_routing_key=settings.dead_letter_routing_key
        if settings.dead_letter_routing_key is not None
        else _as_str(policy.get("dead-letter-routing-key")),
    )
