"""aio-pika's robust connection across a broker restart on the same port: the consumer comes
back by itself and gets messages published after the restart (and the persistent one from
before it that was still queued)."""

from __future__ import annotations

import asyncio

import aio_pika

from compat_tests.support.launcher import Broker, free_port


def test_robust_consumer_survives_broker_restart(tmp_path):
    b = Broker(tmp_path, management=False, port=free_port()).start()

    async def main() -> list[bytes]:
        got: list[bytes] = []
        conn = await aio_pika.connect_robust(b.url, reconnect_interval=0.3)
        ch = await conn.channel(publisher_confirms=True)
        q = await ch.declare_queue("robust.q", durable=True)

        async def on_message(m: aio_pika.abc.AbstractIncomingMessage) -> None:
            got.append(m.body)
            await m.ack()

        await q.consume(on_message)
        await ch.default_exchange.publish(aio_pika.Message(b"before"), routing_key="robust.q")
        while b"before" not in got:
            await asyncio.sleep(0.05)
        await asyncio.get_running_loop().run_in_executor(None, _restart, b)
        for _ in range(100):  # publish as soon as the robust channel is back
            try:
                await ch.default_exchange.publish(aio_pika.Message(b"after"), routing_key="robust.q")
                break
            except Exception:
                await asyncio.sleep(0.2)
        while b"after" not in got:
            await asyncio.sleep(0.05)
        await conn.close()
        return got

    try:
        assert asyncio.run(asyncio.wait_for(main(), 60)) == [b"before", b"after"]
    finally:
        b.stop()


def _restart(b: Broker) -> None:
    assert b.stop() == 0
    b.start()
