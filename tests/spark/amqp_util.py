"""AMQP helpers for the Spark tests: start our broker, declare/publish/inspect queues with pika.

Used by tests/spark/conftest.py and the S tests.  Only AMQP 0-9-1 is used, so the same helpers work
against a real RabbitMQ (SPARK_BROKER_URL).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pika
import pika.exceptions


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


class OurBroker:
    """`amqp-broker --port P --data-dir D` as a subprocess."""

    def __init__(self, work: Path) -> None:
        exe = shutil.which("amqp-broker")
        if exe is None:
            raise RuntimeError("amqp-broker is not installed (pip install -e .)")
        self.port = free_port()
        data = work / "data"
        data.mkdir(parents=True, exist_ok=True)
        self.log_path = work / "broker.log"
        # HTTP endpoints on free loopback ports: other brokers on this machine hold the defaults.
        config = work / "rabbitmq.conf"
        config.write_text(f"management.tcp.ip = 127.0.0.1\nmanagement.tcp.port = {free_port()}\n"
                          f"prometheus.tcp.ip = 127.0.0.1\nprometheus.tcp.port = {free_port()}\n")
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen([exe, "--host", "127.0.0.1", "--port", str(self.port),
                                          "--data-dir", str(data), "--config", str(config)],
                                         stdout=log, stderr=subprocess.STDOUT)
        self.url = f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"
        deadline = time.monotonic() + 60
        while not _accepts(self.port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("amqp-broker did not start:\n" + self.log_tail())
            time.sleep(0.1)

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def unique(prefix: str) -> str:
    return f"spark.{prefix}.{uuid.uuid4().hex[:8]}"


class Amqp:
    """A short-lived blocking connection for test setup and inspection."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.conn = pika.BlockingConnection(pika.URLParameters(url))
        self.ch = self.conn.channel()

    def __enter__(self) -> "Amqp":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self.conn.is_open:
            self.conn.close()

    def declare(self, queue: str, **arguments) -> None:
        self.ch.queue_declare(queue, durable=True, arguments=arguments or None)

    def publish(self, queue: str, count: int, size: int = 16, start: int = 0, **props) -> list[str]:
        self.ch.confirm_delivery()
        ids = []
        for i in range(start, start + count):
            mid = f"m{i:06d}"
            body = mid.encode().ljust(size, b".")
            self.ch.basic_publish("", queue, body, pika.BasicProperties(message_id=mid, delivery_mode=2, **props))
            ids.append(mid)
        return ids

    def counts(self, queue: str) -> tuple[int, int]:
        """(ready messages, consumers) from a passive declare on a fresh channel."""
        ch = self.conn.channel()
        try:
            ok = ch.queue_declare(queue, passive=True)
            return ok.method.message_count, ok.method.consumer_count
        finally:
            if ch.is_open:
                ch.close()

    def wait_no_consumers(self, queue: str, timeout: float = 60.0) -> int:
        """Wait until the query's consumer is gone (so unacked would be requeued); return ready."""
        deadline = time.monotonic() + timeout
        while True:
            ready, consumers = self.counts(queue)
            if consumers == 0 or time.monotonic() > deadline:
                if consumers:
                    raise AssertionError(f"{queue}: consumer still attached after {timeout}s")
                time.sleep(0.3)  # let requeue of anything unacked land
                return self.counts(queue)[0]
            time.sleep(0.2)

    def drain(self, queue: str, limit: int = 100_000) -> list[tuple]:
        """basic.get everything (acking): [(method, properties, body)]."""
        out = []
        while len(out) < limit:
            method, props, body = self.ch.basic_get(queue, auto_ack=True)
            if method is None:
                break
            out.append((method, props, body))
        return out

    def delete(self, queue: str) -> None:
        try:
            self.ch.queue_delete(queue)
        except pika.exceptions.ChannelClosedByBroker:
            self.ch = self.conn.channel()
