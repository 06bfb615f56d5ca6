"""Policies and operator policies: validation, selection, and effective queue settings.

A policy applies optional settings to queues or exchanges by name pattern, as RabbitMQ's
``rabbit_policy``: at most one policy and one operator policy apply to an entity, the matching
one with the highest priority (ties: the first in the list given, which ``PolicyStore`` keeps
sorted by name so the choice is deterministic on every node). Settings then combine with the
entity's ``x-`` arguments by per-key rules (``resolve_queue_settings``, the only implementation
of those rules: classic and quorum queues both call it).

Callers: the metadata layer validates ``set_policy`` input with ``make_policy`` and keeps a
``PolicyStore`` per vhost; on a policy change ``server/admin.py`` picks a queue's policies
with ``PolicyStore.for_queue`` and hands ``effective_definition`` to the queue, which calls
``resolve_queue_settings`` (``queues/classic.py``, ``queues/quorum.py``; ``queues/arguments.py``
at declaration); exchanges take their alternate exchange from ``PolicyStore.for_exchange``.
The management API lists ``Policy.as_dict``.

Pure: no IO, no clock.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from .policy_rules import (
    QUORUM_NOT_APPLICABLE,
    PolicyError,
    merge_operator_value,
    validate_definition,
)

__all__ = [
    "APPLY_TO_ALL_VERSIONS",
    "APPLY_TO_3_10",
    "Policy",
    "PolicyError",
    "PolicyStore",
    "QueueSettings",
    "effective_definition",
    "make_policy",
    "resolve_queue_settings",
    "select_policy",
]

# apply-to values: RabbitMQ 4.x knows queue-type specific values; 3.10 only the first three.
APPLY_TO_ALL_VERSIONS = ("all", "queues", "exchanges", "classic_queues", "quorum_queues", "streams")
APPLY_TO_3_10 = ("all", "queues", "exchanges")

_TYPE_APPLY_TO = {"classic": "classic_queues", "quorum": "quorum_queues", "stream": "streams"}


@dataclass(frozen=True, slots=True)
class Policy:
    """A validated policy (or operator policy). Build with ``make_policy``."""

    name: str
    vhost: str
    pattern: str
    definition: Mapping[str, Any]
    priority: int = 0
    apply_to: str = "all"
    operator: bool = False
    _rx: re.Pattern = field(default=None, repr=False, compare=False)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self._rx is None:  # built directly rather than through make_policy
            object.__setattr__(self, "_rx", re.compile(self.pattern))

    def matches(self, kind: str, name: str, queue_type: str | None = None) -> bool:
        """Does this policy apply to the ``kind`` ("queue" / "exchange") called ``name``?"""
        if kind == "exchange":
            if self.apply_to not in ("exchanges", "all"):
                return False
        elif kind == "queue":
            if self.apply_to not in ("queues", "all") and self.apply_to != _TYPE_APPLY_TO.get(queue_type or "classic"):
                return False
            if queue_type in ("quorum", "partitioned") and any(
                    k in QUORUM_NOT_APPLICABLE for k in self.definition):
                # rabbit_quorum_queue:is_policy_applicable: a policy carrying classic-only
                # keys (ha-mode, queue-mode, ...) does not apply to a quorum queue at all.
                return False
        else:
            return False
        return self._rx.search(name) is not None

    def as_dict(self) -> dict[str, Any]:
        """The management API / ``list_policies`` shape."""
        return {
            "vhost": self.vhost,
            "name": self.name,
            "pattern": self.pattern,
            "apply-to": self.apply_to,
            "definition": dict(self.definition),
            "priority": self.priority,
        }


def make_policy(
    name: str,
    vhost: str,
    pattern: str,
    definition: Mapping[str, Any],
    priority: Any = 0,
    apply_to: str | None = "all",
    *,
    operator: bool = False,
    apply_to_values: tuple[str, ...] = APPLY_TO_ALL_VERSIONS,
) -> Policy:
    """Validate and build a policy; raise ``PolicyError`` with a clear message if invalid."""
    if isinstance(priority, bool) or not isinstance(priority, int):
        try:
            priority = int(str(priority))
        except ValueError:
            raise PolicyError(f"{priority!r} priority must be a number") from None
    apply_to = "all" if apply_to is None else apply_to
    if apply_to not in apply_to_values:
        raise PolicyError(
            f"apply-to '{apply_to}' unrecognised; should be one of: "
            + ", ".join(f"'{v}'" for v in apply_to_values)
        )
    if not isinstance(pattern, str):
        raise PolicyError(f"{pattern!r} is not a valid regular expression")
    try:
        rx = re.compile(pattern)
    except re.error as e:
        raise PolicyError(f"'{pattern}' is not a valid regular expression: {e}") from None
    validate_definition(definition, operator=operator)
    return Policy(name, vhost, pattern, dict(definition), priority, apply_to, operator, rx)


def select_policy(
    policies: Iterable[Policy], kind: str, name: str, queue_type: str | None = None
) -> Policy | None:
    """The matching policy with the highest priority; ties go to the earliest in ``policies``."""
    best: Policy | None = None
    for p in policies:
        if (best is None or p.priority > best.priority) and p.matches(kind, name, queue_type):
            best = p
    return best


def effective_definition(policy: Policy | None, operator_policy: Policy | None) -> dict[str, Any]:
    """Policy and operator policy merged (``effective_policy_definition`` in the API)."""
    out = dict(policy.definition) if policy else {}
    if operator_policy:
        for k, v in operator_policy.definition.items():
            out[k] = merge_operator_value(k, out[k], v) if k in out else v
    return out


class PolicyStore:
    """The policies and operator policies of one vhost, kept sorted by name."""

    def __init__(self, vhost: str = "/") -> None:
        self.vhost = vhost
        self._policies: dict[str, Policy] = {}
        self._operator: dict[str, Policy] = {}

    def set(self, policy: Policy) -> None:
        table = self._operator if policy.operator else self._policies
        table[policy.name] = policy
        table_sorted = dict(sorted(table.items()))
        table.clear()
        table.update(table_sorted)

    def delete(self, name: str, *, operator: bool = False) -> bool:
        return (self._operator if operator else self._policies).pop(name, None) is not None

    def get(self, name: str, *, operator: bool = False) -> Policy | None:
        return (self._operator if operator else self._policies).get(name)

    def list(self, *, operator: bool = False) -> list[Policy]:
        """Sorted as ``rabbit_policy:sort_by_priority`` lists them: lowest priority first
        (ties by name)."""
        table = self._operator if operator else self._policies
        return sorted(table.values(), key=lambda p: p.priority)

    def for_queue(self, name: str, queue_type: str = "classic") -> tuple[Policy | None, Policy | None]:
        """(policy, operator policy) that apply to a queue."""
        return (
            select_policy(self._policies.values(), "queue", name, queue_type),
            select_policy(self._operator.values(), "queue", name, queue_type),
        )

    def for_exchange(self, name: str) -> tuple[Policy | None, Policy | None]:
        return (
            select_policy(self._policies.values(), "exchange", name),
            select_policy(self._operator.values(), "exchange", name),
        )

    def exchange_alternate(self, name: str) -> str | None:
        """The ``alternate-exchange`` a policy gives exchange ``name`` (argument still wins)."""
        policy, _ = self.for_exchange(name)
        ae = policy.definition.get("alternate-exchange") if policy else None
        return ae if isinstance(ae, str) else None


# -- effective queue settings ------------------------------------------------------------------
#
# The one place where a queue's x- arguments and its (merged) policy definition combine; every
# queue type reads the result. Rules from rabbit_amqqueue_process:process_args_policy (classic)
# and rabbit_quorum_queue (quorum); they only matter when both the argument and the policy set
# a key, otherwise whichever is set applies.


def _arg_wins(policy_val: Any, arg_val: Any) -> Any:
    return arg_val


def _policy_wins(policy_val: Any, arg_val: Any) -> Any:
    return policy_val


def _lower(policy_val: Any, arg_val: Any) -> Any:
    return min(policy_val, arg_val)


def _delivery_limit(policy_val: Any, arg_val: Any) -> Any:
    # rabbit_quorum_queue:resolve_delivery_limit: a negative value means "unlimited", so with
    # one negative value the other (the limit) wins.
    if policy_val < 0 or arg_val < 0:
        return max(policy_val, arg_val)
    return min(policy_val, arg_val)


# policy key (argument "x-" + key) -> (QueueSettings field, type, rule when both are set);
# rule None: an argument only, no policy can set it.
_RULES: dict[str, tuple[str, type, Callable[[Any, Any], Any] | None]] = {
    "max-length": ("max_length", int, _lower),
    "max-length-bytes": ("max_length_bytes", int, _lower),
    "overflow": ("overflow", str, _policy_wins),  # quorum and stream; classic: _CLASSIC_RULES
    "message-ttl": ("message_ttl", int, _lower),
    "expires": ("expires", int, _lower),
    "max-priority": ("max_priority", int, None),
    "single-active-consumer": ("single_active_consumer", bool, None),
    "dead-letter-exchange": ("dead_letter_exchange", str, _arg_wins),
    "dead-letter-routing-key": ("dead_letter_routing_key", str, _arg_wins),
    "dead-letter-strategy": ("dead_letter_strategy", str, _arg_wins),
    "delivery-limit": ("delivery_limit", int, _delivery_limit),
    "consumer-timeout": ("consumer_timeout", int, _lower),
    # classic queues: lazy pages every message out (the argument wins, as in RabbitMQ 3.x)
    "queue-mode": ("queue_mode", str, _arg_wins),
    # partitioned queues: the number is fixed at declaration; the times as consumer-timeout
    "partitions": ("partitions", int, None),
    "partition-handoff-timeout": ("partition_handoff_timeout", int, _lower),
    "partition-rebalance-delay": ("partition_rebalance_delay", int, _lower),
}
# rabbit_amqqueue_process resolves overflow with res_arg: on a classic queue the argument wins.
_CLASSIC_RULES: dict[str, Callable[[Any, Any], Any]] = {"overflow": _arg_wins}


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """The effective settings of one queue: its ``x-`` arguments combined with its policy.

    Built only by ``resolve_queue_settings``. ``None`` means unset (no limit; for
    ``delivery_limit`` the queue type's default applies; for ``consumer_timeout`` the node's).
    Values are as given: a negative ``delivery_limit`` means unlimited.
    """

    max_length: int | None = None
    max_length_bytes: int | None = None
    overflow: str = "drop-head"
    message_ttl: int | None = None
    expires: int | None = None
    max_priority: int | None = None
    single_active_consumer: bool = False
    dead_letter_exchange: str | None = None
    dead_letter_routing_key: str | None = None
    dead_letter_strategy: str = "at-most-once"
    delivery_limit: int | None = None
    consumer_timeout: int | None = None
    queue_mode: str = "default"
    partitions: int | None = None
    partition_handoff_timeout: int | None = None
    partition_rebalance_delay: int | None = None


def resolve_queue_settings(
    arguments: Mapping[str, Any] | None,
    definition: Mapping[str, Any] | None = None,
    queue_type: str = "classic",
) -> QueueSettings:
    """Combine a queue's ``x-`` arguments with a policy ``definition`` (the policy and operator
    policy already merged by ``effective_definition``), for a queue of ``queue_type``.

    When both set a key: dead-letter exchange / routing key / strategy: the argument wins;
    message-ttl, expires, max-length, max-length-bytes, consumer-timeout,
    partition-handoff-timeout, partition-rebalance-delay: the lower wins;
    overflow: the policy wins on quorum (and stream) queues, the argument on classic queues;
    delivery-limit: the lower, unless either is negative (unlimited), then the higher.
    ``arguments`` are expected to be validated already (``queues.parse_queue_arguments``);
    values of the wrong type and other keys are ignored. Called by the queue types at
    declaration and on every policy change.
    """
    args = arguments or {}
    policy = definition or {}
    fields: dict[str, Any] = {}
    for key, (name, kind, rule) in _RULES.items():
        arg_val = _typed(args.get("x-" + key), kind)
        policy_val = _typed(policy.get(key), kind) if rule is not None else None
        if policy_val is None or rule is None:
            value = arg_val
        elif arg_val is None:
            value = policy_val
        else:
            if queue_type == "classic":
                rule = _CLASSIC_RULES.get(key, rule)
            value = rule(policy_val, arg_val)
        if value is not None:
            fields[name] = value
    return QueueSettings(**fields)


def _typed(value: Any, kind: type) -> Any:
    """``value`` if it is a ``kind`` (strings may arrive as bytes), else None: an argument the
    queue type does not validate (x-delivery-limit, x-dead-letter-strategy) counts as unset."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if kind is int and isinstance(value, bool):
        return None
    return value if isinstance(value, kind) else None
