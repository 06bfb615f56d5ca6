"""Declare/consume argument validation with RabbitMQ's 406 texts. How valid arguments combine with
a policy is tested with its implementation, in tests/core/test_policies.py."""

import pytest

from amqp_broker.core.errors import PreconditionFailed
from amqp_broker.core.policies import QueueSettings
from amqp_broker.queues import (
    ClassicQueue,
    check_dead_letter_exchange_type,
    parse_consumer_priority,
    parse_queue_arguments,
)

PREFIX = "PRECONDITION_FAILED - invalid arg '{}' for queue 'q' in vhost '/': "


@pytest.mark.parametrize(
    "key, value, why",
    [
        ("x-max-length", -1, "{value_negative,-1}"),
        ("x-max-length", "10", '"expected integer, got longstr"'),
        ("x-max-length-bytes", -5, "{value_negative,-5}"),
        ("x-message-ttl", -1, "{value_negative,-1}"),
        ("x-message-ttl", 1.5, '"expected integer, got double"'),
        ("x-message-ttl", 2**32, "{value_too_large,4294967296,4294967295}"),
        ("x-expires", 0, "{value_zero,0}"),
        ("x-expires", -3, "{value_negative,-3}"),
        ("x-max-priority", 256, "{max_value_exceeded,256}"),
        ("x-max-priority", True, '"expected integer, got bool"'),
        ("x-overflow", "drop-tail", "invalid_overflow"),
        ("x-overflow", 1, "{unacceptable_type,long}"),
        ("x-single-active-consumer", 1, "{unacceptable_type,long}"),
        ("x-dead-letter-exchange", 5, "{unacceptable_type,long}"),
        ("x-queue-type", "fancy", "\"unsupported queue type 'fancy'\""),
    ],
)
def test_invalid_declare_args(key, value, why):
    with pytest.raises(PreconditionFailed) as err:
        ClassicQueue("q", "/", arguments={key: value})
    assert err.value.reply_code == 406
    assert err.value.reply_text == PREFIX.format(key) + why


def test_dlrk_without_dlx():
    with pytest.raises(PreconditionFailed) as err:
        parse_queue_arguments("q", "/", {"x-dead-letter-routing-key": "k"})
    assert err.value.reply_text == PREFIX.format("x-dead-letter-routing-key") + (
        "routing_key_but_no_dlx_defined"
    )


def test_valid_args_become_settings():
    s = parse_queue_arguments("q", "/", {
        "x-max-length": 10, "x-max-length-bytes": 100, "x-overflow": "reject-publish",
        "x-message-ttl": 0, "x-expires": 1000, "x-max-priority": 5,
        "x-single-active-consumer": True, "x-dead-letter-exchange": b"dlx",
        "x-dead-letter-routing-key": "dk", "x-queue-mode": "lazy", "x-unknown": object(),
    })
    assert s == QueueSettings(
        max_length=10, max_length_bytes=100, overflow="reject-publish", message_ttl=0,
        expires=1000, max_priority=5, single_active_consumer=True, dead_letter_exchange="dlx",
        dead_letter_routing_key="dk")


def test_consumer_priority():
    assert parse_consumer_priority("q", "/", None) == 0
    assert parse_consumer_priority("q", "/", {"x-priority": -4}) == -4
    with pytest.raises(PreconditionFailed) as err:
        parse_consumer_priority("q", "/", {"x-priority": "high"})
    assert err.value.reply_text == PREFIX.format("x-priority") + '"expected integer, got longstr"'


@pytest.mark.parametrize("value, kind", [(5, "signedint"), (2**40, "long"), (True, "bool"),
                                         (1.5, "double")])
def test_dead_letter_exchange_of_wrong_type(value, kind):
    with pytest.raises(PreconditionFailed) as err:
        check_dead_letter_exchange_type("q", "/", {"x-dead-letter-exchange": value})
    assert err.value.reply_text == (f"PRECONDITION_FAILED - invalid type '{kind}' for arg "
                                    "'x-dead-letter-exchange' in queue 'q' in vhost '/'")
    check_dead_letter_exchange_type("q", "/", {"x-dead-letter-exchange": "dlx"})
