"""Quorum queue settings -> fifo QueueConfig: what the quorum type adds to the shared
argument/policy resolution (default delivery limit, unlimited, dead-letter strategy), and the
warning for a dead-letter strategy the queue cannot honour."""

import pytest

from amqp_broker.core.policies import resolve_queue_settings
from amqp_broker.queues.quorum_config import DEFAULT_DELIVERY_LIMIT, quorum_config, warn_dead_letter_strategy
from quorum.fifo import AT_LEAST_ONCE, AT_MOST_ONCE, QueueConfig


def config(args, policy=None):
    return quorum_config("q", resolve_queue_settings(args, policy, "quorum"))


@pytest.mark.parametrize(
    "args,policy,expected",
    [
        ({}, None, DEFAULT_DELIVERY_LIMIT),
        ({"x-delivery-limit": 3}, None, 3),
        ({"x-delivery-limit": -1}, None, None),  # unlimited
        ({"x-delivery-limit": -1}, {"delivery-limit": 4}, 4),
        ({"x-delivery-limit": 9}, {"delivery-limit": 4}, 4),
        ({}, {"delivery-limit": -1}, None),
    ],
)
def test_delivery_limit(args, policy, expected):
    assert config(args, policy).delivery_limit == expected


def test_dead_letter_strategy_and_overflow():
    c = config({"x-dead-letter-exchange": "d", "x-dead-letter-strategy": "at-least-once",
                "x-overflow": "drop-head"}, {"overflow": "reject-publish"})
    assert (c.dead_letter_strategy, c.overflow, c.at_least_once) == (
        AT_LEAST_ONCE, "reject-publish", True)  # the policy's overflow wins on a quorum queue
    assert config({}).dead_letter_strategy == AT_MOST_ONCE
    assert config({}, {"dead-letter-strategy": "at-least-once"}).dead_letter_strategy == AT_LEAST_ONCE


def test_common_settings_carried_over():
    c = config({"x-max-length": 5, "x-max-length-bytes": 50, "x-message-ttl": 10,
                "x-expires": 1000, "x-single-active-consumer": True,
                "x-dead-letter-exchange": "d", "x-dead-letter-routing-key": "k"},
               {"max-length": 2, "message-ttl": 20})
    assert (c.max_length, c.max_bytes, c.msg_ttl, c.expires) == (2, 50, 10, 1000)
    assert (c.single_active_consumer, c.dead_letter_exchange, c.dead_letter_routing_key) == (
        True, "d", "k")


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
