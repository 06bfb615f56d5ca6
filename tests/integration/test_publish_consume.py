"""End-to-end publish/consume through real sockets with pika (blocking and select) and aio-pika."""

from __future__ import annotations

import asyncio

import aio_pika
import pika

from compat_tests.support.pika_util import drain


def test_default_exchange_roundtrip_with_confirms(ch):
    ch.queue_declare("it.rt")
    ch.confirm_delivery()
    for i in range(50):
        ch.basic_publish("", "it.rt", f"m{i}".encode(),
                         pika.BasicProperties(content_type="text/plain", headers={"i": i}))
    got = drain(ch, "it.rt", 50)
    assert [b for _, _, b in got] == [f"m{i}".encode() for i in range(50)]
    assert got[7][1].headers == {"i": 7}
    assert got[7][1].content_type == "text/plain"
    assert [m.delivery_tag for m, _, _ in got] == list(range(1, 51))


def test_topic_and_fanout_routing(ch):
    ch.exchange_declare("it.topic", "topic")
    ch.exchange_declare("it.fan", "fanout")
    for q in ("it.t1", "it.t2", "it.f"):
        ch.queue_declare(q, auto_delete=False)
        ch.queue_purge(q)
    ch.queue_bind("it.t1", "it.topic", "a.*")
    ch.queue_bind("it.t2", "it.topic", "#.z")
    ch.queue_bind("it.f", "it.fan")
    ch.basic_publish("it.topic", "a.z", b"both")
    ch.basic_publish("it.topic", "a.b", b"one")
    ch.basic_publish("it.fan", "ignored", b"fan")
    assert [b for _, _, b in drain(ch, "it.t1", 2)] == [b"both", b"one"]
    assert [b for _, _, b in drain(ch, "it.t2", 1)] == [b"both"]
    assert [b for _, _, b in drain(ch, "it.f", 1)] == [b"fan"]


def test_basic_get_and_get_empty(ch):
    ch.queue_declare("it.get")
    ch.queue_purge("it.get")
    ch.basic_publish("", "it.get", b"x")
    ch.basic_publish("", "it.get", b"y")
    method, _, body = ch.basic_get("it.get")
    assert body == b"x" and method.message_count == 1
    ch.basic_ack(method.delivery_tag)
    method, _, body = ch.basic_get("it.get", auto_ack=True)
    assert body == b"y"
    assert ch.basic_get("it.get") == (None, None, None)


def test_unacked_requeued_with_redelivered_on_channel_close(connect):
    conn = connect()
    ch1 = conn.channel()
    ch1.queue_declare("it.requeue")
    ch1.queue_purge("it.requeue")
    ch1.basic_publish("", "it.requeue", b"r")
    method, _, _ = ch1.basic_get("it.requeue")
    assert not method.redelivered
    ch1.close()
    ch2 = conn.channel()
    method, _, body = ch2.basic_get("it.requeue", auto_ack=True)
    assert body == b"r" and method.redelivered


def test_prefetch_limits_unacked_deliveries(connect):
    conn = connect()
    ch = conn.channel()
    ch.queue_declare("it.qos")
    ch.queue_purge("it.qos")
    for i in range(10):
        ch.basic_publish("", "it.qos", str(i).encode())
    ch.basic_qos(prefetch_count=3)
    seen = []
    ch.basic_consume("it.qos", lambda c, m, p, b: seen.append(m))
    conn.process_data_events(time_limit=0.5)
    assert len(seen) == 3
    ch.basic_ack(seen[-1].delivery_tag, multiple=True)
    conn.process_data_events(time_limit=0.5)
    assert len(seen) == 6


def test_select_connection_roundtrip(broker):
    got = []

    def on_open(conn):
        conn.channel(on_open_callback=on_channel)

    def on_channel(ch):
        ch.queue_declare("it.select", callback=lambda _: declared(ch))

    def declared(ch):
        ch.basic_publish("", "it.select", b"hello")
        ch.basic_consume("it.select", lambda c, m, p, b: (got.append(b), c.basic_ack(m.delivery_tag),
                                                           c.connection.close()))

    conn = pika.SelectConnection(pika.URLParameters(broker.url), on_open_callback=on_open)
    conn.ioloop.call_later(10, conn.ioloop.stop)
    conn.add_on_close_callback(lambda *a: conn.ioloop.stop())
    conn.ioloop.start()
    assert got == [b"hello"]


def test_aio_pika_publish_confirm_consume(broker):
    async def main():
        conn = await aio_pika.connect_robust(broker.url)
        async with conn:
            ch = await conn.channel(publisher_confirms=True)
            q = await ch.declare_queue("it.aio", durable=True)
            await q.purge()
            for i in range(20):
                await ch.default_exchange.publish(
                    aio_pika.Message(str(i).encode(), delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                    routing_key="it.aio")
            bodies = []
            async with q.iterator() as it:
                async for msg in it:
                    async with msg.process():
                        bodies.append(msg.body)
                    if len(bodies) == 20:
                        break
            return bodies

    assert asyncio.run(asyncio.wait_for(main(), 20)) == [str(i).encode() for i in range(20)]


def test_direct_reply_to(connect):
    conn = connect()
    server = conn.channel()
    server.queue_declare("it.rpc")
    client = conn.channel()
    replies = []
    client.basic_consume("amq.rabbitmq.reply-to", lambda c, m, p, b: replies.append(b), auto_ack=True)
    client.basic_publish("", "it.rpc", b"ping", pika.BasicProperties(reply_to="amq.rabbitmq.reply-to"))
    method, props, body = server.basic_get("it.rpc")
    assert props.reply_to.startswith("amq.rabbitmq.reply-to.")
    server.basic_publish("", props.reply_to, b"pong")
    server.basic_ack(method.delivery_tag)
    conn.process_data_events(time_limit=1)
    assert replies == [b"pong"]
