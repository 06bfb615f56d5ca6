"""pika BlockingConnection helpers: opening connections that are closed after the test, and
small polling helpers.

`pika_parameters` / `pika_connections` are the one way the pika fixtures of compat_tests/,
tests/integration/ and tests/mgmt/ open connections.  No fixed sleeps: each polling helper pumps
the connection with a deadline so tests stay fast on a quick broker and still pass on a slow one.
Called by the conftests and the pika-based test modules.
"""

from __future__ import annotations

import contextlib
import time
from typing import Callable, Iterator

import pika
import pika.exceptions
import pytest

DEFAULT_TIMEOUT = 10.0


def pika_parameters(url: str, **overrides) -> pika.URLParameters:
    """URLParameters for `url` with a single connection attempt (a broker that does not answer
    fails the test at once); keyword overrides set any other attribute (heartbeat=,
    credentials=, virtual_host=, ...)."""
    params = pika.URLParameters(url)
    params.connection_attempts = 1
    for key, value in overrides.items():
        setattr(params, key, value)
    return params


@contextlib.contextmanager
def pika_connections() -> Iterator[Callable[..., pika.BlockingConnection]]:
    """Yields `connect(url, **overrides)`, which opens a BlockingConnection with
    `pika_parameters(url, **overrides)`; every connection still open is closed on exit (errors
    from a connection the broker is already closing are ignored)."""
    opened: list[pika.BlockingConnection] = []

    def connect(url: str, **overrides) -> pika.BlockingConnection:
        conn = pika.BlockingConnection(pika_parameters(url, **overrides))
        opened.append(conn)
        return conn

    try:
        yield connect
    finally:
        for conn in opened:
            if conn.is_open:
                try:
                    conn.close()
                except pika.exceptions.AMQPError:  # already closing after a broker error
                    pass


def roundtrip(ch) -> None:
    """A synchronous no-op RPC: makes an asynchronous channel.close (e.g. after a publish to a
    missing exchange) surface now as ChannelClosedByBroker."""
    ch.exchange_declare("amq.direct", passive=True)


def wait_until(conn, predicate: Callable[[], bool], timeout: float = DEFAULT_TIMEOUT) -> bool:
    """Pump `conn` until predicate() is true; returns the final value of predicate()."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return predicate()
        conn.process_data_events(time_limit=0.05)
    return True


def wait_channel_closed(conn, ch, timeout: float = DEFAULT_TIMEOUT):
    """Pump `conn` until the broker closes `ch` (or `timeout` s pass); the broker's
    channel.close as pika keeps it (a `ChannelClosedByBroker`), or None if it stayed open."""
    deadline = time.monotonic() + timeout
    while ch.is_open and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.2)
    return None if ch.is_open else ch._closing_reason


def get_n(ch, queue: str, n: int, *, auto_ack: bool = True, timeout: float = DEFAULT_TIMEOUT):
    """basic.get until n messages arrived; returns [(method, properties, body)]."""
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        method, props, body = ch.basic_get(queue, auto_ack=auto_ack)
        if method is None:
            ch.connection.process_data_events(time_limit=0.02)
            continue
        out.append((method, props, body))
    return out


def get_body(ch, queue: str, *, timeout: float = DEFAULT_TIMEOUT) -> bytes | None:
    got = get_n(ch, queue, 1, timeout=timeout)
    return got[0][2] if got else None


def consume_n(ch, queue: str, n: int, *, auto_ack: bool = False, timeout: float = DEFAULT_TIMEOUT,
              **consume_kwargs):
    """Start a consumer, collect n deliveries (method, properties, body), leave them unacked unless
    auto_ack.  Returns (consumer_tag, deliveries)."""
    got: list = []

    def _on(chan, method, props, body):
        got.append((method, props, body))

    tag = ch.basic_consume(queue, _on, auto_ack=auto_ack, **consume_kwargs)
    wait_until(ch.connection, lambda: len(got) >= n, timeout)
    return tag, got


def drain(ch, queue: str, limit: int | None = None, *, timeout: float = 5.0) -> list:
    """Consume from `queue` acking each delivery, until `limit` deliveries (if given) or until none
    came for `timeout` seconds, then cancel the consumer.  Returns [(method, properties, body)]."""
    got: list = []
    for method, props, body in ch.consume(queue, inactivity_timeout=timeout):
        if method is None:
            break
        got.append((method, props, body))
        ch.basic_ack(method.delivery_tag)
        if len(got) == limit:
            break
    ch.cancel()
    return got


def publish(ch, routing_key: str, body: bytes, exchange: str = "", **props) -> None:
    ch.basic_publish(exchange, routing_key, body, pika.BasicProperties(**props) if props else None)


class _Closed:
    reply_code: int = 0
    reply_text: str = ""


@contextlib.contextmanager
def channel_closed(code: int, text_prefix: str | None = None):
    """Expect the block to end in a channel.close from the broker with `code` (a soft error);
    the connection must stay usable.  Yields an object filled with reply_code/reply_text."""
    seen = _Closed()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        yield seen
    seen.reply_code, seen.reply_text = info.value.reply_code, info.value.reply_text
    assert seen.reply_code == code, seen.reply_text
    if text_prefix is not None:
        assert seen.reply_text.startswith(text_prefix), seen.reply_text


@contextlib.contextmanager
def connection_closed(code: int, text_prefix: str | None = None):
    """Expect the block to end in a connection.close from the broker with `code` (a hard error)."""
    seen = _Closed()
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as info:
        yield seen
    seen.reply_code, seen.reply_text = info.value.reply_code, info.value.reply_text
    assert seen.reply_code == code, seen.reply_text
    if text_prefix is not None:
        assert seen.reply_text.startswith(text_prefix), seen.reply_text


def declared(url: str, name: str, kind: str = "queue") -> bool:
    """Does the broker at `url` know queue (or exchange) `name`? A passive declare."""
    conn = pika.BlockingConnection(pika_parameters(url, heartbeat=0))
    try:
        ch = conn.channel()
        if kind == "queue":
            ch.queue_declare(name, passive=True)
        else:
            ch.exchange_declare(name, passive=True)
        return True
    except pika.exceptions.ChannelClosedByBroker as err:
        assert err.reply_code == 404
        return False
    finally:
        if conn.is_open:
            conn.close()
