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


@pytest.mark.parametrize("transfer", ["fetch", "inline"])
def test_s1_available_now_drains_queue_to_parquet(spark, broker_url, amqp, tmp_path, transfer):
    """Both ways rows reach the executors: fetched from the runner (the default) and carried
    inside the tasks."""
    queue = unique("s1")
    amqp.declare(queue)
    ids = amqp.publish(queue, 500)
    query, df = _drain_to_parquet(spark, broker_url, queue, tmp_path, maxMessagesPerBatch=200,
                                  rowTransfer=transfer)
    got = sorted(r.message_id for r in df.select("properties.message_id").collect())
    assert got == sorted(ids)
    assert df.filter("queue != '%s'" % queue).count() == 0
    assert amqp.wait_no_consumers(queue) == 0  # nothing ready, nothing requeued = all acked


def _input_rows(query) -> list[int]:
    return [p["numInputRows"] if isinstance(p, dict) else p.numInputRows for p in query.recentProgress]


def test_s2_admission_control_caps_every_batch(spark, broker_url, amqp, tmp_path):
    queue = unique("s2")
    amqp.declare(queue)
    amqp.publish(queue, 450)
    query, df = _drain_to_parquet(spark, broker_url, queue, tmp_path, maxMessagesPerBatch=100)
    rows = [n for n in _input_rows(query) if n]
    assert rows == [100, 100, 100, 100, 50]
    assert df.count() == 450
    assert amqp.wait_no_consumers(queue) == 0


def test_s3_no_ack_before_commit(spark, broker_url, amqp, tmp_path):
    """prefetch == batch size: while batch k is processed the consumer's window is full of batch k,
    so the broker's ready count only drops for batch k+1 once batch k was acked (next trigger)."""
    queue = unique("s3")
    amqp.declare(queue)
    total, batch = 300, 100
    amqp.publish(queue, total)
    seen: list[tuple[int, int, int]] = []

    def observe(df, batch_id):
        rows = df.count()
        if rows:
            with Amqp(broker_url) as probe:
                seen.append((batch_id, rows, probe.counts(queue)[0]))

    query = (_source(spark, broker_url, queue, maxMessagesPerBatch=batch, prefetch=batch)
             .writeStream.foreachBatch(observe)
             .option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(availableNow=True).start())
    query.awaitTermination(300)
    assert [rows for _, rows, _ in seen] == [batch] * 3
    for k, (_, _, ready) in enumerate(seen):
        # batch k unacked (window full) and batches < k acked (their window slots were refilled)
        assert ready == total - batch * (k + 1)
    assert amqp.wait_no_consumers(queue) == 0  # the last batch was acked when the query ended


def test_s4_prefetch_equal_to_batch_does_not_stall(spark, broker_url, amqp, tmp_path):
    queue = unique("s4")
    amqp.declare(queue)
    ids = amqp.publish(queue, 350)
    sink = "s4_" + queue.rsplit(".", 1)[-1]
    query = (_source(spark, broker_url, queue, maxMessagesPerBatch=100, prefetch=100)
             .writeStream.format("memory").queryName(sink)
             .option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(processingTime="500 milliseconds").start())
    try:
        for _ in range(120):
            query.processAllAvailable()
            if spark.table(sink).count() >= len(ids):
                break
        got = sorted(r.message_id for r in spark.table(sink).select("properties.message_id").collect())
    finally:
        query.stop()
    assert got == sorted(ids)
    # processingTime: the last batch may stay unacked at stop and come back (documented), no more
    assert amqp.wait_no_consumers(queue) <= 100


def test_missing_queue_fails_the_query_with_its_name(spark, broker_url, tmp_path):
    queue = unique("missing")
    query = (_source(spark, broker_url, queue).writeStream.format("memory").queryName("missing_q")
             .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True).start())
    with pytest.raises(Exception, match="does not exist"):
        query.awaitTermination(120)


def test_second_query_on_the_same_queue_is_refused(spark, broker_url, amqp, tmp_path):
    queue = unique("excl")
    amqp.declare(queue)
    amqp.publish(queue, 5)
    first = (_source(spark, broker_url, queue).writeStream.format("memory").queryName("excl_1")
             .option("checkpointLocation", str(tmp_path / "c1")).trigger(processingTime="1 second").start())
    try:
        first.processAllAvailable()
        second = (_source(spark, broker_url, queue).writeStream.format("memory").queryName("excl_2")
                  .option("checkpointLocation", str(tmp_path / "c2"))
                  .trigger(processingTime="1 second").start())
        with pytest.raises(Exception, match="RESOURCE_LOCKED|ACCESS_REFUSED"):
            second.awaitTermination(120)
    finally:
        first.stop()
    assert spark.table("excl_1").count() == 5


def test_url_list_fails_over_to_a_reachable_broker(spark, broker_url, amqp, tmp_path):
    from compat_tests.support.launcher import free_port
    queue = unique("failover")
    amqp.declare(queue)
    ids = amqp.publish(queue, 20)
    urls = f"amqp://guest:guest@127.0.0.1:{free_port()}/%2F,{broker_url}"  # first one is down
    _, df = _drain_to_parquet(spark, urls, queue, tmp_path)
    assert sorted(r.message_id for r in df.select("properties.message_id").collect()) == ids
