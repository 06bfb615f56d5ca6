"""The workload of the cluster tests: publishers with confirms and consumers with manual acks
on every node of a cluster, all on one quorum queue, recording into a `History`.

Used by `test_jepsen.py` (while the nemesis works); the other fault tests take `declare_queue`
and `QUORUM_ARGS` from here. Publishers are
aio-pika (one asyncio loop in a thread of its own: a confirm can be awaited with a timeout),
consumers are pika BlockingConnections (one thread each), so both clients are exercised.

Every message body is a unique id (``p<publisher>-<n>``, also its message_id). A publisher
waits for each confirm up to `confirm_timeout`; no answer makes that publish ``unknown`` (never
retried: a retry would be a new id) and the publisher reconnects. Consumers prefetch, ack each
delivery at once and record (id, node, redelivered, ack went out). A client whose connection
dies (killed node, heartbeat timeout on a stopped one, partition) reconnects to the node after
the one that failed it; a client away from its home node goes back after `home_after` seconds
of success, so while faults come and go there are clients on every node and none is stuck
behind a dead one.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass
from typing import Callable

import aio_pika
import aio_pika.exceptions
import pika
import pika.exceptions
from pika.adapters.utils.connection_workflow import AMQPConnectorException

from .history import History

__all__ = ["Workload", "WorkloadConfig", "QUORUM_ARGS", "declare_queue"]

QUORUM_ARGS = {"x-queue-type": "quorum"}

# what a dying connection, a stopped node or a timeout raises in aio-pika
_AIO_ERRORS = (*aio_pika.exceptions.CONNECTION_EXCEPTIONS, asyncio.TimeoutError)
# and in pika: a connect to a stopped node (SIGSTOP) succeeds in the kernel's backlog, then the
# handshake times out with AMQPConnectorStackTimeout, which is not an AMQPError
_PIKA_ERRORS = (pika.exceptions.AMQPError, AMQPConnectorException, OSError)


@dataclass(frozen=True)
class WorkloadConfig:
    publishers_per_node: int = 1
    consumers_per_node: int = 1
    publish_interval: float = 0.01   # pause between publishes of one publisher
    confirm_timeout: float = 5.0
    heartbeat: int = 2               # seconds; a stopped node is given up after ~2-3 of these
    prefetch: int = 20
    home_after: float = 5.0          # a client away from its home node goes back after this


class Workload:
    """`urls[i]` / `names[i]`: node i's AMQP URL and node name."""

    def __init__(self, urls: list[str], names: list[str], queue: str, history: History,
                 config: WorkloadConfig = WorkloadConfig()) -> None:
        self.urls = urls
        self.names = names
        self.queue = queue
        self.history = history
        self.config = config
        self._stop_publishing = threading.Event()
        self._stop_consuming = threading.Event()
        self._threads: list[threading.Thread] = []
        self._pub_thread: threading.Thread | None = None
        self.errors: list[BaseException] = []  # bugs in the workload itself, not in the broker

    # -- control ------------------------------------------------------------------------------
    def start(self) -> "Workload":
        self._start_consumers()
        self._pub_thread = threading.Thread(target=self._guard, args=(self._publishers,),
                                            name="publishers", daemon=True)
        self._pub_thread.start()
        return self

    def stop_publishing(self, timeout: float = 30.0) -> None:
        """Stop publishing and wait for the publishers' last outcomes."""
        self._stop_publishing.set()
        if self._pub_thread is not None:
            self._pub_thread.join(timeout)

    def wait_drained(self, queue_empty: Callable[[], bool], *, quiet: float = 3.0,
                     give_up: float = 10.0, timeout: float = 60.0) -> bool:
        """Consumers keep going until `queue_empty()` (on every node) and no delivery came for
        `quiet` seconds. False if that did not happen within `timeout`, or if nothing was
        delivered for `give_up` seconds while the queue still held messages (stuck)."""
        deadline = time.monotonic() + timeout
        since = time.monotonic()
        while time.monotonic() < deadline:
            last = self.history.last_delivery
            idle = time.monotonic() - max(last, since)
            if idle >= quiet:
                if queue_empty():
                    if self.history.last_delivery == last:
                        return True
                elif idle >= give_up:
                    return False
            time.sleep(0.25)
        return False

    def restart_consumers(self, timeout: float = 15.0) -> None:
        """Close every consumer's connection and start fresh ones on their home nodes (the
        final read after a drain that got stuck: what the broker held for the old ones
        returns to the queue when they go)."""
        self._stop_consumers(timeout)
        self.history.note("consumers restarted")
        self._start_consumers()

    def stop(self, timeout: float = 15.0) -> None:
        self.stop_publishing(timeout)
        self._stop_consumers(timeout)

    def _start_consumers(self) -> None:
        n = len(self.urls)
        self._stop_consuming = threading.Event()
        self._threads = []
        for c in range(self.config.consumers_per_node * n):
            t = threading.Thread(target=self._guard, args=(self._consumer, c, c % n,
                                                           self._stop_consuming),
                                 name=f"consumer-{c}", daemon=True)
            t.start()
            self._threads.append(t)

    def _stop_consumers(self, timeout: float) -> None:
        self._stop_consuming.set()
        for t in self._threads:
            t.join(timeout)

    def _guard(self, fn, *args) -> None:
        try:
            fn(*args)
        except BaseException as e:  # surfaced by the test (a workload bug hides nothing)
            self.errors.append(e)
            self.history.note(f"workload thread crashed: {e!r}")

    def _pick(self, home: int, failures: int) -> int:
        return (home + failures) % len(self.urls)

    # -- publishers (aio-pika) ----------------------------------------------------------------
    def _publishers(self) -> None:
        async def main() -> None:
            n = len(self.urls)
            await asyncio.gather(*(self._publisher(p, p % n)
                                   for p in range(self.config.publishers_per_node * n)))
        asyncio.run(main())

    async def _publisher(self, pid: int, home: int) -> None:
        cfg = self.config
        seq = failures = 0
        while not self._stop_publishing.is_set():
            node = self._pick(home, failures)
            url = f"{self.urls[node]}?heartbeat={cfg.heartbeat}"
            try:
                conn = await asyncio.wait_for(aio_pika.connect(url, timeout=3), 5)
            except _AIO_ERRORS as e:
                failures += 1
                self.history.note(f"publisher {pid}: connect to {self.names[node]}: {e!r}")
                await asyncio.sleep(0.2)
                continue
            since = time.monotonic()
            try:
                ch = await asyncio.wait_for(
                    conn.channel(publisher_confirms=True, on_return_raises=True), 5)
                while not self._stop_publishing.is_set():
                    if node != home and time.monotonic() - since > cfg.home_after:
                        failures = 0
                        break  # back to the home node
                    seq += 1
                    mid = f"p{pid}-{seq}"
                    outcome = await self._publish_one(ch, mid, self.names[node])
                    self.history.outcome(mid, outcome)
                    if outcome == "unknown":
                        failures += 1
                        self.history.note(f"publisher {pid}: no confirm from "
                                          f"{self.names[node]}, reconnecting")
                        break
                    if outcome == "ack":
                        failures = 0
                    await asyncio.sleep(cfg.publish_interval)
            except _AIO_ERRORS as e:
                failures += 1
                self.history.note(f"publisher {pid} on {self.names[node]}: {e!r}")
            finally:
                try:
                    await asyncio.wait_for(conn.close(), 2)
                except BaseException:  # a dead node's connection: nothing to close cleanly
                    pass

    async def _publish_one(self, ch, mid: str, node: str) -> str:
        self.history.attempt(mid, node)
        msg = aio_pika.Message(mid.encode(), message_id=mid,
                               delivery_mode=aio_pika.DeliveryMode.PERSISTENT)
        try:
            await ch.default_exchange.publish(msg, routing_key=self.queue, mandatory=True,
                                              timeout=self.config.confirm_timeout)
        except aio_pika.exceptions.PublishError:
            return "returned"
        except aio_pika.exceptions.DeliveryError:
            return "nack"
        except _AIO_ERRORS:
            return "unknown"
        return "ack"

    # -- consumers (pika) ---------------------------------------------------------------------
    def _consumer(self, cid: int, home: int, stop: threading.Event) -> None:
        failures = 0
        while not stop.is_set():
            node = self._pick(home, failures)
            try:
                if self._consume(cid, node, home, stop):
                    failures = 0
            except _PIKA_ERRORS as e:
                failures += 1
                self.history.note(f"consumer {cid} on {self.names[node]}: {e!r}")
                time.sleep(0.2)

    def _consume(self, cid: int, node: int, home: int, stop: threading.Event) -> bool:
        """Consume on `node` until told to stop, time to go home, or the connection dies
        (raises); True if something was delivered."""
        cfg = self.config
        params = pika.URLParameters(self.urls[node])
        params.connection_attempts = 1
        params.heartbeat = cfg.heartbeat
        params.socket_timeout = 3
        params.stack_timeout = 5
        params.blocked_connection_timeout = 10
        conn = pika.BlockingConnection(params)
        got = False
        since = time.monotonic()
        try:
            ch = conn.channel()
            ch.basic_qos(prefetch_count=cfg.prefetch)
            for method, _props, body in ch.consume(self.queue, inactivity_timeout=0.2):
                if stop.is_set():
                    break
                if node != home and time.monotonic() - since > cfg.home_after:
                    return True  # back to the home node
                if method is None:
                    continue
                acked = False
                try:
                    ch.basic_ack(method.delivery_tag)
                    acked = True
                finally:
                    self.history.delivered(body.decode(), self.names[node],
                                           bool(method.redelivered), acked)
                got = True
            return got
        finally:
            try:
                conn.close()
            except Exception:  # already closed by the broker or the network
                pass


class ThreadConsumer:
    """A pika consumer in a thread of its own recording every delivery into `history`
    (acking it when `ack`), for the deterministic per-bug tests; `close()` stops it."""

    def __init__(self, url: str, node: str, history: History, queue: str, *, prefetch: int = 0,
                 priority: int = 0, ack: bool = True) -> None:
        self.stop = threading.Event()
        self.ready = threading.Event()
        self._args = (url, node, history, queue, prefetch, priority, ack)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        assert self.ready.wait(10), "consumer did not start"

    def _run(self) -> None:
        url, node, history, queue, prefetch, priority, ack = self._args
        conn = pika.BlockingConnection(pika.URLParameters(url))
        try:
            ch = conn.channel()
            if prefetch:
                ch.basic_qos(prefetch_count=prefetch)
            it = ch.consume(queue, arguments={"x-priority": priority}, inactivity_timeout=0.1)
            self.ready.set()
            for method, _p, body in it:
                if self.stop.is_set():
                    break
                if method is not None:
                    if ack:
                        ch.basic_ack(method.delivery_tag)
                    history.delivered(body.decode(), node, bool(method.redelivered), ack)
        finally:
            try:
                conn.close()
            except pika.exceptions.AMQPError:
                pass

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)


def declare_queue(url: str, queue: str, timeout: float = 30.0) -> None:
    """Declare the quorum queue on the node at `url`, retrying while the cluster forms (its
    metadata group needs a leader before a declaration commits)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            params = pika.URLParameters(url)
            params.connection_attempts = 1
            conn = pika.BlockingConnection(params)
            try:
                conn.channel().queue_declare(queue, durable=True, arguments=QUORUM_ARGS)
                return
            finally:
                if conn.is_open:
                    conn.close()
        except (pika.exceptions.AMQPError, OSError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
