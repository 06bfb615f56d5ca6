"""Validation of queue.declare and basic.consume arguments.

Who calls it: `ClassicQueue.__init__` and `QuorumQueue.__init__` (declare arguments; a
partitioned queue is a quorum queue and is checked here too: x-partitions 1..1024 required,
the two partition times, the quorum queue's replication, limit and dead-letter arguments),
`ClassicQueue.add_consumer` (x-priority), the server's vhost (`check_dead_letter_exchange_type`,
`check_declare_arguments`, `queue_type_of`).
How valid arguments combine with a policy is `amqp_broker.core.policies.resolve_queue_settings`;
`parse_queue_arguments` returns its result for the arguments alone.
Errors are 406 PRECONDITION_FAILED with RabbitMQ's text from rabbit_amqqueue:check_arguments:
``invalid arg 'x-max-length' for queue 'q' in vhost '/': {value_negative,-1}`` (the last part is the
Erlang term RabbitMQ prints). As in RabbitMQ, each queue type validates its own arguments, an
argument only another type knows is refused, and unknown x- arguments are ignored.
"""

from __future__ import annotations

from typing import Any

from amqp_broker.core.errors import PreconditionFailed, vhost_resource
from amqp_broker.core.fieldtypes import type_name
from amqp_broker.core.policies import QueueSettings, resolve_queue_settings

__all__ = [
    "parse_queue_arguments",
    "check_declare_arguments",
    "check_server_named",
    "queue_type_of",
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
_QUEUE_TYPES = ("classic", "quorum", "stream", "partitioned")
MAX_PARTITIONS = 1024
_QUEUE_MODES = ("default", "lazy")
_DEAD_LETTER_STRATEGIES = ("at-most-once", "at-least-once")
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
    return _check_member(v, _OVERFLOW_MODES, "invalid_overflow")


def _check_dead_letter_strategy(v: Any) -> str | None:
    return _check_member(v, _DEAD_LETTER_STRATEGIES, "invalid_dlx_strategy")


def _check_queue_mode(v: Any) -> str | None:
    s = _as_str(v)
    return _check_member(v, _QUEUE_MODES, f"\"unsupported queue mode '{s}'\"")


def _check_queue_version(v: Any) -> str | None:
    err = _check_non_neg(v)
    if err is None and v not in (1, 2):
        return f"\"unsupported queue version '{v}'\""
    return err


def _check_group_size(v: Any) -> str | None:
    if _is_int(v) and v == 0:
        return "{value_zero,0}"
    return _check_non_neg(v)


def _check_partitions(v: Any) -> str | None:
    if _is_int(v) and v == 0:
        return "{value_zero,0}"
    err = _check_non_neg(v)
    if err is None and v > MAX_PARTITIONS:
        return f"{{value_too_large,{v},{MAX_PARTITIONS}}}"
    return err


def _check_member(v: Any, allowed: tuple[str, ...], why: str) -> str | None:
    s = _as_str(v)
    if s is None:
        return f"{{unacceptable_type,{type_name(v)}}}"
    return None if s in allowed else why


def _check_queue_type(v: Any) -> str | None:
    s = _as_str(v)
    if s is None:
        return f"{{unacceptable_type,{type_name(v)}}}"
    if s == "stream":
        # RabbitMQ has streams; this broker does not (yet): refuse rather than pretend.
        return "\"unsupported queue type 'stream': streams are not supported by this broker\""
    return None if s in _QUEUE_TYPES else f"\"unsupported queue type '{s}'\""


# rabbit_amqqueue:declare_args/0, in its order (the first failing check is the one reported).
_VALIDATORS = (
    ("x-expires", _check_expires),
    ("x-message-ttl", _check_expiry),
    ("x-dead-letter-exchange", _check_string),
    ("x-dead-letter-routing-key", _check_string),
    ("x-dead-letter-strategy", _check_dead_letter_strategy),
    ("x-max-length", _check_non_neg),
    ("x-max-length-bytes", _check_non_neg),
    ("x-max-in-memory-length", _check_non_neg),
    ("x-max-in-memory-bytes", _check_non_neg),
    ("x-max-priority", _check_max_priority),
    ("x-overflow", _check_overflow),
    ("x-queue-mode", _check_queue_mode),
    ("x-queue-version", _check_queue_version),
    ("x-single-active-consumer", _check_bool),
    ("x-quorum-initial-group-size", _check_group_size),
    ("x-quorum-target-group-size", _check_group_size),
    ("x-consumer-timeout", _check_non_neg),
    # partitioned queues (ours, seed 001)
    ("x-partitions", _check_partitions),
    ("x-partition-handoff-timeout", _check_expiry),
    ("x-partition-rebalance-delay", _check_expiry),
)

# The queue_arguments capability of each RabbitMQ 4.2 queue type module: the keys a queue of
# that type validates; a key known to another type only is refused (check_arguments_key).
_TYPE_ARGUMENTS = {
    "classic": frozenset((
        "x-expires", "x-message-ttl", "x-dead-letter-exchange", "x-dead-letter-routing-key",
        "x-max-length", "x-max-length-bytes", "x-max-priority", "x-overflow", "x-queue-mode",
        "x-queue-version", "x-single-active-consumer", "x-queue-type", "x-queue-master-locator",
        "x-queue-leader-locator", "x-consumer-timeout")),
    "quorum": frozenset((
        "x-dead-letter-exchange", "x-dead-letter-routing-key", "x-dead-letter-strategy",
        "x-expires", "x-max-length", "x-max-length-bytes", "x-max-in-memory-length",
        "x-max-in-memory-bytes", "x-overflow", "x-single-active-consumer", "x-queue-type",
        "x-quorum-initial-group-size", "x-quorum-target-group-size", "x-delivery-limit",
        "x-message-ttl",
        "x-queue-leader-locator", "x-consumer-timeout")),
    # a quorum queue's replication, limits and dead lettering; no single active consumer (each
    # partition has one already), no TTL and no priorities (they would reorder a key)
    "partitioned": frozenset((
        "x-dead-letter-exchange", "x-dead-letter-routing-key", "x-dead-letter-strategy",
        "x-expires", "x-max-length", "x-max-length-bytes", "x-overflow", "x-queue-type",
        "x-quorum-initial-group-size", "x-quorum-target-group-size", "x-delivery-limit",
        "x-queue-leader-locator", "x-consumer-timeout", "x-partitions",
        "x-partition-handoff-timeout", "x-partition-rebalance-delay")),
    "stream": frozenset((
        "x-max-length-bytes", "x-queue-type", "x-max-age", "x-stream-max-segment-size-bytes",
        "x-stream-filter-size-bytes", "x-initial-cluster-size", "x-queue-leader-locator")),
}
_KNOWN_ARGUMENTS = frozenset().union(*_TYPE_ARGUMENTS.values())
_TYPE_MODULES = {"classic": "rabbit_classic_queue", "quorum": "rabbit_quorum_queue",
                 "stream": "rabbit_stream_queue", "partitioned": "partitioned_queue"}


def _invalid(key: str, name: str, vhost: str, why: str) -> PreconditionFailed:
    return PreconditionFailed(f"invalid arg '{key}' for {vhost_resource('queue', name, vhost)}: {why}")


def queue_type_module(queue_type: str) -> str:
    """RabbitMQ's module name of a queue type ("rabbit_quorum_queue"), as its texts and the
    Prometheus queue_type label spell it."""
    return _TYPE_MODULES[queue_type]


def queue_type_of(arguments: dict[str, Any] | None) -> str:
    """The queue type a declare asks for: x-queue-type, "classic" when absent or empty."""
    value = (arguments or {}).get("x-queue-type")
    return (_as_str(value) if value is not None else None) or "classic"


def check_declare_arguments(name: str, vhost: str, arguments: dict[str, Any] | None) -> None:
    """rabbit_amqqueue:check_declare_arguments: x-queue-type first, then the values of the
    arguments that queue type knows, then arguments that only other types know ("invalid arg
    'x-queue-mode' for queue 'q' in vhost '/' of queue type rabbit_quorum_queue"). Unknown
    x- arguments pass. Raises PreconditionFailed. Called for new queues by the server's vhost
    (before the quorum property checks, as RabbitMQ) and by `parse_queue_arguments`."""
    args = arguments or {}
    if "x-queue-type" in args:
        why = _check_queue_type(args["x-queue-type"])
        if why is not None:
            raise _invalid("x-queue-type", name, vhost, why)
    qtype = queue_type_of(args)
    own = _TYPE_ARGUMENTS[qtype]
    for key, check in _VALIDATORS:
        if key in args and key in own:
            why = check(args[key])
            if why is None and key == "x-dead-letter-routing-key" and "x-dead-letter-exchange" not in args:
                why = "routing_key_but_no_dlx_defined"
            if why is not None:
                raise _invalid(key, name, vhost, why)
    for key in args:
        if key in _KNOWN_ARGUMENTS and key not in own:
            raise PreconditionFailed(f"invalid arg '{key}' for {vhost_resource('queue', name, vhost)} "
                                     f"of queue type {_TYPE_MODULES[qtype]}")
    if qtype == "partitioned" and "x-partitions" not in args:
        raise _invalid("x-partitions", name, vhost, "required for x-queue-type partitioned "
                       f"(an integer from 1 to {MAX_PARTITIONS})")


def check_server_named(arguments: dict[str, Any] | None) -> None:
    """An empty queue name asks for a server-named queue, which only classic queues can be
    (rabbit_amqqueue:is_server_named_allowed). Raises PreconditionFailed with rabbit_channel's
    text. Called by the server's queue.declare handler before anything else."""
    qtype = queue_type_of(arguments)
    if qtype in ("quorum", "stream", "partitioned"):
        raise PreconditionFailed(
            f"Cannot declare a server-named queue for type {_TYPE_MODULES[qtype]}")


def parse_queue_arguments(name: str, vhost: str, arguments: dict[str, Any] | None) -> QueueSettings:
    """Validate declare arguments (`check_declare_arguments`); return the settings they ask for
    (no policy yet). Raises PreconditionFailed."""
    check_declare_arguments(name, vhost, arguments)
    return resolve_queue_settings(arguments or {})


def check_dead_letter_exchange_type(name: str, vhost: str, arguments: dict[str, Any] | None) -> None:
    """RabbitMQ's channel checks the x-dead-letter-exchange type of a new queue (any queue type)
    before the queue's own argument validation, with a text of its own. Raises
    PreconditionFailed. Called by the server's vhost for new queues."""
    if not arguments or "x-dead-letter-exchange" not in arguments:
        return
    value = arguments["x-dead-letter-exchange"]
    if _as_str(value) is not None:
        return
    raise PreconditionFailed(f"invalid type '{type_name(value)}' for arg 'x-dead-letter-exchange' in "
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
