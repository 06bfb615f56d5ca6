"""Throughput of the Spark `amqp` connector: queue -> Parquet (source) and DataFrame -> queue (sink).

    python bench/spark_bench.py [--url amqp://guest:guest@127.0.0.1:5673/%2F] [--messages 20000]
                                [--size 1024] [--batch 10000] [--master local[2]]

Without --url it starts this project's broker (`amqp-broker`) on a free port.  Messages per second
include Spark's per-batch overhead (planning, commit logs), which dominates small runs; the first
query also pays JVM/Python worker warm-up, so a warm-up run is done first.  Needs `[spark]`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pika

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from compat_tests.support.launcher import Broker  # noqa: E402


def _fill(url: str, queue: str, count: int, size: int) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    ch.queue_declare(queue, durable=True)
    body = b"x" * size
    for i in range(count):
        ch.basic_publish("", queue, body, pika.BasicProperties(message_id=str(i), delivery_mode=2))
    while ch.queue_declare(queue, passive=True).method.message_count < count:
        time.sleep(0.1)
    conn.close()


def _purge(url: str, queue: str) -> int:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    n = ch.queue_declare(queue, passive=True).method.message_count
    ch.queue_delete(queue)
    conn.close()
    return n


def bench_source(spark, url: str, work: Path, count: int, size: int, batch: int) -> float:
    from amqp_broker.spark import drain_queue
    queue = f"bench.source.{time.time_ns()}"
    _fill(url, queue, count, size)
    out = work / f"out-{queue}"
    start = time.perf_counter()
    result = drain_queue(spark, url, queue, str(out), str(work / f"ckpt-{queue}"),
                         maxMessagesPerBatch=batch)
    elapsed = time.perf_counter() - start
    assert result["rows"] == count, result
    _purge(url, queue)
    return count / elapsed


def bench_sink(spark, url: str, count: int, size: int) -> float:
    queue = f"bench.sink.{time.time_ns()}"
    conn = pika.BlockingConnection(pika.URLParameters(url))
    conn.channel().queue_declare(queue, durable=True)
    conn.close()
    df = spark.range(count).selectExpr(f"repeat('x', {size}) AS body").repartition(2).cache()
    df.count()
    start = time.perf_counter()
    df.write.format("amqp").option("url", url).option("routingKey", queue).mode("append").save()
    elapsed = time.perf_counter() - start
    df.unpersist()
    assert _purge(url, queue) == count
    return count / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url")
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from amqp_broker.spark import register

    work = Path(tempfile.mkdtemp(prefix="spark-bench-"))
    broker = None
    url = args.url
    if url is None:
        broker = Broker(work / "broker").start()
        url = broker.url
    spark = (SparkSession.builder.master(args.master).appName("amqp-spark-bench")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    try:
        bench_source(spark, url, work, min(1000, args.messages), args.size, args.batch)  # warm-up
        source = bench_source(spark, url, work, args.messages, args.size, args.batch)
        sink = bench_sink(spark, url, args.messages, args.size)
        print(f"{'case':<28}{'messages':>10}{'msg/s':>12}")
        print(f"{'source -> parquet':<28}{args.messages:>10}{source:>12.0f}")
        print(f"{'dataframe -> amqp sink':<28}{args.messages:>10}{sink:>12.0f}")
        print(f"(body {args.size} B, maxMessagesPerBatch {args.batch}, {args.master}, {url.split('@')[-1]})")
    finally:
        spark.stop()
        if broker is not None:
            broker.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
