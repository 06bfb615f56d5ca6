"""configure/write/read permissions checked per resource (PROTOCOL-ERRORS.md rows 32-35), and a
dead-letter exchange's extra checks (seed 002), through a real node and pika.

The node runs in-process (serve_broker on port 0) so the test can create a restricted user
through broker.admin; pika runs in a worker thread.
"""

from __future__ import annotations

from typing import Callable

import pika
import pytest
import trio

from amqp_broker.server import open_broker, serve_broker
from amqp_broker.settings import Settings

pytestmark = pytest.mark.trio


async def _as_restricted_user(tmp_path, user: str, client: Callable[[pika.BlockingConnection], list]) -> list:
    """Run `client` as `user`, who may configure, write and read only names starting "user.",
    and return what it returns."""
    broker = open_broker(Settings(port=0, host="127.0.0.1", data_dir=tmp_path))
    broker.admin.add_user(user, "pw")
    pattern = f"^{user}\\."
    broker.admin.set_permissions("/", user, pattern, pattern, pattern)

    def connect_and_run(port: int) -> list:
        params = pika.URLParameters(f"amqp://{user}:pw@127.0.0.1:{port}/%2F")
        params.connection_attempts = 1
        conn = pika.BlockingConnection(params)
        try:
            return client(conn)
        finally:
            conn.close()

    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve_broker, broker)
        result = await trio.to_thread.run_sync(connect_and_run, port)
        nursery.cancel_scope.cancel()
    return result


def _attempts(conn: pika.BlockingConnection) -> list[tuple[int, str]]:
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
    return errors


async def test_resource_permissions(tmp_path):
    errors = await _as_restricted_user(tmp_path, "lim", _attempts)
    assert errors == [
        (200, "ok"),
        (403, "ACCESS_REFUSED - access to queue 'other.q' in vhost '/' refused for user 'lim'"),
        (403, "ACCESS_REFUSED - access to exchange 'amq.default' in vhost '/' refused for user 'lim'"),
        (403, "ACCESS_REFUSED - access to exchange 'amq.direct' in vhost '/' refused for user 'lim'"),
        (403, "ACCESS_REFUSED - access to queue 'other.q' in vhost '/' refused for user 'lim'"),
        (403, "ACCESS_REFUSED - access to exchange 'other.ae' in vhost '/' refused for user 'lim'"),
    ]


def _dead_letter_declares(conn: pika.BlockingConnection) -> list[int]:
    codes = []
    for queue, dlx in (("dl.a", "dl.x"), ("dl.b", "other.x"), ("dl.c", None)):
        ch = conn.channel()
        args = {"x-dead-letter-exchange": dlx} if dlx else {}
        try:
            ch.queue_declare(queue, arguments=args)
            codes.append(200)
        except pika.exceptions.ChannelClosedByBroker as err:
            codes.append(err.reply_code)
    return codes


async def test_dead_letter_exchange_needs_write_permission(tmp_path):
    # queue.declare with a DLX needs read on the queue and write on the DLX, on top of configure.
    assert await _as_restricted_user(tmp_path, "dl", _dead_letter_declares) == [200, 403, 200]
