"""A streaming job for the S5/S6 crash tests, run as its own process (and JVM) and killed.

    python crash_job.py source URL QUEUE OUT CKPT BATCH [--kill-in-batch N]
    python crash_job.py sink   URL EXCHANGE ROUTING_KEY INPUT CKPT [--kill-in-batch N]

`source`: queue -> foreachBatch that appends the batch to Parquet at OUT (--kill-in-batch: SIGKILL the
whole process group right after writing batch N, before Spark commits it), or, without
--kill-in-batch, the Parquet file sink (the test kills it from outside).  `sink`: Parquet files at
INPUT -> the amqp sink; --kill-in-batch N kills the group inside the sink's batch N on the driver
(in `foreachBatch` order the write is done, so use it only with the source).  Trigger: AvailableNow.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys


def _spark():
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from amqp_broker.spark import register

    spark = (SparkSession.builder.master("local[2]").appName("amqp-crash-job")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def _kill_group() -> None:
    sys.stdout.flush()
    os.killpg(os.getpgid(0), signal.SIGKILL)


def run_source(args) -> None:
    spark = _spark()
    df = (spark.readStream.format("amqp").option("url", args.url).option("queue", args.queue)
          .option("maxMessagesPerBatch", str(args.batch)).option("numPartitions", "2").load())
    writer = df.writeStream.option("checkpointLocation", args.ckpt).trigger(availableNow=True)
    if args.kill_in_batch is not None:
        def append(batch_df, batch_id):
            batch_df.write.mode("append").parquet(args.out)
            print(f"wrote batch {batch_id}", flush=True)
            if batch_id == args.kill_in_batch:
                _kill_group()
        query = writer.foreachBatch(append).start()
    else:
        query = writer.format("parquet").option("path", args.out).start()
    query.awaitTermination()
    print("done", flush=True)


def run_sink(args) -> None:
    spark = _spark()
    df = (spark.readStream.schema("body STRING").option("maxFilesPerTrigger", "1")
          .parquet(args.input))
    query = (df.writeStream.format("amqp").option("url", args.url).option("exchange", args.exchange)
             .option("routingKey", args.routing_key).option("checkpointLocation", args.ckpt)
             .trigger(availableNow=True).start())
    query.awaitTermination()
    print("done", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="cmd", required=True)
    src = sub.add_parser("source")
    for name in ("url", "queue", "out", "ckpt"):
        src.add_argument(name)
    src.add_argument("batch", type=int)
    src.add_argument("--kill-in-batch", type=int)
    snk = sub.add_parser("sink")
    for name in ("url", "exchange", "routing_key", "input", "ckpt"):
        snk.add_argument(name)
    args = parser.parse_args()
    run_source(args) if args.cmd == "source" else run_sink(args)


if __name__ == "__main__":
    main()
