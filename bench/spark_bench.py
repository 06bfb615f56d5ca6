"""Throughput of the Spark `amqp` connector, this broker and RabbitMQ in the same run.

    python bench/spark_bench.py [--ours URL] [--rabbit URL | --no-rabbit] [--messages 100000]
                                [--size 1024] [--batch 30000] [--queue-types classic quorum]
                                [--master local[2]] [--cpu]

For each broker and queue type (1 KiB persistent messages by default):
  source      queue -> Parquet, Trigger.AvailableNow, acks after commit (`drain_queue`); msg/s from
              query start to termination, so it includes Spark's start-up and per-batch overhead
  sink        cached DataFrame (2 partitions) -> the queue through the default exchange, publisher
              confirms (`df.write.format("amqp")`)
  queues      the parallel-reading curve: one source query over 1/2/4/8 classic queues (--queues)
  reference   the broker's own bench client (bench/broker_bench.py) on the same broker and queue
              type: `publish` (confirms, window 1000) for the sink, `e2e` (publish + consume) for
              the source; the ratio column is connector / reference
Without --ours it starts this project's broker on a free port; without --rabbit it uses
amqp://guest:guest@127.0.0.1:5673/ if something listens there (`bash .ci/rabbitmq.sh start`).
Warm-up queries (source up to 100,000 messages, sink up to 30,000) run first: JIT and Python workers.  Needs the `[spark]` extra.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import struct
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
import broker_bench  # noqa: E402
from compat_tests.support.launcher import Broker  # noqa: E402


def _fresh_queue(url: str, queue: str, queue_type: str) -> None:
    broker_bench._declare_fresh(url, queue, broker_bench._queue_args(queue_type))


def _fill(url: str, queue: str, queue_type: str, count: int, size: int) -> None:
    """`count` messages whose bodies differ, as real ones do: with one body repeated, Parquet's
    dictionary and min/max statistics compare every byte of every row, and that (not the
    connector) became most of the source's time."""
    _fresh_queue(url, queue, queue_type)
    body = bytearray(os.urandom(max(size, 8)))

    def numbered(client, n: int) -> bytes:
        struct.pack_into(">Q", body, 0, n)
        return client.publish_frames("", queue, bytes(body))

    broker_bench.publisher(url, queue, count, size, 1000, frames=numbered)


def _process_cpu() -> dict[int, tuple[float, float, str]]:
    """Every process's CPU seconds (own, and own + its exited children: Spark's streaming-source
    runner is a child of the JVM that exits with the query) and command line, from /proc."""
    out = {}
    tick = os.sysconf("SC_CLK_TCK")
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:100]
        except OSError:
            continue
        own = (int(stat[11]) + int(stat[12])) / tick
        out[int(pid)] = (own, own + (int(stat[13]) + int(stat[14])) / tick, cmd)
    return out


def _print_cpu(before: dict, after: dict) -> None:
    spent = [(total - before.get(pid, (0, 0, ""))[1], own - before.get(pid, (0, 0, ""))[0], cmd)
             for pid, (own, total, cmd) in after.items()]
    for total, own, cmd in sorted(spent, reverse=True)[:4]:
        print(f"      cpu {total:6.2f} s (own {own:.2f}) {cmd}", file=sys.stderr)


def bench_source(spark, url: str, work: Path, queue_type: str, count: int, size: int,
                 batch: int, cpu: bool = False) -> float:
    from amqp_broker.spark import drain_queue
    queue = f"bench.source.{queue_type}.{time.time_ns()}"
    _fill(url, queue, queue_type, count, size)
    before = _process_cpu() if cpu else {}
    start = time.perf_counter()
    result = drain_queue(spark, url, queue, str(work / f"out-{queue}"), str(work / f"ckpt-{queue}"),
                         maxMessagesPerBatch=batch, prefetch=min(65535, 2 * batch))
    elapsed = time.perf_counter() - start
    assert result["rows"] == count, result
    _print_phases(result, elapsed)
    if cpu:
        _print_cpu(before, _process_cpu())
    broker_bench.delete_queue(url, queue)
    shutil.rmtree(work / f"out-{queue}", ignore_errors=True)
    return count / elapsed


def _print_phases(result: dict, elapsed: float) -> None:
    """Where the query's time went: Spark's durationMs per phase, summed over its triggers, and
    what lies outside every trigger (starting and stopping the query)."""
    ms = result.get("durations_ms") or {}
    inside = ms.get("triggerExecution", 0)
    phases = ", ".join(f"{k} {v}" for k, v in sorted(ms.items(), key=lambda kv: -kv[1])
                       if k != "triggerExecution")
    print(f"    source phases over {result['batches']} batches (ms): triggers {inside} "
          f"[{phases}]; outside triggers {elapsed * 1000 - inside:.0f}", file=sys.stderr)
    for k, (rows, phase_ms) in enumerate(result.get("triggers") or []):
        print(f"      trigger {k}: {rows} rows, latestOffset {phase_ms.get('latestOffset', 0)}, "
              f"addBatch {phase_ms.get('addBatch', 0)}, "
              f"triggerExecution {phase_ms.get('triggerExecution', 0)} ms", file=sys.stderr)


def bench_queues(spark, url: str, work: Path, queues: int, count: int, size: int, batch: int) -> float:
    """One query over `queues` classic queues (a comma-separated list), count/queues in each."""
    from amqp_broker.spark import drain_queue
    base = f"bench.par{queues}.{time.time_ns()}"
    names = [f"{base}-{i}" for i in range(queues)]
    for name in names:
        _fill(url, name, "classic", count // queues, size)
    start = time.perf_counter()
    result = drain_queue(spark, url, ",".join(names), str(work / f"out-{base}"),
                         str(work / f"ckpt-{base}"), maxMessagesPerBatch=batch,
                         prefetch=min(65535, max(batch, 2 * batch // queues)))
    elapsed = time.perf_counter() - start
    assert result["rows"] == count // queues * queues, result
    for name in names:
        broker_bench.delete_queue(url, name)
    shutil.rmtree(work / f"out-{base}", ignore_errors=True)
    return result["rows"] / elapsed


def bench_sink(spark, url: str, queue_type: str, count: int, size: int) -> float:
    queue = f"bench.sink.{queue_type}.{time.time_ns()}"
    _fresh_queue(url, queue, queue_type)
    df = spark.range(count).selectExpr(f"repeat('x', {size}) AS body").repartition(2).cache()
    df.count()
    start = time.perf_counter()
    df.write.format("amqp").option("url", url).option("routingKey", queue).mode("append").save()
    elapsed = time.perf_counter() - start
    df.unpersist()
    client = broker_bench.WireClient(url)
    client.queue_declare(queue, passive=True)
    client.close()
    broker_bench.delete_queue(url, queue)
    return count / elapsed


def reference(url: str, queue_type: str, count: int, size: int) -> dict:
    args = argparse.Namespace(queue=f"bench.ref.{queue_type}", count=count, size=size, window=1000,
                              prefetch=500, arguments=broker_bench._queue_args(queue_type))
    out = broker_bench.run_publish(url, args)
    out.update(broker_bench.run_e2e(url, args))
    broker_bench.delete_queue(url, args.queue)
    return out


def _listening(url: str) -> bool:
    parts = urllib.parse.urlparse(url)
    try:
        socket.create_connection((parts.hostname, parts.port or 5672), timeout=1).close()
        return True
    except OSError:
        return False


def local_session(master: str, name: str):
    """The SparkSession every Spark benchmark here measures with: loopback, no UI, 2 shuffle
    partitions (`spark_ceiling.py` must run its query in the same one to be comparable)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master(master).appName(name)
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ours", help="URL of this broker (default: start one)")
    parser.add_argument("--rabbit", default="amqp://guest:guest@127.0.0.1:5673/%2F")
    parser.add_argument("--no-rabbit", action="store_true")
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=30_000, help="maxMessagesPerBatch")
    parser.add_argument("--queue-types", nargs="+", default=["classic", "quorum"],
                        choices=["classic", "quorum"])
    parser.add_argument("--queues", nargs="*", type=int, default=[1, 2, 4, 8],
                        help="the parallel-reading curve: classic queues per query")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--cpu", action="store_true",
                        help="print the CPU time of the busiest processes during each source query")
    args = parser.parse_args()

    from amqp_broker.spark import register

    work = Path(tempfile.mkdtemp(prefix="spark-bench-"))
    broker = None
    targets = []
    if args.ours:
        targets.append(("amqp-broker", args.ours))
    else:
        broker = Broker(work / "broker").start()
        targets.append(("amqp-broker", broker.url))
    if not args.no_rabbit:
        if _listening(args.rabbit):
            targets.append(("rabbitmq", args.rabbit))
        else:
            print(f"(no RabbitMQ at {args.rabbit}: measuring this broker only)", file=sys.stderr)
    spark = local_session(args.master, "amqp-spark-bench")
    register(spark)
    rows = []
    curve = []
    try:
        # warm-up (JVM JIT, Python workers): with one batch of it, the first measured source query
        # still ran 15-20% below the same query later in the run
        bench_source(spark, targets[0][1], work, "classic", min(args.messages, 100_000), args.size, args.batch)
        bench_sink(spark, targets[0][1], "classic", min(args.messages, 30_000), args.size)
        for name, url in targets:
            for queue_type in args.queue_types:
                ref = reference(url, queue_type, min(args.messages, 50_000), args.size)
                source = bench_source(spark, url, work, queue_type, args.messages, args.size, args.batch,
                                      cpu=args.cpu)
                sink = bench_sink(spark, url, queue_type, args.messages, args.size)
                rows.append((name, queue_type, "source -> parquet", source, ref["e2e msg/s"]))
                rows.append((name, queue_type, "dataframe -> sink", sink, ref["publish msg/s"]))
                print(f"... {name} {queue_type}: source {source:.0f}, sink {sink:.0f} msg/s",
                      file=sys.stderr)
            for n in args.queues:
                rate = bench_queues(spark, url, work, n, args.messages, args.size, args.batch)
                curve.append((name, n, rate))
                print(f"... {name} {n} queue(s): source {rate:.0f} msg/s", file=sys.stderr)
    finally:
        spark.stop()
        if broker is not None:
            broker.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(f"{'broker':<13}{'queue':<9}{'case':<20}{'msg/s':>9}{'reference':>11}{'ratio':>7}")
    for name, queue_type, case, rate, ref in rows:
        print(f"{name:<13}{queue_type:<9}{case:<20}{rate:>9.0f}{ref:>11.0f}{rate / ref:>7.2f}")
    if curve:
        print(f"\n{'broker':<13}{'queues':>7}{'source msg/s':>14}   (one query, classic queues)")
        for name, n, rate in curve:
            print(f"{name:<13}{n:>7}{rate:>14.0f}")
    print(f"({args.messages} messages of {args.size} B, maxMessagesPerBatch {args.batch}, "
          f"{args.master}; reference: bench/broker_bench.py e2e for the source, publish for the sink)")


if __name__ == "__main__":
    main()
