"""S6: the sink (streaming and batch) with publisher confirms, against a live broker."""

from __future__ import annotations

import re

import pytest

from compat_tests.support.metrics import scrape

from .amqp_util import unique
from .conftest import spark_available

pytestmark = pytest.mark.skipif(spark_available() is not None, reason=str(spark_available()))


def _input_dir(spark, tmp_path, count: int, files: int = 4) -> str:
    path = str(tmp_path / "input")
    (spark.range(count).selectExpr("concat('row-', cast(id as string)) AS body", "id")
     .repartition(files).write.parquet(path))
    return path


def test_s6_stream_to_exchange_with_deterministic_ids(spark, broker_url, amqp, tmp_path):
    queue = unique("s6")
    amqp.declare(queue)
    amqp.ch.queue_bind(queue, "amq.direct", routing_key=queue)
    path = _input_dir(spark, tmp_path, 1000)
    stream = (spark.readStream.schema("body STRING, id LONG").option("maxFilesPerTrigger", 2)
              .parquet(path).select("body"))
    query = (stream.writeStream.format("amqp").option("url", broker_url)
             .option("exchange", "amq.direct").option("routingKey", queue).option("maxInFlight", 50)
             .option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(availableNow=True).start())
    query.awaitTermination(300)
    assert query.exception() is None
    got = amqp.drain(queue)
    bodies = sorted(body.decode() for _, _, body in got)
    assert bodies == sorted(f"row-{i}" for i in range(1000))
    ids = [props.message_id for _, props, _ in got]
    assert len(set(ids)) == 1000
    pattern = re.compile(rf"^{re.escape(query.id)}:[01]:\d+:\d+$")  # 4 files, 2 per trigger
    assert all(pattern.match(i) for i in ids), ids[:3]
    assert all(props.delivery_mode == 2 for _, props, _ in got)


def test_s6_unroutable_with_mandatory_fails_the_query(spark, broker_url, tmp_path):
    path = _input_dir(spark, tmp_path, 10, files=1)
    stream = spark.readStream.schema("body STRING, id LONG").parquet(path).select("body")
    query = (stream.writeStream.format("amqp").option("url", broker_url)
             .option("exchange", "amq.direct").option("routingKey", unique("nobody-bound"))
             .option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(availableNow=True).start())
    with pytest.raises(Exception) as info:
        query.awaitTermination(300)
    assert "unroutable" in str(info.value).lower()


def _returned_total(broker) -> float:
    """The broker's own count of mandatory messages it returned (Prometheus /metrics)."""
    return scrape(broker.metrics_url)["rabbitmq_global_messages_unroutable_returned_total"]


def test_s6_unroutable_can_be_counted(spark, broker_url, launched_broker):
    """onUnroutable=count: the save succeeds although all 5 rows come back unroutable, and the
    writer's commit message counts them (5 published, 5 returned)."""
    from amqp_broker.spark.datasource import AmqpDataSource

    df = spark.range(5).selectExpr("cast(id as string) AS body")
    options = {"url": broker_url, "exchange": "amq.direct", "routingKey": unique("nobody-bound"),
               "onUnroutable": "count"}
    before = _returned_total(launched_broker) if launched_broker is not None else None
    df.write.format("amqp").options(**options).mode("append").save()
    if launched_broker is not None:  # a real RabbitMQ (SPARK_BROKER_URL) has no such counter here
        assert _returned_total(launched_broker) - before == 5
    # The count itself: what a Spark task of this save returns to the driver's commit().
    writer = AmqpDataSource(options).writer(df.schema, False)
    commit = writer.write(iter(df.toArrow().to_batches()))  # Spark hands writers Arrow batches
    assert (commit.published, commit.returned) == (5, 5)


def test_batch_write_with_columns(spark, broker_url, amqp):
    queue = unique("bw")
    amqp.declare(queue)
    df = spark.range(20).selectExpr(
        "cast(cast(id as string) as binary) AS body", f"'{queue}' AS routing_key", "map('k', cast(id as string)) AS headers",
        "named_struct('content_type', 'text/plain', 'priority', 3) AS properties",
        "concat('id-', cast(id as string)) AS message_id")
    df.write.format("amqp").option("url", broker_url).option("messageId", "none").mode("append").save()
    got = amqp.drain(queue)
    assert sorted(p.message_id for _, p, _ in got) == sorted(f"id-{i}" for i in range(20))
    assert {p.content_type for _, p, _ in got} == {"text/plain"}
    assert all(p.headers["k"] == p.message_id[3:] for _, p, _ in got)


def test_unknown_sink_column_is_rejected(spark, broker_url):
    df = spark.range(3).selectExpr("cast(id as string) AS body", "id AS surprise")
    with pytest.raises(Exception, match="surprise"):
        df.write.format("amqp").option("url", broker_url).mode("append").save()


def test_batch_read_refuses_by_default(spark, broker_url, amqp):
    queue = unique("br")
    amqp.declare(queue)
    with pytest.raises(Exception, match="drain_queue"):
        spark.read.format("amqp").option("url", broker_url).option("queue", queue).load().collect()


def test_batch_read_peek_requeues(spark, broker_url, amqp):
    queue = unique("peek")
    amqp.declare(queue)
    amqp.publish(queue, 7)
    rows = (spark.read.format("amqp").option("url", broker_url).option("queue", queue)
            .option("mode", "peek").option("queueType", "classic").load().collect())
    assert sorted(r.properties.message_id for r in rows) == [f"m{i:06d}" for i in range(7)]
    assert amqp.wait_no_consumers(queue) == 7
