"""Wire details checked through a real broker process: non-ASCII queue names in declare-ok, and
x-death `count` sent as an AMQP long ('l', 64-bit) as RabbitMQ does (Java clients read Long)."""

from __future__ import annotations

from pamqp import commands

from compat_tests.support.raw import RawClient


def test_queue_named_with_non_ascii_characters(ch):
    name = "очередь-ü-队列"
    ok = ch.queue_declare(name)
    assert ok.method.queue == name
    ch.basic_publish("", name, b"x")
    method, _, body = ch.basic_get(name, auto_ack=True)
    assert body == b"x" and method is not None
    assert ch.queue_declare(name, passive=True).method.queue == name


def _get_raw_properties(url: str, queue: str) -> bytes:
    """basic.get over a raw socket; the content header's property bytes, undecoded."""
    with RawClient(url) as raw:
        raw.handshake()
        raw.open_channel(1)
        raw.send(1, commands.Basic.Get(queue=queue, no_ack=True))
        raw.read_method(commands.Basic.GetOk)
        while True:
            kind, _channel, payload = raw.read_raw_frame()
            if kind == 2:
                return payload[12:]  # class, weight, body size


def test_x_death_count_is_a_64_bit_long(broker, ch):
    ch.queue_declare("wd.dlq")
    ch.queue_declare("wd.src", arguments={"x-dead-letter-exchange": "",
                                          "x-dead-letter-routing-key": "wd.dlq"})
    ch.basic_publish("", "wd.src", b"dead")
    method, _, _ = ch.basic_get("wd.src")
    ch.basic_reject(method.delivery_tag, requeue=False)
    # Wait until the dead letter arrived, without consuming it.
    for _ in range(100):
        if ch.queue_declare("wd.dlq", passive=True).method.message_count == 1:
            break
        ch.connection.sleep(0.05)
    raw = _get_raw_properties(broker.url, "wd.dlq")
    # 'count' then type 'l' and 8 bytes of big-endian 1 (pamqp alone would write 'b' 0x01).
    assert b"\x05countl\x00\x00\x00\x00\x00\x00\x00\x01" in raw
