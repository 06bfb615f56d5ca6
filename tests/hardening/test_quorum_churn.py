"""Quorum queues created, used and deleted over and over, by several clients at once, on a real
broker: the node must survive it and keep nothing of the deleted queues.

Each worker declares a quorum queue, publishes a few hundred to a couple of thousand messages
with confirms (16 B to 20 KiB: enough bytes for the queue to take release-cursor snapshots
while it is used), consumes half of them and deletes the queue, round after round. A queue
deleted while its snapshot file was being written used to stop the whole node (found by
bench/spark_bench.py; tests/log/test_async.py has the deterministic test of that race). Here:
no worker gets an error, the broker logs no traceback, every deleted queue's log directory is
removed, and the node restarts after a kill -9 with none of the queues.

CHURN_ROUNDS (default 8) rounds for each of 3 workers.
"""

from __future__ import annotations

import os
import random
import threading
import time

import pika
import pytest

from compat_tests.support.launcher import Broker

from .probes import tracebacks

ROUNDS = int(os.environ.get("CHURN_ROUNDS", "8"))
WORKERS = 3


def _worker(url: str, w: int, errors: list[str]) -> None:
    rng = random.Random(w)
    try:
        conn = pika.BlockingConnection(pika.URLParameters(url))
        ch = conn.channel()
        ch.confirm_delivery()
        props = pika.BasicProperties(delivery_mode=2)
        for r in range(ROUNDS):
            name = f"churn-{w}-{r}"
            ch.queue_declare(name, durable=True, arguments={"x-queue-type": "quorum"})
            n = rng.randint(200, 2000)
            for _ in range(n):
                ch.basic_publish("", name, b"x" * rng.choice((16, 1024, 20000)), props)
            got = 0
            for method, _, _ in ch.consume(name, inactivity_timeout=5):
                if method is None:
                    raise AssertionError(f"{name}: {got} of {n} delivered, then nothing")
                ch.basic_ack(method.delivery_tag)
                got += 1
                if got >= n // 2:
                    break
            ch.cancel()
            ch.queue_delete(name)
        conn.close()
    except Exception as exc:  # reported by the test, with the worker's number
        errors.append(f"worker {w}: {exc!r}")


def _group_dirs(data_dir) -> list[str]:
    groups = data_dir / "quorum" / "log" / "groups"
    names = [bytes.fromhex(d).decode() for d in os.listdir(groups)] if groups.exists() else []
    return sorted(n for n in names if n != "meta")


@pytest.mark.timeout(600)
def test_quorum_queues_created_used_and_deleted_by_several_clients(tmp_path):
    b = Broker(tmp_path / "churn", management=False).start()
    try:
        errors: list[str] = []
        threads = [threading.Thread(target=_worker, args=(b.url, w, errors))
                   for w in range(WORKERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert b.proc.poll() is None, b.log_tail()
        deadline = time.monotonic() + 30  # directories go once a rollover point is durable
        while _group_dirs(b.data_dir) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _group_dirs(b.data_dir) == []
        assert tracebacks(b.log_path) == []
        b.kill()
        b.start(timeout=120)
        conn = pika.BlockingConnection(pika.URLParameters(b.url))
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as gone:
            conn.channel().queue_declare("churn-0-0", passive=True)
        assert gone.value.reply_code == 404
        conn.close()
    finally:
        b.kill()
