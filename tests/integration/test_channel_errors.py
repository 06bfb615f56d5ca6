"""Channel and connection errors as RabbitMQ reports them, seen through pika."""

from __future__ import annotations

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker, ConnectionClosedByBroker


def _soft(exc_info, code: int, prefix: str) -> None:
    assert exc_info.value.reply_code == code
    assert exc_info.value.reply_text.startswith(prefix), exc_info.value.reply_text


def test_unknown_delivery_tag_closes_channel_only(connect):
    conn = connect()
    ch = conn.channel()
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.basic_ack(42)
        ch.queue_declare("it.err.after")  # a round trip to receive the close
    _soft(info, 406, "PRECONDITION_FAILED - unknown delivery tag 42")
    assert conn.is_open
    conn.channel().queue_declare("it.err.after")


def test_double_ack_is_406(connect):
    ch = connect().channel()
    ch.queue_declare("it.err.double")
    ch.basic_publish("", "it.err.double", b"x")
    method, _, _ = ch.basic_get("it.err.double")
    ch.basic_ack(method.delivery_tag)
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.basic_ack(method.delivery_tag)
        ch.queue_declare("it.err.double")
    _soft(info, 406, f"PRECONDITION_FAILED - unknown delivery tag {method.delivery_tag}")


def test_publish_to_missing_exchange_is_404(connect):
    ch = connect().channel()
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.basic_publish("it.no-such-exchange", "k", b"x")
        ch.queue_declare("it.err.after")
    _soft(info, 404, "NOT_FOUND - no exchange 'it.no-such-exchange' in vhost '/'")


def test_prefetch_size_is_540_connection_error(connect):
    conn = connect()
    with pytest.raises(ConnectionClosedByBroker) as info:
        conn.channel().basic_qos(prefetch_size=1000)
    assert info.value.reply_code == 540


def test_exclusive_queue_locked_for_other_connections(connect):
    owner = connect().channel()
    name = owner.queue_declare("", exclusive=True).method.queue
    other = connect().channel()
    with pytest.raises(ChannelClosedByBroker) as info:
        other.basic_consume(name, lambda *a: None)
    assert info.value.reply_code == 405


def test_exclusive_queue_deleted_when_owner_closes(connect):
    owner_conn = connect()
    name = owner_conn.channel().queue_declare("", exclusive=True).method.queue
    owner_conn.close()
    with pytest.raises(ChannelClosedByBroker) as info:
        connect().channel().queue_declare(name, passive=True)
    assert info.value.reply_code == 404


def test_tx_then_confirm_is_406(connect):
    ch = connect().channel()
    ch.tx_select()
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.confirm_delivery()
    assert info.value.reply_code == 406


def test_tx_commit_and_rollback(connect):
    ch = connect().channel()
    ch.queue_declare("it.tx")
    ch.queue_purge("it.tx")
    ch.tx_select()
    ch.basic_publish("", "it.tx", b"rolled-back")
    ch.tx_rollback()
    ch.basic_publish("", "it.tx", b"committed")
    assert ch.queue_declare("it.tx", passive=True).method.message_count == 0
    ch.tx_commit()
    assert ch.queue_declare("it.tx", passive=True).method.message_count == 1


def test_mandatory_unroutable_is_returned_then_confirmed(connect):
    ch = connect().channel()
    ch.confirm_delivery()
    with pytest.raises(pika.exceptions.UnroutableError):
        ch.basic_publish("", "it.nowhere", b"x", mandatory=True)


def test_recover_requeue_false_is_540(connect):
    conn = connect()
    with pytest.raises(ConnectionClosedByBroker) as info:
        conn.channel().basic_recover(requeue=False)
    assert info.value.reply_code == 540


def test_rejected_and_expired_messages_are_dead_lettered(connect):
    ch = connect().channel()
    ch.exchange_declare("it.dlx", "fanout")
    ch.queue_declare("it.dead")
    ch.queue_purge("it.dead")
    ch.queue_bind("it.dead", "it.dlx")
    ch.queue_declare("it.src", arguments={"x-dead-letter-exchange": "it.dlx"})
    ch.basic_publish("", "it.src", b"reject-me")
    method, _, _ = ch.basic_get("it.src")
    ch.basic_reject(method.delivery_tag, requeue=False)
    ch.queue_declare("it.ttl", arguments={"x-dead-letter-exchange": "it.dlx", "x-message-ttl": 50})
    ch.basic_publish("", "it.ttl", b"expire-me")
    seen = {}
    for method, props, body in ch.consume("it.dead", inactivity_timeout=5):
        if method is None:
            break
        seen[body] = props.headers["x-first-death-reason"]
        ch.basic_ack(method.delivery_tag)
        if len(seen) == 2:
            break
    assert seen == {b"reject-me": "rejected", b"expire-me": "expired"}
