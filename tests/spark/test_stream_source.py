"""S1-S4: the streaming source against a live broker and a local SparkSession (SPARK.md section 7)."""

from __future__ import annotations

import pytest

from .amqp_util import Amqp, unique
from .conftest import spark_available

pytestmark = pytest.mark.skipif(spark_available() is not None, reason=str(spark_available()))


def _source(spark, url, queue, **options):
    reader = spark.readStream.format("amqp").option("url", url).option("queue", queue)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def _drain_to_parquet(spark, url, queue, tmp_path, **options):
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    query = (_source(spark, url, queue, **options).writeStream.format("parquet")
             .option("path", out).option("checkpointLocation", ckpt)
             .trigger(availableNow=True).start())
    query.awaitTermination(300)
    assert not query.isActive, "AvailableNow query did not finish"
    return query, spark.read.parquet(out)


def test_s1_available_now_drains_queue_to_parquet(spark, broker_url, amqp, tmp_path):
    queue = unique("s1")
    amqp.declare(queue)
    ids = amqp.publish(queue, 500)
    query, df = _drain_to_parquet(spark, broker_url, queue, tmp_path, maxMessagesPerBatch=200)
    got = sorted(r.message_id for r in df.select("properties.message_id").collect())
    assert got == sorted(ids)
    assert df.filter("queue != '%s'" % queue).count() == 0
    assert amqp.wait_no_consumers(queue) == 0  # nothing ready, nothing requeued = all acked
