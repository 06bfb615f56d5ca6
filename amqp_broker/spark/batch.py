"""Batch reads: `spark.read.format("amqp")` (SPARK.md 5.5) and the safe `drain_queue` helper.

A batch read of a destructive queue has no commit hook, so it cannot ack after Spark succeeds.
By default (`mode=drain`) the reader refuses and points at `drain_queue`, which is a streaming
query with Trigger.AvailableNow into a durable sink (ack after commit).  `mode=consume` acks in the
executor (at-most-once, explicit opt-in); `mode=peek` reads then closes without acking (requeue),
refused unless `queueType=classic` or `force=true` because every peek raises a quorum queue's
delivery count toward its delivery-limit.
"""

from __future__ import annotations

import datetime as dt

import pika
import pika.exceptions
from pyspark.sql.datasource import DataSourceReader, InputPartition

from .consumer import connection_parameters
from .options import BatchReadOptions, OptionError
from .rows import make_row

_DRAIN_HELP = (
    "spark.read.format('amqp') would consume a destructive queue without any way to ack after "
    "Spark succeeds (every action re-runs read()). Use the streaming drain instead: "
    "amqp_broker.spark.drain_queue(spark, url, queue, path, checkpoint), i.e. "
    "spark.readStream.format('amqp')...writeStream.trigger(availableNow=True). "
    "Opt in explicitly with mode=consume (ack on read, at-most-once) or mode=peek "
    "(requeue, small samples only)."
)


class AmqpBatchReader(DataSourceReader):
    def __init__(self, opts: BatchReadOptions) -> None:
        if opts.mode == "drain":
            raise OptionError(_DRAIN_HELP)
        if opts.mode == "peek" and opts.queue_type != "classic" and not opts.force:
            raise OptionError(
                "mode=peek requeues what it read, which increments the delivery count of a quorum "
                "queue and can dead-letter messages through its delivery-limit. Set "
                "queueType=classic if the queue is classic, or force=true to peek anyway.")
        self._opts = opts

    def partitions(self):
        return [InputPartition(0)]

    def read(self, partition):
        opts = self._opts
        conn = pika.BlockingConnection(connection_parameters(opts.urls[0], opts.heartbeat))
        try:
            ch = conn.channel()
            rows = []
            for seq in range(1, opts.max_messages + 1):
                method, props, body = ch.basic_get(opts.queue, auto_ack=opts.mode == "consume")
                if method is None:
                    break
                rows.append(make_row(
                    seq=seq, queue=opts.queue, body=bytes(body) if opts.include_body else None,
                    exchange=method.exchange, routing_key=method.routing_key,
                    redelivered=method.redelivered, delivery_tag=method.delivery_tag,
                    properties=props, consumed_at=dt.datetime.now(dt.timezone.utc)))
        finally:
            # peek: closing without an ack requeues everything read
            if conn.is_open:
                conn.close()
        return iter(rows)


def drain_queue(spark, url: str, queue: str, path: str, checkpoint: str, *,
                fmt: str = "parquet", partition_by: list[str] | None = None,
                **options: str) -> dict:
    """Drain what is in `queue` now into files at `path`, acking only after Spark commits
    (Trigger.AvailableNow).  Returns totals from the query's progress, and each trigger's
    rows and Spark durationMs (`triggers`)."""
    reader = spark.readStream.format("amqp").option("url", url).option("queue", queue)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    writer = (reader.load().writeStream.format(fmt).option("path", path)
              .option("checkpointLocation", checkpoint).trigger(availableNow=True))
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    query = writer.start()
    query.awaitTermination()
    progress = query.recentProgress  # dicts (StreamingQueryProgress is one in PySpark 4)
    triggers = [(int(p.get("numInputRows", 0)),
                 {k: int(v) for k, v in (p.get("durationMs") or {}).items()}) for p in progress]
    durations: dict[str, int] = {}  # Spark's durationMs of every trigger, summed per phase
    for _, phase_ms in triggers:
        for phase, ms in phase_ms.items():
            durations[phase] = durations.get(phase, 0) + ms
    return {"batches": sum(1 for n, _ in triggers if n), "rows": sum(n for n, _ in triggers),
            "durations_ms": durations, "triggers": triggers}
