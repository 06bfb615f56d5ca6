"""Quorum queue settings: declare arguments and policy -> the fifo's `QueueConfig`.

Called by `quorum.QuorumQueue` at declaration and on every policy change (the result is
proposed as `UpdateConfig` when it changed). The common arguments are validated and merged by
`arguments.py` exactly as for classic queues; this adds what only quorum queues have:
x-delivery-limit / policy delivery-limit (default 20, negative = unlimited, the lower of
argument and policy wins) and x-dead-letter-strategy / dead-letter-strategy, and
`warn_dead_letter_strategy` for a strategy the queue cannot honour.
"""

from __future__ import annotations

import logging
from typing import Any

from quorum.fifo import AT_LEAST_ONCE, AT_MOST_ONCE, QueueConfig

from .arguments import QueueSettings

__all__ = ["quorum_config", "warn_dead_letter_strategy", "DEFAULT_DELIVERY_LIMIT"]

_log = logging.getLogger(__name__)

DEFAULT_DELIVERY_LIMIT = 20  # RabbitMQ 4.x


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _delivery_limit(arguments: dict, policy: dict | None) -> int | None:
    arg = _int(arguments.get("x-delivery-limit"))
    pol = _int((policy or {}).get("delivery-limit"))
    values = [v for v in (arg, pol) if v is not None]
    if not values:
        return DEFAULT_DELIVERY_LIMIT
    if any(v < 0 for v in values):
        # -1 asks for unlimited; with two values the non-negative (lower) limit wins
        positive = [v for v in values if v >= 0]
        return min(positive) if positive else None
    return min(values)


def _strategy(arguments: dict, policy: dict | None) -> str:
    v = arguments.get("x-dead-letter-strategy") or (policy or {}).get("dead-letter-strategy")
    if isinstance(v, bytes):
        v = v.decode()
    return AT_LEAST_ONCE if v == AT_LEAST_ONCE else AT_MOST_ONCE


def quorum_config(name: str, settings: QueueSettings, arguments: dict,
                  policy: dict | None) -> QueueConfig:
    """`settings` are the argument+policy settings from `arguments.apply_policy`."""
    return QueueConfig(
        name=name,
        max_length=settings.max_length,
        max_bytes=settings.max_length_bytes,
        overflow=settings.overflow,
        delivery_limit=_delivery_limit(arguments, policy),
        msg_ttl=settings.message_ttl,
        expires=settings.expires,
        dead_letter_exchange=settings.dead_letter_exchange,
        dead_letter_routing_key=settings.dead_letter_routing_key,
        dead_letter_strategy=_strategy(arguments, policy),
        single_active_consumer=settings.single_active_consumer,
    ).normalise()


def warn_dead_letter_strategy(config: QueueConfig, name: str) -> None:
    """at-least-once needs overflow reject-publish (and a DLX); otherwise it falls back to
    at-most-once, as documented, with a warning. Called on declare and on policy changes."""
    if config.dead_letter_strategy != AT_LEAST_ONCE:
        return
    if config.dead_letter_exchange is None:
        _log.warning("quorum queue %r: dead-letter-strategy at-least-once without a dead-letter "
                     "exchange: messages are dropped", name)
    elif config.overflow != "reject-publish":
        _log.warning("quorum queue %r: dead-letter-strategy at-least-once needs overflow "
                     "reject-publish (have %s): falling back to at-most-once", name,
                     config.overflow)
