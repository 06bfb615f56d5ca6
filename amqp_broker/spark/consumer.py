"""The driver-side AMQP consumer of the streaming source: pika on a background I/O thread.

Called by `source.AmqpStreamReader` in Spark's long-lived streaming-source runner process.  The
thread owns a pika `SelectConnection`: it services heartbeats between Spark's calls (SPARK.md 3.1
point 6), keeps up to `prefetch` deliveries in `Ledger.pending`, and reconnects with a new session
when the connection drops.  Spark's thread talks to it only through the locked `Ledger` and
`add_callback_threadsafe`.  Nothing here starts until `start()`: reader constructors run in several
processes and must do no I/O.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import logging
import re
import threading
import time
import urllib.parse
import urllib.request

import pika
import pika.exceptions

from .ledger import Delivery, Ledger
from .options import SourceOptions
from .rows import make_row, row_bytes

log = logging.getLogger(__name__)

# Channel close codes that a reconnect cannot fix: report them to Spark instead of looping.
_FATAL_CODES = {403: "ACCESS_REFUSED", 404: "NOT_FOUND", 405: "RESOURCE_LOCKED", 406: "PRECONDITION_FAILED"}


class ConsumerError(RuntimeError):
    """The consumer cannot run (queue missing, exclusive consumer already present, ...)."""


def connection_parameters(url: str, heartbeat: int) -> pika.URLParameters:
    params = pika.URLParameters(url)
    params.heartbeat = heartbeat
    params.connection_attempts = 1
    params.socket_timeout = 10
    params.blocked_connection_timeout = None
    return params


class DriverConsumer:
    """One consumer per query, in the runner process."""

    def __init__(self, opts: SourceOptions, ledger: Ledger, lock: threading.Condition,
                 queues: tuple[str, ...] | None = None) -> None:
        self._opts = opts
        self._queues = queues or opts.queues
        self._ledger = ledger
        self._cond = lock
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._conn: pika.SelectConnection | None = None
        self._channel = None
        self._channel_session = 0
        self._ready = False
        self.fatal: str | None = None
        self._url_index = 0

    # -- called from Spark's thread --------------------------------------------------------

    def start(self, timeout: float = 30.0) -> None:
        """Start the I/O thread and wait until the consumer is registered (or fails)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="amqp-source-io", daemon=True)
            self._thread.start()
        deadline = time.monotonic() + timeout
        with self._cond:
            while not self._ready and self.fatal is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ConsumerError(f"could not start consuming {self._opts.queue!r} within {timeout}s")
                self._cond.wait(left)
        self.raise_if_failed()

    def raise_if_failed(self) -> None:
        if self.fatal is not None:
            raise ConsumerError(self.fatal)

    def wait_connected(self, timeout: float) -> bool:
        """Wait until the consumers are registered again (after a reconnect).  Must be called
        with the condition held."""
        deadline = time.monotonic() + timeout
        while not self._ready and self.fatal is None and not self._stopping:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self._cond.wait(min(left, 0.5))
        return self._ready

    def wait_for_pending(self, count: int, idle: float, reconnect_wait: float = 120.0) -> None:
        """Block until `count` deliveries are pending, or none arrived for `idle` seconds while
        connected.  While the connection is down (broker restarting), wait up to
        `reconnect_wait` for it instead: an outage must not look like a drained queue to
        AvailableNow.  Must be called with the condition held."""
        seen = len(self._ledger.pending)
        down_since = None
        while len(self._ledger.pending) < count and self.fatal is None:
            if not self._ready and not self._stopping:
                now = time.monotonic()
                down_since = down_since or now
                if now - down_since > reconnect_wait:
                    return
                self._cond.wait(0.5)
                continue
            down_since = None
            if not self._cond.wait(idle):
                return
            if len(self._ledger.pending) == seen:
                # Woken without a new delivery (e.g. reconnect); keep the idle clock honest.
                continue
            seen = len(self._ledger.pending)

    def ack(self, session: int, tag: int) -> None:
        """Ack everything up to `tag` on `session`'s channel; a no-op if that channel is gone."""
        conn = self._conn
        if conn is None or self._opts.auto_ack:
            return

        def _do() -> None:
            ch = self._channel
            if ch is not None and ch.is_open and self._channel_session == session:
                ch.basic_ack(delivery_tag=tag, multiple=True)
        try:
            conn.ioloop.add_callback_threadsafe(_do)
        except Exception:  # the loop is closing: the broker requeues, which is safe
            log.debug("ack of tag %s dropped: connection closing", tag)

    def stop(self) -> None:
        self._stopping = True
        conn = self._conn
        if conn is not None:
            try:
                conn.ioloop.add_callback_threadsafe(lambda: conn.is_open and conn.close())
            except Exception:
                pass

    # -- the I/O thread ----------------------------------------------------------------------

    def _run(self) -> None:
        backoff = 0.5
        while not self._stopping and self.fatal is None:
            url = self._opts.urls[self._url_index % len(self._opts.urls)]
            self._url_index += 1
            with self._cond:
                session = self._ledger.new_session()
                self._ready = False
            try:
                self._conn = pika.SelectConnection(
                    connection_parameters(url, self._opts.heartbeat),
                    on_open_callback=lambda c, s=session: self._on_open(c, s),
                    on_open_error_callback=self._on_open_error,
                    on_close_callback=self._on_closed)
                self._conn.ioloop.start()
            except Exception as exc:  # pragma: no cover - defensive: keep the thread alive
                log.warning("amqp source I/O loop failed: %s", exc)
            with self._cond:
                self._ready = False
                self._cond.notify_all()
            if self._stopping or self.fatal is not None:
                break
            time.sleep(backoff)
            backoff = min(backoff * 2, 10.0)

    def _on_open(self, conn, session: int) -> None:
        conn.channel(on_open_callback=lambda ch: self._on_channel(ch, session))

    def _on_open_error(self, conn, error) -> None:
        log.warning("amqp source: connection failed: %s", error)
        conn.ioloop.stop()

    def _on_closed(self, conn, reason) -> None:
        log.info("amqp source: connection closed: %s", reason)
        conn.ioloop.stop()

    def _on_channel(self, ch, session: int) -> None:
        self._channel = ch
        self._channel_session = session
        ch.add_on_close_callback(self._on_channel_closed)
        ch.basic_qos(prefetch_count=self._opts.prefetch,
                     callback=lambda _f: self._consume(ch, session))

    def _consume(self, ch, session: int) -> None:
        """One consumer per queue, all on this channel: delivery tags grow in arrival order
        across them, so one multiple-ack up to a batch's last tag covers every queue."""
        waiting = set(self._queues)
        for queue in self._queues:
            ch.basic_consume(
                queue=queue,
                on_message_callback=lambda c, m, p, b, q=queue: self._on_message(session, q, m, p, b),
                auto_ack=self._opts.auto_ack,
                exclusive=self._opts.exclusive,
                arguments=dict(self._opts.consumer_arguments) or None,
                callback=lambda _f, q=queue: self._on_consuming(waiting, q))

    def _on_consuming(self, waiting: set, queue: str) -> None:
        waiting.discard(queue)
        if waiting:
            return
        with self._cond:
            self._ready = True
            self._cond.notify_all()

    def _on_channel_closed(self, ch, reason) -> None:
        code = getattr(reason, "reply_code", 0)
        text = getattr(reason, "reply_text", str(reason))
        if code in _FATAL_CODES and not self._stopping:
            with self._cond:
                self.fatal = (f"consuming queue {self._opts.queue!r} failed: {code} "
                              f"{_FATAL_CODES[code]} - {text}")
                self._cond.notify_all()
        conn = self._conn
        if conn is not None and conn.is_open:
            conn.close()

    def _on_message(self, session: int, queue: str, method, props, body: bytes) -> None:
        row = make_row(seq=0, queue=queue,
                       body=bytes(body) if self._opts.include_body else None,
                       exchange=method.exchange, routing_key=method.routing_key,
                       redelivered=method.redelivered, delivery_tag=method.delivery_tag,
                       properties=props, consumed_at=dt.datetime.now(dt.timezone.utc))
        delivery = Delivery(session, method.delivery_tag, row, row_bytes(row))
        with self._cond:
            if self._ledger.receive(delivery):
                self._cond.notify_all()


def resolve_queues(opts: SourceOptions) -> tuple[str, ...]:
    """The queues to consume: the listed ones, or those of the vhost whose whole name matches
    `queuePattern` (from the management API, `GET /api/queues/<vhost>`), sorted."""
    if not opts.queue_pattern:
        return opts.queues
    amqp = urllib.parse.urlparse(opts.urls[0])
    mgmt = urllib.parse.urlparse(opts.management_url)
    vhost = urllib.parse.unquote(amqp.path[1:]) if amqp.path not in ("", "/") else "/"
    user = urllib.parse.unquote(mgmt.username or amqp.username or "guest")
    password = urllib.parse.unquote(mgmt.password or amqp.password or "guest")
    base = f"{mgmt.scheme}://{mgmt.hostname}:{mgmt.port or 15672}{mgmt.path.rstrip('/')}"
    request = urllib.request.Request(
        f"{base}/api/queues/{urllib.parse.quote(vhost, safe='')}?columns=name",
        headers={"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()})
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            listing = json.loads(resp.read())
    except (OSError, ValueError) as exc:
        raise ConsumerError(f"cannot list queues at {base} for queuePattern: {exc}") from exc
    pattern = re.compile(opts.queue_pattern)
    names = sorted(q["name"] for q in listing if pattern.fullmatch(q.get("name", "")))
    if not names:
        raise ConsumerError(f"no queue in vhost {vhost!r} matches queuePattern {opts.queue_pattern!r}")
    return tuple(names)


def total_message_count(urls: tuple[str, ...], queues: tuple[str, ...], heartbeat: int = 30) -> int | None:
    """Ready messages over all `queues`, or None if any of them does not exist."""
    total = 0
    for queue in queues:
        count = queue_message_count(urls, queue, heartbeat)
        if count is None:
            return None
        total += count
    return total


def queue_message_count(urls: tuple[str, ...], queue: str, heartbeat: int = 30) -> int | None:
    """Passive queue.declare on a short-lived connection to the first reachable URL: the ready
    count, or None if the queue does not exist."""
    last: Exception | None = None
    for url in urls:
        try:
            conn = pika.BlockingConnection(connection_parameters(url, heartbeat))
        except pika.exceptions.AMQPConnectionError as exc:
            last = exc
            continue
        try:
            ch = conn.channel()
            try:
                ok = ch.queue_declare(queue=queue, passive=True)
            except pika.exceptions.ChannelClosedByBroker as exc:
                if exc.reply_code == 404:
                    return None
                raise
            return ok.method.message_count
        finally:
            if conn.is_open:
                conn.close()
    raise ConsumerError(f"no broker reachable at {len(urls)} URL(s): {last!r}")
