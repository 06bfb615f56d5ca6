"""configure/write/read permissions checked per resource (PROTOCOL-ERRORS.md rows 32-35).

The node runs in-process (run_node on port 0) so the test can create a restricted user through
broker.admin; pika runs in a worker thread.
"""

from __future__ import annotations

import pika
import pytest
import trio

from amqp_broker.server import open_broker, serve_broker
from amqp_broker.settings import Settings


def _client(port: int) -> list[tuple[int, str]]:
    params = pika.URLParameters(f"amqp://lim:pw@127.0.0.1:{port}/%2F")
    params.connection_attempts = 1
    conn = pika.BlockingConnection(params)
    errors = []

    def attempt(fn):
        ch = conn.channel()
        try:
            fn(ch)
            ch.queue_declare("lim.q1", passive=True)  # round trip: a close arrives before this
            errors.append((200, "ok"))
        except pika.exceptions.ChannelClosedByBroker as err:
            errors.append((err.reply_code, err.reply_text))

    attempt(lambda ch: ch.queue_declare("lim.q1"))
    attempt(lambda ch: ch.queue_declare("other.q"))
    attempt(lambda ch: ch.basic_publish("", "lim.q1", b"x"))
    attempt(lambda ch: ch.queue_bind("lim.q1", "amq.direct", "k"))
    attempt(lambda ch: ch.queue_declare("other.q", passive=True))
    attempt(lambda ch: ch.exchange_declare("lim.x", arguments={"alternate-exchange": "other.ae"}))
    conn.close()
    return errors


@pytest.mark.trio
async def test_resource_permissions(tmp_path):
    broker = open_broker(Settings(port=0, host="127.0.0.1", data_dir=tmp_path))
    broker.admin.add_user("lim", "pw")
    broker.admin.set_permissions("/", "lim", "^lim\\.", "^lim\\.", "^lim\\.")
    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve_broker, broker)
        errors = await trio.to_thread.run_sync(_client, port)
        nursery.cancel_scope.cancel()
    assert errors == [
        (200, "ok"),
        (403, "ACCESS_REFUSED - access to queue 'other.q' in vhost '/' refused for user 'lim'"),
        (403, "ACCESS_REFUSED - access to exchange 'amq.default' in vhost '/' refused for user 'lim'"),
        (403, "ACCESS_REFUSED - access to exchange 'amq.direct' in vhost '/' refused for user 'lim'"),
        (403, "ACCESS_REFUSED - access to queue 'other.q' in vhost '/' refused for user 'lim'"),
        (403, "ACCESS_REFUSED - access to exchange 'other.ae' in vhost '/' refused for user 'lim'"),
    ]
