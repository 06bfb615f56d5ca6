"""Dead lettering seen through aio-pika: reject (classic) and delivery-limit (quorum) deaths,
x-death and x-first-death-* headers on the consumer side, and an at-least-once quorum source
whose held dead letters make the publisher's confirm a nack once over max-length."""

import asyncio

import aio_pika
import pytest
from aio_pika import DeliveryMode, Message


async def _get(queue, timeout: float = 10.0):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        msg = await queue.get(no_ack=True, fail=False)
        if msg is not None:
            return msg
        await asyncio.sleep(0.02)
    raise AssertionError("no message")


@pytest.mark.parametrize("kind", ["classic", "quorum"])
def test_reject_headers_via_aio_pika(aio, names, kind):
    dlx, dlq, src = names.exchange(), names.queue(), names.queue()

    async def body(conn):
        ch = await conn.channel()
        x = await ch.declare_exchange(dlx, aio_pika.ExchangeType.FANOUT)
        dead = await ch.declare_queue(dlq, durable=True)
        await dead.bind(x)
        args = {"x-dead-letter-exchange": dlx}
        if kind == "quorum":
            args["x-queue-type"] = "quorum"
        source = await ch.declare_queue(src, durable=True, arguments=args)
        await ch.default_exchange.publish(
            Message(b"aio", delivery_mode=DeliveryMode.PERSISTENT, expiration=60), routing_key=src)
        msg = await source.get(no_ack=False)
        await msg.reject(requeue=False)
        got = await _get(dead)
        assert got.body == b"aio" and got.expiration is None
        death, = got.headers["x-death"]
        assert (death["queue"], death["reason"], death["count"]) == (src, "rejected", 1)
        assert death["original-expiration"] == "60000"
        assert got.headers["x-first-death-reason"] == "rejected"

    aio(body)


def test_quorum_delivery_limit_via_aio_pika(aio, names):
    dlq, src = names.queue(), names.queue()

    async def body(conn):
        ch = await conn.channel()
        dead = await ch.declare_queue(dlq, durable=True)
        source = await ch.declare_queue(src, durable=True, arguments={
            "x-queue-type": "quorum", "x-delivery-limit": 0,
            "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
        await ch.default_exchange.publish(Message(b"poison"), routing_key=src)
        msg = await source.get(no_ack=False)
        await msg.nack(requeue=True)
        got = await _get(dead)
        assert got.body == b"poison"
        assert got.headers["x-death"][0]["reason"] == "delivery_limit"

    aio(body)


def test_at_least_once_held_messages_nack_publishes_via_aio_pika(aio, names):
    src = names.queue()

    async def body(conn):
        ch = await conn.channel()
        source = await ch.declare_queue(src, durable=True, arguments={
            "x-queue-type": "quorum", "x-dead-letter-strategy": "at-least-once",
            "x-overflow": "reject-publish", "x-max-length": 1,
            "x-dead-letter-exchange": names.exchange()})  # never declared: held
        await ch.default_exchange.publish(Message(b"1"), routing_key=src)
        msg = await source.get(no_ack=False)
        await msg.reject(requeue=False)
        await ch.default_exchange.publish(Message(b"2"), routing_key=src)
        with pytest.raises(aio_pika.exceptions.DeliveryError):
            await ch.default_exchange.publish(Message(b"3"), routing_key=src)

    aio(body)
