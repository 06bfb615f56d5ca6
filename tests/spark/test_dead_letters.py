"""S7: dead lettering end to end: produce each kind of death, archive the DLQ through Spark, and
check the typed columns (x_first_death_*, x_death[].count, delivery_count)."""

from __future__ import annotations

import time

import pika
import pytest

from .amqp_util import unique
from .conftest import spark_available

pytestmark = pytest.mark.skipif(spark_available() is not None, reason=str(spark_available()))


def _wait_ready(amqp, queue: str, count: int, timeout: float = 30.0) -> int:
    deadline = time.monotonic() + timeout
    while True:
        ready = amqp.counts(queue)[0]
        if ready >= count or time.monotonic() > deadline:
            return ready
        time.sleep(0.2)


def _archive(spark, url, queue, tmp_path):
    from amqp_broker.spark import drain_queue
    out = str(tmp_path / "archive")
    drain_queue(spark, url, queue, out, str(tmp_path / "ckpt"))
    return {r.properties.message_id: r for r in spark.read.parquet(out).collect()}


def _nack_all(amqp, queue: str, requeue: bool, limit: int = 100) -> int:
    """Get and nack what is ready; with requeue a message comes straight back, so `limit` it."""
    n = 0
    while n < limit:
        method, _, _ = amqp.ch.basic_get(queue, auto_ack=False)
        if method is None:
            return n
        amqp.ch.basic_nack(method.delivery_tag, requeue=requeue)
        n += 1
    return n


def test_s7_rejected_expired_maxlen(spark, broker_url, amqp, tmp_path):
    dlx, dlq = unique("dlx"), unique("dlq")
    amqp.ch.exchange_declare(dlx, "fanout")
    amqp.declare(dlq)
    amqp.ch.queue_bind(dlq, dlx)
    rej, ttl, maxlen = unique("rej"), unique("ttl"), unique("maxlen")
    amqp.declare(rej, **{"x-dead-letter-exchange": dlx})
    amqp.declare(ttl, **{"x-dead-letter-exchange": dlx, "x-message-ttl": 50})
    amqp.declare(maxlen, **{"x-dead-letter-exchange": dlx, "x-max-length": 1})

    for i in range(2):
        amqp.ch.basic_publish("", rej, b"r", pika.BasicProperties(message_id=f"rej-{i}"))
        amqp.ch.basic_publish("", ttl, b"e", pika.BasicProperties(message_id=f"exp-{i}"))
    for i in range(3):
        amqp.ch.basic_publish("", maxlen, b"m", pika.BasicProperties(message_id=f"max-{i}"))
    assert _nack_all(amqp, rej, requeue=False) == 2
    assert _wait_ready(amqp, dlq, 6) == 6

    rows = _archive(spark, broker_url, dlq, tmp_path)
    assert sorted(rows) == ["exp-0", "exp-1", "max-0", "max-1", "rej-0", "rej-1"]
    expect = {"rej": ("rejected", rej), "exp": ("expired", ttl), "max": ("maxlen", maxlen)}
    for mid, row in rows.items():
        reason, queue = expect[mid[:3]]
        assert (row.x_first_death_reason, row.x_first_death_queue, row.x_first_death_exchange) == \
            (reason, queue, "")
        death, = [d.asDict() for d in row.x_death]  # Row.count is tuple.count: use the dict
        assert (death["reason"], death["queue"], death["count"], death["routing_keys"]) == \
            (reason, queue, 1, [queue])
        assert death["time"] is not None
        assert row.delivery_count is None  # classic DLQ: no delivery count annotation
        assert row.queue == dlq and row.exchange == dlx


def test_s7_delivery_limit_on_quorum_queue(spark, broker_url, amqp, tmp_path):
    """A quorum queue with x-delivery-limit 1 dead-letters a message requeued past the limit
    (reason delivery_limit); the report archives it with that reason and its own redelivery."""
    dlq, src = unique("qdlq"), unique("qsrc")
    amqp.declare(dlq, **{"x-queue-type": "quorum"})
    amqp.declare(src, **{"x-queue-type": "quorum", "x-delivery-limit": 1,
                         "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
    amqp.ch.confirm_delivery()
    amqp.ch.basic_publish("", src, b"poison", pika.BasicProperties(message_id="poison-1"))
    for _ in range(5):  # deliver and requeue until the delivery limit dead-letters it
        if _nack_all(amqp, src, requeue=True, limit=1) == 0:
            break
    assert _wait_ready(amqp, dlq, 1, timeout=10) == 1, "not dead-lettered at the delivery limit"
    assert amqp.counts(src)[0] == 0
    assert _nack_all(amqp, dlq, requeue=True, limit=1) == 1  # one redelivery from the DLQ itself

    rows = _archive(spark, broker_url, dlq, tmp_path)
    row = rows["poison-1"]
    assert (row.x_first_death_reason, row.x_first_death_queue) == ("delivery_limit", src)
    assert [(d["reason"], d["queue"], d["count"]) for d in row.x_death] == [("delivery_limit", src, 1)]
    assert row.redelivered and row.delivery_count == 1  # x-delivery-count of the DLQ itself
