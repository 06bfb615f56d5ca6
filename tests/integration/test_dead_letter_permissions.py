"""queue.declare with a dead-letter exchange needs read on the queue and write on the DLX (seed
002), on top of configure on the queue. In-process node so a restricted user can be created."""

from __future__ import annotations

import pika
import pytest
import trio

from amqp_broker.server import open_broker, serve_broker
from amqp_broker.settings import Settings


def _declares(port: int) -> list[int]:
    params = pika.URLParameters(f"amqp://dl:pw@127.0.0.1:{port}/%2F")
    params.connection_attempts = 1
    conn = pika.BlockingConnection(params)
    codes = []
    for queue, dlx in (("dl.a", "dl.x"), ("dl.b", "other.x"), ("dl.c", None)):
        ch = conn.channel()
        args = {"x-dead-letter-exchange": dlx} if dlx else {}
        try:
            ch.queue_declare(queue, arguments=args)
            codes.append(200)
        except pika.exceptions.ChannelClosedByBroker as err:
            codes.append(err.reply_code)
    conn.close()
    return codes


@pytest.mark.trio
async def test_dead_letter_exchange_needs_write_permission(tmp_path):
    broker = open_broker(Settings(port=0, host="127.0.0.1", data_dir=tmp_path))
    broker.admin.add_user("dl", "pw")
    broker.admin.set_permissions("/", "dl", "^dl\\.", "^dl\\.", "^dl\\.")
    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve_broker, broker)
        codes = await trio.to_thread.run_sync(_declares, port)
        nursery.cancel_scope.cancel()
    assert codes == [200, 403, 200]
