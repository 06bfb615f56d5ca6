"""AMQP helpers for the Spark tests: declare/publish/inspect queues with pika.

Used by tests/spark/conftest.py and the S tests.  Only AMQP 0-9-1 is used, so the same helpers work
against a real RabbitMQ (SPARK_BROKER_URL).
"""

from __future__ import annotations

import time
import uuid

import pika
import pika.exceptions


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
