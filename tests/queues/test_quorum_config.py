"""Quorum queue settings (`amqp_broker.queues.quorum_config`): the dead-letter strategy warning."""

from __future__ import annotations

from amqp_broker.queues.quorum_config import warn_dead_letter_strategy
from quorum.fifo import QueueConfig

_ALO = dict(dead_letter_strategy="at-least-once", dead_letter_exchange="dlx")


def test_fallback_to_at_most_once_is_logged(caplog):
    with caplog.at_level("WARNING", logger="amqp_broker.queues.quorum_config"):
        warn_dead_letter_strategy(QueueConfig(name="q1", overflow="reject-publish", **_ALO), "q1")
        assert caplog.records == []
        warn_dead_letter_strategy(QueueConfig(name="q2", overflow="drop-head", **_ALO), "q2")
    assert len(caplog.records) == 1 and "falling back to at-most-once" in caplog.text
    assert QueueConfig(name="q2", overflow="drop-head", **_ALO).at_least_once is False


def test_at_least_once_without_a_dlx_is_logged(caplog):
    cfg = QueueConfig(name="q3", overflow="reject-publish", dead_letter_strategy="at-least-once")
    with caplog.at_level("WARNING", logger="amqp_broker.queues.quorum_config"):
        warn_dead_letter_strategy(cfg, "q3")
    assert "without a dead-letter exchange" in caplog.text


def test_at_most_once_says_nothing(caplog):
    with caplog.at_level("WARNING", logger="amqp_broker.queues.quorum_config"):
        warn_dead_letter_strategy(QueueConfig(name="q4", overflow="drop-head"), "q4")
    assert caplog.records == []
