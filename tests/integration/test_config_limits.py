"""Limits set through a rabbitmq.conf file: consumer timeout, max message size, memory alarm."""

from __future__ import annotations

import time

import pytest
from pika.exceptions import ChannelClosedByBroker

from compat_tests.support import wait_channel_closed
from compat_tests.support.launcher import Broker


@pytest.fixture
def limited_broker(tmp_path):
    b = Broker(tmp_path, management=False,
               config="consumer_timeout = 1000\nmax_message_size = 1024\n").start()
    yield b
    b.stop()


def test_unacked_delivery_past_consumer_timeout_closes_channel(limited_broker, connect):
    conn = connect(limited_broker)
    ch = conn.channel()
    ch.queue_declare("lim.slow")
    ch.basic_publish("", "lim.slow", b"x")
    ch.basic_consume("lim.slow", lambda *a: None)  # never acks
    reason = wait_channel_closed(conn, ch)
    assert isinstance(reason, ChannelClosedByBroker)
    assert reason.reply_code == 406
    assert "delivery acknowledgement on channel 1 timed out" in reason.reply_text
    # The unacked message went back to the queue for someone else.
    ch2 = conn.channel()
    method, _, body = ch2.basic_get("lim.slow", auto_ack=True)
    assert body == b"x" and method.redelivered
    conn.close()


def test_message_larger_than_max_message_size_is_406(limited_broker, connect):
    conn = connect(limited_broker)
    ch = conn.channel()
    ch.queue_declare("lim.big")
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.basic_publish("", "lim.big", b"x" * 2048)
        ch.queue_declare("lim.big", passive=True)
    assert info.value.reply_code == 406
    assert info.value.reply_text == ("PRECONDITION_FAILED - message size 2048 is larger than "
                                     "configured max size 1024")
    conn.close()


def test_memory_alarm_blocks_publishers(tmp_path, connect):
    b = Broker(tmp_path, management=False, config="vm_memory_high_watermark.absolute = 1MB\n").start()
    try:
        blocked = []
        conn = connect(b)
        conn.add_on_connection_blocked_callback(lambda c, m: blocked.append(m.method.reason))
        conn.channel().basic_publish("", "nowhere", b"x")  # only publishers get blocked
        deadline = time.monotonic() + 10
        while not blocked and time.monotonic() < deadline:
            conn.process_data_events(time_limit=0.5)
        assert blocked == ["low on memory"]
        # Connections that never published are still served.
        other = connect(b)
        assert other.channel().queue_declare("lim.q").method.queue == "lim.q"
        other.close()
    finally:
        b.stop()
