"""The driver-side AMQP consumer of the streaming source, on a background I/O thread.

Called by `source.AmqpStreamReader` in Spark's long-lived streaming-source runner process.  The
thread owns a `wire.WireConnection` (deliveries parsed by hand: pika cost more CPU per message
than the rest of the pipeline): it sends heartbeats between Spark's calls (SPARK.md 3.1 point 6),
keeps up to `prefetch` deliveries per queue in `Ledger.pending`, and reconnects with a new session
when the connection drops.  Spark's thread talks to it only through the locked `Ledger` and
`ack()`, which writes one multiple-ack frame.  A burst of deliveries read in one `recv` enters the
ledger under one lock.  Nothing here starts until `start()`: reader constructors run in several
processes and must do no I/O.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import logging
import re
import struct
import threading
import time
import urllib.parse
import urllib.request

import pika
import pika.exceptions

from pamqp import commands

from .ledger import Delivery, Ledger, delivery
from .options import SourceOptions
from .rows import ledger_columns, property_columns, row_bytes
from .wire import (CHANNEL, FRAME_BODY, FRAME_HEADER, FRAME_METHOD, HEARTBEAT_FRAME, IDS,
                   WireConnection, WireError, decode_properties, frame, method_of)

log = logging.getLogger(__name__)

# Channel close codes that a reconnect cannot fix: report them to Spark instead of looping.
_FATAL_CODES = {403: "ACCESS_REFUSED", 404: "NOT_FOUND", 405: "RESOURCE_LOCKED", 406: "PRECONDITION_FAILED"}


_ACK = struct.Struct(">HHQB")
_DELIVER_TAG = struct.Struct(">QB")
_HEADER_SIZE = struct.Struct(">Q")


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
        self._conn: WireConnection | None = None
        self._session = 0
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
        """Ack everything up to `tag` on `session`'s channel; a no-op if that channel is gone
        (the broker requeues what it held, which is safe)."""
        conn = self._conn
        if conn is None or self._opts.auto_ack or self._session != session:
            return
        try:
            conn.send(frame(FRAME_METHOD, _ACK.pack(60, 80, tag, 1)))
        except (OSError, WireError, AttributeError):
            log.debug("ack of tag %s dropped: connection closing", tag)

    def stop(self) -> None:
        self._stopping = True
        conn = self._conn
        if conn is not None:
            conn.abort()

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
                self._conn = WireConnection(url, heartbeat=self._opts.heartbeat)
                self._session = session
                backoff = 0.5
                self._consume_loop(self._conn, session)
            except (OSError, WireError, AttributeError) as exc:  # AttributeError: stop() aborted it
                code = getattr(exc, "code", 0)
                if code in _FATAL_CODES and not self._stopping:
                    with self._cond:
                        self.fatal = (f"consuming queue {self._opts.queue!r} failed: {code} "
                                      f"{_FATAL_CODES[code]} - {exc}")
                elif not self._stopping:
                    log.warning("amqp source: connection lost: %s", exc)
            finally:
                conn, self._conn = self._conn, None
                if conn is not None:
                    conn.abort()
            with self._cond:
                self._ready = False
                self._cond.notify_all()
            if self._stopping or self.fatal is not None:
                break
            time.sleep(backoff)
            backoff = min(backoff * 2, 10.0)

    def _consume_loop(self, conn: WireConnection, session: int) -> None:
        opts = self._opts
        conn.call(commands.Basic.Qos(prefetch_count=opts.prefetch), commands.Basic.QosOk)
        tags = {}
        for i, queue in enumerate(self._queues):
            tag = f"amqp-spark-{session}-{i}"
            tags[tag] = queue
            conn.send_method(CHANNEL, commands.Basic.Consume(
                queue=queue, consumer_tag=tag, no_ack=opts.auto_ack, exclusive=opts.exclusive,
                arguments=dict(opts.consumer_arguments)))
        waiting = set(tags)
        beat = conn.heartbeat / 2 if conn.heartbeat else 5.0
        conn.sock.settimeout(min(beat, 1.0))
        last_sent = last_heard = time.monotonic()
        parser = _DeliveryParser(tags, opts.include_body)
        while not self._stopping:
            got = conn.recv(block=True)
            now = time.monotonic()
            if got:
                last_heard = now
            elif conn.heartbeat and now - last_heard > 2 * conn.heartbeat:
                raise WireError(f"no traffic from the broker for {2 * conn.heartbeat}s")
            if conn.heartbeat and now - last_sent > beat:
                conn.send(HEARTBEAT_FRAME)
                last_sent = now
            arrived = []
            consumed_at = dt.datetime.now(dt.timezone.utc)  # one instant for a burst
            for ftype, payload in conn.frames():
                if ftype == FRAME_METHOD:
                    class_id, method_id = IDS.unpack_from(payload, 0)
                    if (class_id, method_id) == (60, 60):  # basic.deliver
                        parser.deliver(payload)
                    elif (class_id, method_id) == (60, 21):  # basic.consume-ok
                        waiting.discard(method_of(payload).consumer_tag)
                        if not waiting:
                            self._on_consuming()
                    elif (class_id, method_id) in ((20, 40), (10, 50)):  # channel/connection close
                        method = method_of(payload)
                        raise WireError(f"{method.reply_text}", method.reply_code)
                    elif (class_id, method_id) == (60, 30):  # basic.cancel from the broker
                        raise WireError("the broker cancelled the consumer (queue deleted?)")
                elif ftype == FRAME_HEADER:
                    parser.header(payload)
                elif ftype == FRAME_BODY:
                    parser.body(payload)
                if parser.done:
                    arrived.append(parser.take(session, consumed_at))
            if arrived:
                self._receive(arrived)

    def _on_consuming(self) -> None:
        with self._cond:
            self._ready = True
            self._cond.notify_all()

    def _receive(self, deliveries: list[Delivery]) -> None:
        with self._cond:
            if any([self._ledger.receive(d) for d in deliveries]):
                self._cond.notify_all()


class _DeliveryParser:
    """basic.deliver + content header + body frames -> one `Delivery` (a ledger row)."""

    _KNOWN_LIMIT = 256

    def __init__(self, tags: dict[str, str], include_body: bool) -> None:
        self._tags = tags
        self._include_body = include_body
        self._method = None
        self._columns: tuple = ()
        # raw property bytes -> their row columns: a stream's messages mostly share properties
        # (the same delivery mode, content type, no headers), and working the columns out was
        # the largest cost per message
        self._known: dict[bytes, tuple] = {}
        self._size = 0
        self._parts: list[bytes] = []
        self._have = 0
        self.done = False

    def deliver(self, payload: bytes) -> None:
        pos = 4
        n = payload[pos]
        ctag = payload[pos + 1:pos + 1 + n].decode()
        pos += 1 + n
        tag, bits = _DELIVER_TAG.unpack_from(payload, pos)
        pos += 9
        n = payload[pos]
        exchange = payload[pos + 1:pos + 1 + n].decode("utf-8", errors="replace")
        pos += 1 + n
        n = payload[pos]
        routing_key = payload[pos + 1:pos + 1 + n].decode("utf-8", errors="replace")
        self._method = (self._tags.get(ctag, ""), tag, bool(bits & 1), exchange, routing_key)
        self._columns, self._parts, self._have, self.done = (), [], 0, False

    def header(self, payload: bytes) -> None:
        self._size = _HEADER_SIZE.unpack_from(payload, 4)[0]
        raw = payload[12:]
        columns = self._known.get(raw)
        if columns is None:
            columns = ledger_columns(property_columns(decode_properties(raw)))
            if len(self._known) >= self._KNOWN_LIMIT:  # per-message properties: no reuse
                self._known.clear()
            self._known[raw] = columns
        self._columns = columns
        self.done = self._size == 0

    def body(self, payload: bytes) -> None:
        self._parts.append(payload)
        self._have += len(payload)
        self.done = self._have >= self._size

    def take(self, session: int, consumed_at: dt.datetime) -> Delivery:
        queue, tag, redelivered, exchange, routing_key = self._method
        parts = self._parts
        body = (parts[0] if len(parts) == 1 else b"".join(parts)) if self._include_body else None
        row = (queue, body, exchange, routing_key, redelivered, tag, *self._columns, consumed_at)
        self._method, self._columns, self._parts, self.done = None, (), [], False
        return delivery(session, tag, row, row_bytes(body))


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
