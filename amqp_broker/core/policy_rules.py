"""Validation rules for policy definitions, and how operator policies merge into policies.

Kept apart from ``policies.py`` (selection and resolution) because it is a long table. Keys
and accepted values follow RabbitMQ's ``rabbit_policies``, ``rabbit_mirror_queue_misc``
(ha-*), ``rabbit_quorum_queue`` and ``rabbit_stream_queue`` validators; messages say which
key and value were refused. Used by ``amqp_broker.core.policies``.

Pure.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Mapping

__all__ = [
    "OPERATOR_KEYS",
    "POLICY_KEYS",
    "QUORUM_NOT_APPLICABLE",
    "PolicyError",
    "merge_operator_value",
    "validate_definition",
]


class PolicyError(ValueError):
    """An invalid policy; the message is what ``set_policy`` / the HTTP API reports."""


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _int_at_least(lo: int, what: str) -> Callable[[str, Any], None]:
    def check(key: str, v: Any) -> None:
        if not (_is_int(v) and v >= lo):
            raise PolicyError(f"{v!r} is not a valid {what} (key '{key}')")
    return check


def _any_int(what: str) -> Callable[[str, Any], None]:
    def check(key: str, v: Any) -> None:
        if not _is_int(v):
            raise PolicyError(f"{v!r} is not a valid {what} (key '{key}')")
    return check


def _string(what: str) -> Callable[[str, Any], None]:
    def check(key: str, v: Any) -> None:
        if not isinstance(v, str):
            raise PolicyError(f"{v!r} is not a valid {what} (key '{key}')")
    return check


def _one_of(*allowed: Any) -> Callable[[str, Any], None]:
    def check(key: str, v: Any) -> None:
        if isinstance(v, bool) or v not in allowed:
            choices = ", ".join(repr(a) for a in allowed)
            raise PolicyError(f"{v!r} is not a valid {key} value; expected one of {choices}")
    return check


_MAX_AGE = re.compile(r"^[0-9]+[YMDhms]$")


def _max_age(key: str, v: Any) -> None:
    if not (isinstance(v, str) and _MAX_AGE.match(v)):
        raise PolicyError(f"{v!r} is not a valid max age (e.g. '7D', '12h', '30m')")


def _ha_params(key: str, v: Any) -> None:
    pass  # checked together with ha-mode in _check_ha


POLICY_KEYS: dict[str, Callable[[str, Any], None]] = {
    "alternate-exchange": _string("alternate exchange name"),
    "dead-letter-exchange": _string("dead letter exchange name"),
    "dead-letter-routing-key": _string("dead letter routing key"),
    "dead-letter-strategy": _one_of("at-most-once", "at-least-once"),
    "message-ttl": _int_at_least(0, "message TTL"),
    "expires": _int_at_least(1, "queue expiry"),
    "max-length": _int_at_least(0, "maximum length"),
    "max-length-bytes": _int_at_least(0, "maximum length in bytes"),
    "max-in-memory-length": _int_at_least(0, "maximum in-memory length"),
    "max-in-memory-bytes": _int_at_least(0, "maximum in-memory bytes"),
    "overflow": _one_of("drop-head", "reject-publish", "reject-publish-dlx"),
    "delivery-limit": _any_int("delivery limit"),  # negative = unlimited (4.x)
    "consumer-timeout": _int_at_least(0, "consumer timeout"),
    "queue-mode": _one_of("default", "lazy"),
    "queue-version": _one_of(1, 2),
    "queue-leader-locator": _one_of("client-local", "balanced", "random", "least-leaders"),
    "queue-master-locator": _one_of("min-masters", "client-local", "random"),
    "initial-cluster-size": _int_at_least(1, "cluster size"),
    "target-group-size": _int_at_least(1, "qq target count value"),
    "max-age": _max_age,
    "stream-max-segment-size-bytes": _int_at_least(0, "segment size"),
    "ha-mode": _one_of("all", "exactly", "nodes"),
    "ha-params": _ha_params,
    "ha-sync-mode": _one_of("manual", "automatic"),
    "ha-sync-batch-size": _int_at_least(1, "ha-sync-batch-size"),
    "ha-promote-on-shutdown": _one_of("when-synced", "always"),
    "ha-promote-on-failure": _one_of("when-synced", "always"),
    # partitioned queues (ours)
    "partition-handoff-timeout": _int_at_least(0, "partition handoff timeout"),
    "partition-rebalance-delay": _int_at_least(0, "partition rebalance delay"),
}

OPERATOR_KEYS = frozenset(
    {"expires", "message-ttl", "max-length", "max-length-bytes", "max-in-memory-length",
     "max-in-memory-bytes", "delivery-limit", "target-group-size"}
)

# Keys that make a policy not apply to quorum queues at all (classic-only features).
QUORUM_NOT_APPLICABLE = frozenset(
    {"max-priority", "queue-mode", "single-active-consumer", "ha-mode", "ha-params",
     "ha-sync-mode", "ha-promote-on-shutdown", "ha-promote-on-failure", "queue-master-locator"}
)


def validate_definition(definition: Any, *, operator: bool = False) -> None:
    """Raise ``PolicyError`` unless ``definition`` is a valid (operator) policy definition."""
    if not isinstance(definition, Mapping):
        raise PolicyError(f"definition must be a dictionary: {definition!r}")
    if not definition:
        raise PolicyError("no policy provided")
    allowed = OPERATOR_KEYS if operator else POLICY_KEYS.keys()
    unknown = sorted(str(k) for k in definition if k not in allowed)
    if unknown:
        kind = "operator policy" if operator else "policy"
        raise PolicyError(
            ", ".join(f"'{k}'" for k in unknown)
            + f" {'is' if len(unknown) == 1 else 'are'} not recognised {kind} settings"
        )
    for k, v in definition.items():
        POLICY_KEYS[k](k, v)
    _check_ha(definition)


def _check_ha(d: Mapping[str, Any]) -> None:
    mode, params = d.get("ha-mode"), d.get("ha-params")
    if mode is None:
        for k in ("ha-params", "ha-sync-mode", "ha-sync-batch-size", "ha-promote-on-shutdown", "ha-promote-on-failure"):
            if k in d:
                raise PolicyError(f"{k} cannot be set without ha-mode")
        return
    if mode == "all":
        if params is not None:
            raise PolicyError('ha-mode="all" does not take parameters')
    elif mode == "exactly":
        if not (_is_int(params) and params > 0):
            raise PolicyError(f'ha-mode="exactly" takes a positive integer, {params!r} given')
    elif mode == "nodes":
        if not (isinstance(params, list) and params and all(isinstance(n, str) for n in params)):
            raise PolicyError(f'ha-mode="nodes" takes a non-empty list of node names, {params!r} given')


def merge_operator_value(key: str, policy_val: Any, op_val: Any) -> Any:
    """Value when both a policy and an operator policy set ``key`` (operators cap users).

    Limits take the lower value (rabbit_policies:merge_policy_value). For delivery-limit a
    negative value means unlimited, so the non-negative one caps it. target-group-size takes
    the higher (rabbit_quorum_queue:merge_policy_value).
    """
    if key == "target-group-size":
        return max(policy_val, op_val)
    if key == "delivery-limit" and (policy_val < 0 or op_val < 0):
        return op_val if policy_val < 0 and op_val >= 0 else policy_val if op_val < 0 else min(policy_val, op_val)
    if key in OPERATOR_KEYS:
        return min(policy_val, op_val)
    return op_val
