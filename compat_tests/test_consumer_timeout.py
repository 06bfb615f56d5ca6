"""Per-queue consumer timeout (RabbitMQ 3.12+): the x-consumer-timeout queue argument (ms) limits
how long a delivery may stay unacknowledged on a queue, instead of the node-wide
consumer_timeout (30 minutes by default). Past it the channel is closed with 406 and the
delivery goes back to the queue, redelivered. 3.10 has no per-queue timeout: marked rabbitmq4.

RabbitMQ checks consumer timeouts on its channel tick, so the wait allows for a slow tick.
"""

import pytest
from pika.exceptions import ChannelClosedByBroker

from compat_tests.support import wait_channel_closed

pytestmark = pytest.mark.rabbitmq4


def test_queue_argument_consumer_timeout_closes_the_channel(conn, names):
    q = names.queue()
    ch = conn.channel()
    ch.queue_declare(q, arguments={"x-consumer-timeout": 1000})
    ch.basic_publish("", q, b"slow")
    ch.basic_consume(q, lambda *a: None)  # never acks
    reason = wait_channel_closed(conn, ch, 90)
    assert isinstance(reason, ChannelClosedByBroker)
    assert reason.reply_code == 406
    assert reason.reply_text.startswith(
        "PRECONDITION_FAILED - delivery acknowledgement on channel 1 timed out. Timeout value used: 1000 ms")
    method, _, body = conn.channel().basic_get(q, auto_ack=True)
    assert body == b"slow" and method.redelivered


def test_the_queue_timeout_applies_only_to_deliveries_from_that_queue(conn, names):
    # One channel consumes from a queue with a 1 s timeout (empty) and from one without: the
    # other queue's unacked delivery, older than 1 s, stays under the node-wide 30 minutes.
    plain, short = names.queue(), names.queue()
    ch = conn.channel()
    ch.queue_declare(plain)
    ch.queue_declare(short, arguments={"x-consumer-timeout": 1000})
    ch.basic_consume(short, lambda *a: None)
    ch.basic_publish("", plain, b"a")
    ch.basic_consume(plain, lambda *a: None)  # never acks
    assert wait_channel_closed(conn, ch, 3) is None
    ch.close()
