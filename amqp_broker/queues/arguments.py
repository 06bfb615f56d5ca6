"""Validation of queue.declare and basic.consume arguments.

Who calls it: `ClassicQueue.__init__` and `QuorumQueue.__init__` (declare arguments),
`ClassicQueue.add_consumer` (x-priority), the server's vhost (`check_dead_letter_exchange_type`).
How valid arguments combine with a policy is `amqp_broker.core.policies.resolve_queue_settings`;
`parse_queue_arguments` returns its result for the arguments alone.
Errors are 406 PRECONDITION_FAILED with RabbitMQ's text from rabbit_amqqueue:check_arguments:
``invalid arg 'x-max-length' for queue 'q' in vhost '/': {value_negative,-1}`` (the last part is the
Erlang term RabbitMQ prints). Unknown x- arguments are ignored, as RabbitMQ does for classic queues.
"""

from __future__ import annotations

from typing import Any

from amqp_broker.core.errors import PreconditionFailed, vhost_resource
from amqp_broker.core.fieldtypes import type_name
from amqp_broker.core.policies import QueueSettings, resolve_queue_settings

__all__ = [
    "parse_queue_arguments",
    "parse_consumer_priority",
    "check_dead_letter_exchange_type",
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


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _as_str(value: Any) -> str | None:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if isinstance(value, str) else None


def _check_int(v: Any) -> str | None:
    # rabbit_amqqueue:check_int_arg formats an Erlang string here (printed quoted), unlike the
    # {unacceptable_type,T} tuple of the bool and string checks.
    return None if _is_int(v) else f'"expected integer, got {type_name(v)}"'


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
    return None if isinstance(v, bool) else f"{{unacceptable_type,{type_name(v)}}}"


def _check_string(v: Any) -> str | None:
    return None if _as_str(v) is not None else f"{{unacceptable_type,{type_name(v)}}}"


def _check_overflow(v: Any) -> str | None:
    s = _as_str(v)
    if s is None:
        return f"{{unacceptable_type,{type_name(v)}}}"
    return None if s in _OVERFLOW_MODES else "invalid_overflow"


def _check_queue_type(v: Any) -> str | None:
    s = _as_str(v)
    if s is None:
        return f"{{unacceptable_type,{type_name(v)}}}"
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
    """Validate declare arguments; return the settings they ask for (no policy yet). Raises
    PreconditionFailed."""
    args = arguments or {}
    for key, check in _VALIDATORS:
        if key in args:
            why = check(args[key])
            if why is not None:
                raise _invalid(key, name, vhost, why)
    if "x-dead-letter-routing-key" in args and "x-dead-letter-exchange" not in args:
        raise _invalid("x-dead-letter-routing-key", name, vhost, "routing_key_but_no_dlx_defined")
    return resolve_queue_settings(args)


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
    kind = type_name(value)
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
