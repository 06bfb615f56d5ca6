"""Unique queue and exchange names per test, and their cleanup.

The `names` fixture in conftest.py hands each test a `Names`; whatever it named (or was told about
with `track_queue`) is deleted on a fresh connection after the test, so a failing test leaves
nothing behind on a shared RabbitMQ.
"""

from __future__ import annotations

import re
import uuid

import pika
import pika.exceptions


class Names:
    def __init__(self, test_name: str) -> None:
        self._stem = "compat." + re.sub(r"[^A-Za-z0-9_.-]", "_", test_name)[:60]
        self.queues: list[str] = []
        self.exchanges: list[str] = []

    def _fresh(self, kind: str) -> str:
        return f"{self._stem}.{kind}.{uuid.uuid4().hex[:8]}"

    def queue(self) -> str:
        name = self._fresh("q")
        self.queues.append(name)
        return name

    def exchange(self) -> str:
        name = self._fresh("x")
        self.exchanges.append(name)
        return name

    def track_queue(self, name: str) -> str:
        self.queues.append(name)
        return name

    def track_exchange(self, name: str) -> str:
        self.exchanges.append(name)
        return name

    def cleanup(self, url: str) -> None:
        """Delete everything named; both deletes are idempotent in AMQP 0-9-1."""
        if not (self.queues or self.exchanges):
            return
        conn = pika.BlockingConnection(pika.URLParameters(url))
        try:
            for kind, names in (("q", self.queues), ("x", self.exchanges)):
                for name in names:
                    ch = conn.channel()
                    try:
                        if kind == "q":
                            ch.queue_delete(name)
                        else:
                            ch.exchange_delete(name)
                        ch.close()
                    except pika.exceptions.ChannelClosed:
                        pass  # e.g. exclusive queue of a connection that is still closing
        finally:
            conn.close()
