"""max_message_size end to end with pika: the default (16 MiB, RabbitMQ 4's) refuses a 17 MiB
body with RabbitMQ's text; raised to 128 MiB in rabbitmq.conf, 20 MiB messages go through."""

from __future__ import annotations

import pika
import pytest

from compat_tests.support.launcher import Broker

MiB = 1024 * 1024


def _connect(url: str) -> pika.BlockingConnection:
    params = pika.URLParameters(url)
    params.connection_attempts = 1
    params.blocked_connection_timeout = 60
    return pika.BlockingConnection(params)


def test_20_mib_messages_go_through_when_configured(tmp_path):
    with Broker(tmp_path, management=False, config="max_message_size = 134217728\n") as b:
        conn = _connect(b.url)
        try:
            ch = conn.channel()
            ch.confirm_delivery()
            q = ch.queue_declare("", exclusive=True).method.queue
            bodies = [bytes([i]) * (20 * MiB) for i in (1, 2)]
            for body in bodies:
                ch.basic_publish("", q, body)  # confirmed: raises if nacked or refused
            for body in bodies:
                method, _props, got = ch.basic_get(q, auto_ack=True)
                assert method is not None and got == body
        finally:
            conn.close()


def test_default_refuses_17_mib_with_rabbitmq_text(broker):
    conn = _connect(broker.url)
    try:
        ch = conn.channel()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            ch.basic_publish("", "nowhere", b"x" * (17 * MiB))
            ch.queue_declare("", exclusive=True)  # a round trip to receive the close
        assert info.value.reply_code == 406
        assert info.value.reply_text == (
            f"PRECONDITION_FAILED - message size {17 * MiB} is larger than configured max "
            f"size {16 * MiB}")
        assert conn.is_open  # a channel error only
    finally:
        conn.close()

