"""The same expectations through aio-pika (asyncio, aiormq underneath): confirms with delivery
tags, returns, nacks, error-to-exception mapping, consumer cancel notification, get, RPC with
direct reply-to.  Each test body is a coroutine run by the `aio` fixture."""

import asyncio

import aio_pika
import aiormq.exceptions
import pytest
from aio_pika import Message
from pamqp import commands


def test_publish_confirm_and_consume_round_trip(aio, names):
    q = names.queue()

    async def body(conn):
        ch = await conn.channel()  # publisher confirms on by default
        queue = await ch.declare_queue(q)
        confirms = [await ch.default_exchange.publish(
            Message(b"m%d" % i, headers={"i": i}, content_type="text/plain"), routing_key=q)
            for i in range(3)]
        assert [type(c) for c in confirms] == [commands.Basic.Ack] * 3
        assert [c.delivery_tag for c in confirms] == [1, 2, 3]
        got = []
        async with queue.iterator() as it:
            async for msg in it:
                async with msg.process():
                    got.append((msg.body, msg.headers["i"], msg.content_type, msg.redelivered))
                if len(got) == 3:
                    break
        assert got == [(b"m0", 0, "text/plain", False), (b"m1", 1, "text/plain", False),
                       (b"m2", 2, "text/plain", False)]

    aio(body)


def test_get_and_get_empty(aio, names):
    q = names.queue()

    async def body(conn):
        ch = await conn.channel()
        queue = await ch.declare_queue(q)
        assert await queue.get(fail=False) is None
        await ch.default_exchange.publish(Message(b"one"), routing_key=q)
        msg = await queue.get(no_ack=False)
        assert (msg.body, msg.delivery_tag, msg.redelivered) == (b"one", 1, False)
        await msg.nack(requeue=True)
        again = await queue.get(no_ack=True)
        assert (again.body, again.redelivered) == (b"one", True)

    aio(body)


def test_mandatory_unroutable_raises_delivery_error(aio, names):
    async def body(conn):
        ch = await conn.channel(on_return_raises=True)
        with pytest.raises(aio_pika.exceptions.DeliveryError) as info:
            await ch.default_exchange.publish(Message(b"r"), routing_key=names.queue(), mandatory=True)
        assert isinstance(info.value.frame, commands.Basic.Return)
        assert info.value.frame.reply_code == 312

    aio(body)


def test_reject_publish_overflow_is_nack(aio, names):
    q = names.queue()

    async def body(conn):
        ch = await conn.channel()
        await ch.declare_queue(q, arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
        ok = await ch.default_exchange.publish(Message(b"1"), routing_key=q)
        assert isinstance(ok, commands.Basic.Ack)
        with pytest.raises(aio_pika.exceptions.DeliveryError) as info:
            await ch.default_exchange.publish(Message(b"2"), routing_key=q)
        assert isinstance(info.value.frame, commands.Basic.Nack)

    aio(body)


# aiormq picks the exception class from the reply code (404, 406, 403, 405); args[0] is the text.
@pytest.mark.parametrize("make_error,exc,text", [
    ("passive_missing", aiormq.exceptions.ChannelNotFoundEntity, "NOT_FOUND - no queue"),
    ("inequivalent", aiormq.exceptions.ChannelPreconditionFailed, "PRECONDITION_FAILED - inequivalent arg 'durable'"),
    ("reserved_name", aiormq.exceptions.ChannelAccessRefused, "ACCESS_REFUSED - queue name 'amq.compat-aio'"),
    ("exclusive_other", aiormq.exceptions.ChannelLockedResource, "RESOURCE_LOCKED - cannot obtain exclusive access"),
])
def test_channel_errors_map_to_exceptions(aio, broker_url, names, make_error, exc, text):
    q = names.queue()

    async def body(conn):
        setup = await conn.channel()
        if make_error == "inequivalent":
            await setup.declare_queue(q, durable=False)
        if make_error == "exclusive_other":
            await setup.declare_queue(q, exclusive=True)
        other_conn = await aio_pika.connect(broker_url)
        try:
            ch = await (other_conn if make_error == "exclusive_other" else conn).channel()
            with pytest.raises(exc) as info:
                if make_error == "passive_missing":
                    await ch.declare_queue(q, passive=True)
                elif make_error == "inequivalent":
                    await ch.declare_queue(q, durable=True)
                elif make_error == "reserved_name":
                    await ch.declare_queue("amq.compat-aio")
                else:
                    await ch.declare_queue(q, exclusive=True)
            assert info.value.args[0].startswith(text)
            assert ch.is_closed
            # The connection survives a channel error.
            fresh = await conn.channel()
            await fresh.declare_queue("", exclusive=True)
        finally:
            await other_conn.close()

    aio(body)


def test_consumer_cancel_notification(aio, names):
    q = names.queue()

    async def body(conn):
        ch = await conn.channel()
        queue = await ch.declare_queue(q)
        cancelled = asyncio.get_running_loop().create_future()
        underlay = await ch.get_underlay_channel()
        underlay.on_consumer_cancel_callbacks.add(
            lambda frame: cancelled.done() or cancelled.set_result(frame.consumer_tag))
        async def ignore(msg):
            pass

        tag = await queue.consume(ignore)
        other = await conn.channel()
        await other.queue_delete(q)
        assert await asyncio.wait_for(cancelled, 10) == tag
        assert not ch.is_closed

    aio(body)


def test_unknown_delivery_tag_closes_channel(aio, names):
    async def body(conn):
        ch = await conn.channel()
        underlay = await ch.get_underlay_channel()
        await underlay.basic_ack(99)
        with pytest.raises(aiormq.exceptions.ChannelPreconditionFailed) as info:
            await ch.declare_queue("", exclusive=True)
        assert "unknown delivery tag 99" in str(info.value)

    aio(body)


def test_direct_reply_to_rpc(aio, names):
    q = names.queue()

    async def body(conn):
        srv = await conn.channel()
        requests = await srv.declare_queue(q)

        async def serve(msg):
            async with msg.process():
                await srv.default_exchange.publish(
                    Message(msg.body[::-1], correlation_id=msg.correlation_id), routing_key=msg.reply_to)

        await requests.consume(serve)
        cli = await conn.channel()
        reply_q = await cli.get_queue("amq.rabbitmq.reply-to", ensure=False)
        answer = asyncio.get_running_loop().create_future()
        async def on_reply(m):
            if not answer.done():
                answer.set_result((m.correlation_id, m.body))

        await reply_q.consume(on_reply, no_ack=True)
        await cli.default_exchange.publish(
            Message(b"abc", reply_to="amq.rabbitmq.reply-to", correlation_id="r1"), routing_key=q)
        assert await asyncio.wait_for(answer, 10) == ("r1", b"cba")

    aio(body)


def test_transaction_commit(aio, names):
    q = names.queue()

    async def body(conn):
        ch = await conn.channel(publisher_confirms=False)
        queue = await ch.declare_queue(q)
        async with ch.transaction():
            await ch.default_exchange.publish(Message(b"tx"), routing_key=q)
        msg = await queue.get(no_ack=True)
        assert msg.body == b"tx"

    aio(body)


def test_prefetch_respected(aio, names):
    q = names.queue()

    async def body(conn):
        ch = await conn.channel()
        await ch.set_qos(prefetch_count=2)
        queue = await ch.declare_queue(q)
        for i in range(5):
            await ch.default_exchange.publish(Message(b"%d" % i), routing_key=q)
        held = []
        two = asyncio.get_running_loop().create_future()

        async def hold(msg):
            held.append(msg)
            if len(held) == 2 and not two.done():
                two.set_result(None)

        await queue.consume(hold)
        await asyncio.wait_for(two, 10)
        check = await conn.channel()
        declared = await check.declare_queue(q, passive=True)
        assert declared.declaration_result.message_count == 3
        assert len(held) == 2

    aio(body)
