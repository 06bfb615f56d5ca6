"""Quorum queue settings -> the fifo's `QueueConfig`.

Called by `quorum.QuorumQueue` at declaration and on every policy change (the result is
proposed as `UpdateConfig` when it changed). `settings` come from
`amqp_broker.core.policies.resolve_queue_settings` (arguments and policy combined, as for
classic queues); this only adds what the quorum queue type defaults: a delivery limit of 20
when neither argument nor policy sets one (negative = unlimited), and at-most-once dead
lettering unless at-least-once is asked for.
`warn_dead_letter_strategy` logs a strategy the queue cannot honour.
"""

from __future__ import annotations

import logging

from amqp_broker.core.policies import QueueSettings
from quorum.fifo import (AT_LEAST_ONCE, AT_MOST_ONCE, DEFAULT_HANDOFF_TIMEOUT,
                         DEFAULT_REBALANCE_DELAY, QueueConfig)

__all__ = ["quorum_config", "warn_dead_letter_strategy", "DEFAULT_DELIVERY_LIMIT"]

_log = logging.getLogger(__name__)

DEFAULT_DELIVERY_LIMIT = 20  # RabbitMQ 4.x


def quorum_config(name: str, settings: QueueSettings, mirrored: bool = False,
                  partitioned: bool = False) -> QueueConfig:
    """The fifo configuration of quorum queue `name` with effective `settings`. A mirrored
    classic queue has no delivery limit (classic queues have none) and, with x-max-priority,
    strict priority levels. A partitioned queue (`partitioned`) adds its partitions and times;
    its messages have no TTL."""
    limit = -1 if mirrored else settings.delivery_limit
    parts: dict = {}
    if partitioned:
        handoff, delay = settings.partition_handoff_timeout, settings.partition_rebalance_delay
        parts = {"partitions": settings.partitions or 1,
                 "handoff_timeout": DEFAULT_HANDOFF_TIMEOUT if handoff is None else handoff,
                 "rebalance_delay": DEFAULT_REBALANCE_DELAY if delay is None else delay}
    strategy = settings.dead_letter_strategy
    return QueueConfig(
        name=name,
        max_length=settings.max_length,
        max_bytes=settings.max_length_bytes,
        overflow=settings.overflow,
        delivery_limit=DEFAULT_DELIVERY_LIMIT if limit is None else limit,
        msg_ttl=None if partitioned else settings.message_ttl,
        expires=settings.expires,
        dead_letter_exchange=settings.dead_letter_exchange,
        dead_letter_routing_key=settings.dead_letter_routing_key,
        dead_letter_strategy=AT_LEAST_ONCE if strategy == AT_LEAST_ONCE else AT_MOST_ONCE,
        single_active_consumer=settings.single_active_consumer,
        **parts,
        # a mirrored classic queue keeps a classic queue's strict priority levels
        max_priority=settings.max_priority if mirrored else None,
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
