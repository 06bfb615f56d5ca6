"""Parallel reading: one query over several queues (a list, or a regex over the vhost's queue names
from the management API): one consumer per queue, partitions along the queues, every queue drained
and acked only after commit.  AMQP 0-9-1 plus the management API's queue listing, so it also runs
against RabbitMQ (SPARK_BROKER_URL, and MGMT_URL for the pattern)."""

from __future__ import annotations

import os
import re

import pytest

from .amqp_util import unique
from .conftest import spark_available
from .test_stream_source import _drain_to_parquet, _input_rows

pytestmark = pytest.mark.skipif(spark_available() is not None, reason=str(spark_available()))


@pytest.fixture
def three_queues(amqp):
    base = unique("par")
    queues = [f"{base}-{i}" for i in range(3)]
    expected = {}
    for i, queue in enumerate(queues):
        amqp.declare(queue, **({"x-queue-type": "quorum"} if i == 2 else {}))
        expected[queue] = amqp.publish(queue, 100 * (i + 1), start=1000 * i)
    return base, queues, expected


def _check(amqp, df, queues, expected) -> None:
    got = {}
    for row in df.select("queue", "properties.message_id").collect():
        got.setdefault(row.queue, []).append(row.message_id)
    assert {q: sorted(ids) for q, ids in got.items()} == {q: sorted(ids) for q, ids in expected.items()}
    for queue in queues:
        assert amqp.wait_no_consumers(queue) == 0  # drained and acked, every queue


def test_a_list_of_queues_is_read_in_one_query(spark, broker_url, amqp, three_queues, tmp_path):
    _, queues, expected = three_queues
    query, df = _drain_to_parquet(spark, broker_url, ",".join(queues), tmp_path,
                                  maxMessagesPerBatch=250, numPartitions=3)
    assert sum(_input_rows(query)) == 600 and max(_input_rows(query)) <= 250
    _check(amqp, df, queues, expected)


def test_a_queue_pattern_is_resolved_through_the_management_api(spark, broker_url, launched_broker,
                                                                 amqp, three_queues, tmp_path):
    mgmt = launched_broker.mgmt_url if launched_broker is not None else os.environ.get("MGMT_URL")
    if not mgmt:
        pytest.skip("queuePattern needs the management API: set MGMT_URL with SPARK_BROKER_URL")
    base, queues, expected = three_queues
    amqp.declare(f"{base}-x")  # exists, but does not match the pattern
    amqp.publish(f"{base}-x", 5)
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    query = (spark.readStream.format("amqp").option("url", broker_url)
             .option("queuePattern", re.escape(base) + r"-[0-9]+").option("managementUrl", mgmt)
             .load().writeStream.format("parquet").option("path", out)
             .option("checkpointLocation", ckpt).trigger(availableNow=True).start())
    query.awaitTermination(300)
    assert not query.isActive
    _check(amqp, spark.read.parquet(out), queues, expected)
    assert amqp.counts(f"{base}-x")[0] == 5  # the non-matching queue was left alone


def test_a_partitioned_queue_is_read_along_its_partitions(spark, broker_url, launched_broker, amqp,
                                                          tmp_path):
    """A partitioned queue (this broker's x-queue-type partitioned) named as `queue`: every message
    arrives once, and each Parquet file a batch's task writes holds one partition's messages, in
    the order the partition delivered them."""
    if launched_broker is None:
        pytest.skip("partitioned queues are this broker's own queue type (RabbitMQ has none)")
    from amqp_broker.queues.partitioned import partition_of
    from pyspark.sql import functions as F

    queue = unique("parted")
    amqp.declare(queue, **{"x-queue-type": "partitioned", "x-partitions": 4})
    keys = [f"customer-{i}" for i in range(8)]
    expected = {}
    for n, key in enumerate(keys):
        ids = amqp.publish(queue, 50, start=1000 * n, headers={"x-partition-key": key})
        expected.update({mid: partition_of(key, 4) for mid in ids})
    assert len(set(expected.values())) > 1, "the keys chosen must reach several partitions"

    _, df = _drain_to_parquet(spark, broker_url, queue, tmp_path, maxMessagesPerBatch=150,
                              numPartitions=2)
    rows = (df.select("properties.message_id", F.col("headers")["x-partition"].alias("part"),
                      "seq", F.input_file_name().alias("file")).collect())
    assert sorted(r.message_id for r in rows) == sorted(expected)
    assert all(int(r.part) == expected[r.message_id] for r in rows)
    by_file: dict[str, list] = {}
    for r in rows:
        by_file.setdefault(r.file, []).append(r)
    for file_rows in by_file.values():
        assert len({r.part for r in file_rows}) == 1  # no task mixes two partitions
        ids = [r.message_id for r in sorted(file_rows, key=lambda r: r.seq)]
        assert ids == sorted(ids)  # keys were published one after another, ids rising: publish order
    assert amqp.wait_no_consumers(queue) == 0
