"""Policies and operator policies: validation, selection, and effective queue settings.

A policy applies optional settings to queues or exchanges by name pattern, as RabbitMQ's
``rabbit_policy``: at most one policy and one operator policy apply to an entity, the matching
one with the highest priority (ties: the first in the list given, which ``PolicyStore`` keeps
sorted by name so the choice is deterministic on every node). Settings then combine with the
entity's ``x-`` arguments by per-key rules (``resolve_queue_settings``).

Callers: the metadata layer validates ``set_policy`` input with ``make_policy`` and keeps a
``PolicyStore`` per vhost; queue declaration and policy changes call ``PolicyStore.for_queue``
and ``resolve_queue_settings``; exchanges take their alternate exchange from
``PolicyStore.for_exchange``. The management API lists ``Policy.as_dict``.

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
            if queue_type == "quorum" and any(k in QUORUM_NOT_APPLICABLE for k in self.definition):
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


def _arg_wins(policy_val: Any, arg_val: Any) -> Any:
    return arg_val


def _policy_wins(policy_val: Any, arg_val: Any) -> Any:
    return policy_val


def _lower(policy_val: Any, arg_val: Any) -> Any:
    return min(policy_val, arg_val)


def _delivery_limit(policy_val: Any, arg_val: Any) -> Any:
    # rabbit_quorum_queue:resolve_delivery_limit: a negative value means "unlimited".
    if policy_val < 0 or arg_val < 0:
        return max(policy_val, arg_val)
    return min(policy_val, arg_val)


_RESOLVE: dict[str, Callable[[Any, Any], Any]] = {
    "dead-letter-exchange": _arg_wins,
    "dead-letter-routing-key": _arg_wins,
    "dead-letter-strategy": _arg_wins,
    "message-ttl": _lower,
    "expires": _lower,
    "max-length": _lower,
    "max-length-bytes": _lower,
    "overflow": _policy_wins,  # quorum and stream; classic queues override below
    "delivery-limit": _delivery_limit,
    "consumer-timeout": _lower,
}
_CLASSIC_OVERRIDES = {"overflow": _arg_wins}  # rabbit_amqqueue_process uses res_arg for overflow


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """Settings of a queue after combining arguments, policy and operator policy.

    ``values`` holds every resolved key by its policy name (``"max-length"``, ``"ha-mode"``,
    ...); the attributes are the ones the queue types read. ``None`` means unset.
    """

    values: Mapping[str, Any]
    policy: str | None = None
    operator_policy: str | None = None

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    @property
    def message_ttl(self) -> int | None:
        return self.values.get("message-ttl")

    @property
    def expires(self) -> int | None:
        return self.values.get("expires")

    @property
    def max_length(self) -> int | None:
        return self.values.get("max-length")

    @property
    def max_length_bytes(self) -> int | None:
        return self.values.get("max-length-bytes")

    @property
    def overflow(self) -> str | None:
        return self.values.get("overflow")

    @property
    def dead_letter_exchange(self) -> str | None:
        return self.values.get("dead-letter-exchange")

    @property
    def dead_letter_routing_key(self) -> str | None:
        return self.values.get("dead-letter-routing-key")

    @property
    def dead_letter_strategy(self) -> str | None:
        return self.values.get("dead-letter-strategy")

    @property
    def delivery_limit(self) -> int | None:
        return self.values.get("delivery-limit")

    @property
    def dead_letter_mode(self) -> str | None:
        """How a quorum queue dead-letters: None (drop), "at-most-once" or "at-least-once".

        at-least-once needs a DLX and an overflow other than drop-head; otherwise RabbitMQ
        falls back to at-most-once (and logs a warning).
        """
        if self.dead_letter_exchange is None:
            return None
        if self.dead_letter_strategy == "at-least-once" and (self.overflow or "drop-head") != "drop-head":
            return "at-least-once"
        return "at-most-once"


def resolve_queue_settings(
    arguments: Mapping[str, Any] | None,
    policy: Policy | None = None,
    operator_policy: Policy | None = None,
    queue_type: str = "classic",
) -> QueueSettings:
    """Combine ``x-`` queue arguments with the (merged) policy definition.

    Per key: dead-letter exchange / routing key / strategy: the argument wins; message-ttl,
    expires, max-length, max-length-bytes: the lower wins; overflow: the policy wins (quorum;
    classic queues let the argument win); delivery-limit: the lower, unless either is
    negative, then the higher. Any other key: the argument wins.
    """
    args = arguments or {}
    merged = effective_definition(policy, operator_policy)
    values: dict[str, Any] = {}
    for k, v in args.items():
        if k.startswith("x-"):
            values[k[2:]] = v
    for k, pv in merged.items():
        if k in values:
            resolve = (_CLASSIC_OVERRIDES.get(k) if queue_type == "classic" else None) or _RESOLVE.get(k, _arg_wins)
            values[k] = resolve(pv, values[k])
        else:
            values[k] = pv
    return QueueSettings(
        values,
        policy.name if policy else None,
        operator_policy.name if operator_policy else None,
    )

