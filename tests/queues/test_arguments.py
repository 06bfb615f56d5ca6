"""Declare/consume argument validation with RabbitMQ's 406 texts. How valid arguments combine with
a policy is tested with its implementation, in tests/core/test_policies.py."""

import pytest

from amqp_broker.core.errors import PreconditionFailed
from amqp_broker.core.policies import QueueSettings
from amqp_broker.queues import (
    ClassicQueue,
    check_dead_letter_exchange_type,
    check_declare_arguments,
    check_server_named,
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
        ("x-overflow", 1, "{unacceptable_type,signedint}"),
        ("x-single-active-consumer", 1, "{unacceptable_type,signedint}"),
        ("x-single-active-consumer", 2**40, "{unacceptable_type,long}"),
        ("x-dead-letter-exchange", 5, "{unacceptable_type,signedint}"),
        ("x-queue-type", "fancy", "\"unsupported queue type 'fancy'\""),
        ("x-queue-type", "stream",
         "\"unsupported queue type 'stream': streams are not supported by this broker\""),
        ("x-queue-mode", "bogus", "\"unsupported queue mode 'bogus'\""),
        ("x-queue-mode", 5, "{unacceptable_type,signedint}"),
        ("x-queue-version", 3, "\"unsupported queue version '3'\""),
    ],
)
def test_invalid_declare_args(key, value, why):
    with pytest.raises(PreconditionFailed) as err:
        ClassicQueue("q", "/", arguments={key: value})
    assert err.value.reply_code == 406
    assert err.value.reply_text == PREFIX.format(key) + why


@pytest.mark.parametrize(
    "args, key, why",
    [
        ({"x-queue-type": "quorum", "x-dead-letter-strategy": "bogus"}, "x-dead-letter-strategy",
         "invalid_dlx_strategy"),
        ({"x-queue-type": "quorum", "x-dead-letter-strategy": 1}, "x-dead-letter-strategy",
         "{unacceptable_type,signedint}"),
        ({"x-queue-type": "quorum", "x-quorum-initial-group-size": 0},
         "x-quorum-initial-group-size", "{value_zero,0}"),
    ],
)
def test_invalid_quorum_args(args, key, why):
    with pytest.raises(PreconditionFailed) as err:
        check_declare_arguments("q", "/", args)
    assert err.value.reply_text == PREFIX.format(key) + why


@pytest.mark.parametrize(
    "args, key, module",
    [
        ({"x-queue-type": "quorum", "x-queue-mode": "lazy"}, "x-queue-mode", "rabbit_quorum_queue"),
        ({"x-queue-type": "quorum", "x-max-priority": 5}, "x-max-priority", "rabbit_quorum_queue"),
        ({"x-dead-letter-strategy": "at-least-once"}, "x-dead-letter-strategy",
         "rabbit_classic_queue"),
        ({"x-queue-type": "classic", "x-delivery-limit": 3}, "x-delivery-limit",
         "rabbit_classic_queue"),
        ({"x-max-age": "1D"}, "x-max-age", "rabbit_classic_queue"),
    ],
)
def test_argument_of_another_queue_type(args, key, module):
    with pytest.raises(PreconditionFailed) as err:
        check_declare_arguments("q", "/", args)
    assert err.value.reply_text == (f"PRECONDITION_FAILED - invalid arg '{key}' for queue 'q' in "
                                    f"vhost '/' of queue type {module}")


def test_value_checked_before_other_types_arguments():
    with pytest.raises(PreconditionFailed) as err:
        check_declare_arguments("q", "/", {"x-queue-mode": "lazy", "x-max-length": -1})
    assert err.value.reply_text == PREFIX.format("x-max-length") + "{value_negative,-1}"


@pytest.mark.parametrize("qtype, module", [("quorum", "rabbit_quorum_queue"),
                                           ("stream", "rabbit_stream_queue")])
def test_server_named_only_classic(qtype, module):
    check_server_named(None)
    check_server_named({"x-queue-type": "classic"})
    with pytest.raises(PreconditionFailed) as err:
        check_server_named({"x-queue-type": qtype})
    assert err.value.reply_text == ("PRECONDITION_FAILED - Cannot declare a server-named queue "
                                    f"for type {module}")


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
        dead_letter_routing_key="dk", queue_mode="lazy")


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
