"""`amqp-broker-dlq`: archive a dead-letter queue to Parquet and report on it (SPARK.md 6).

    amqp-broker-dlq archive --url amqp://... --queue dlq.analytics --archive ./dlq-archive
    amqp-broker-dlq report  --archive ./dlq-archive [--bucket 1h --top 20 --format json --out ./report]
    amqp-broker-dlq run     (archive, then report; same flags)
    amqp-broker-dlq replay  --url amqp://... --archive ./dlq-archive [--reason rejected] [--source-queue q]
                            [--since ... --until ...] [--message-id ID ...] [--to-exchange X
                            --to-routing-key K] [--dry-run]

Also `python -m amqp_broker.spark.dlq`, and unchanged under `spark-submit .../dlq.py report ...`
(run as a file, it imports `amqp_broker.spark.dlq` from the path: installed, or `--py-files`);
`--master` (default local[*]) applies only when Spark has no master configured already.
`archive` is a streaming query with Trigger.AvailableNow (ack after commit) unless --continuous;
`report` only reads the archive through Spark (it honours the file sink's `_spark_metadata`).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def window_duration(text: str) -> str:
    """`1h` / `15m` / `1 day` -> a Spark window duration string."""
    m = re.fullmatch(r"\s*(\d+)\s*([smhd])\s*", text)
    if m:
        return f"{m.group(1)} {_UNITS[m.group(2)]}"
    return text


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--master", default="local[*]",
                        help="Spark master when none is configured (spark-submit's wins)")
    common.add_argument("--ui", action="store_true", help="keep the Spark UI on (local runs)")
    common.add_argument("--archive", required=True, help="archive directory (Parquet, file sink)")

    archive = argparse.ArgumentParser(add_help=False)
    archive.add_argument("--url", required=True, help="amqp://user:pass@host:port/vhost")
    archive.add_argument("--queue", default="dlq.analytics")
    archive.add_argument("--checkpoint", help="default: <archive>/_checkpoint")
    archive.add_argument("--continuous", action="store_true", help="keep running (processingTime)")
    archive.add_argument("--trigger", default="30s", help="trigger interval with --continuous")
    archive.add_argument("--max-messages-per-batch", type=int, default=10_000)

    report = argparse.ArgumentParser(add_help=False)
    report.add_argument("--since", help="inclusive start, e.g. 2026-11-01")
    report.add_argument("--until", help="exclusive end")
    report.add_argument("--bucket", default="1h", help="time bucket: 15m, 1h, 1d, ...")
    report.add_argument("--top", type=int, default=20)
    report.add_argument("--format", choices=("table", "csv", "json"), default="table")
    report.add_argument("--out", help="directory for CSV/JSON files and the PNG chart")

    replay = argparse.ArgumentParser(add_help=False)
    replay.add_argument("--url", required=True, help="amqp://user:pass@host:port/vhost")
    replay.add_argument("--reason", action="append", default=[], help="x-first-death-reason (repeatable)")
    replay.add_argument("--source-queue", action="append", default=[],
                        help="x-first-death-queue, the queue it died in (repeatable)")
    replay.add_argument("--since", help="first death at or after, e.g. 2026-11-01")
    replay.add_argument("--until", help="first death before")
    replay.add_argument("--message-id", action="append", default=[], help="message_id (repeatable)")
    replay.add_argument("--to-exchange", help="publish here instead of the original exchange")
    replay.add_argument("--to-routing-key", help="with this routing key instead of the original")
    replay.add_argument("--dry-run", action="store_true", help="print what would be replayed")
    replay.add_argument("--format", choices=("table", "json"), default="table")

    parser = argparse.ArgumentParser(prog="amqp-broker-dlq", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("archive", parents=[common, archive], help="drain the DLQ into the archive")
    sub.add_parser("report", parents=[common, report], help="report on the archive")
    sub.add_parser("run", parents=[common, archive, report], help="archive, then report")
    sub.add_parser("replay", parents=[common, replay],
                   help="republish archived dead letters (filtered), with confirms, once each")
    return parser


def _configured_master() -> str | None:
    """spark.master set by spark-submit (the JVM exists already) or by spark-defaults."""
    from pyspark import SparkConf, SparkContext
    if os.environ.get("PYSPARK_GATEWAY_PORT"):  # launched by spark-submit: ask its JVM
        SparkContext._ensure_initialized()
    conf = SparkConf()
    return conf.get("spark.master", None)


def spark_session(master: str = "local[*]", ui: bool = False, app: str = "amqp-broker-dlq"):
    """A SparkSession; local settings (loopback, no UI, few shuffle partitions) only when local."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app)
    if _configured_master() is None:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        cores = os.cpu_count() or 1
        builder = (builder.master(master)
                   .config("spark.driver.host", "127.0.0.1")
                   .config("spark.driver.bindAddress", "127.0.0.1")
                   .config("spark.ui.enabled", "true" if ui else "false")
                   .config("spark.sql.shuffle.partitions", str(min(8, cores * 2))))
    spark = builder.getOrCreate()
    from .datasource import register
    register(spark)
    return spark


def archive(spark, args) -> dict:
    """Drain (or follow, with --continuous) the queue into Parquet partitioned by dt."""
    from pyspark.sql import functions as F

    checkpoint = args.checkpoint or args.archive.rstrip("/") + "/_checkpoint"
    df = (spark.readStream.format("amqp").option("url", args.url).option("queue", args.queue)
          .option("maxMessagesPerBatch", str(args.max_messages_per_batch)).load()
          .withColumn("dt", F.to_date("consumed_at")))
    writer = (df.writeStream.format("parquet").option("path", args.archive)
              .option("checkpointLocation", checkpoint).partitionBy("dt"))
    if args.continuous:
        writer = writer.trigger(processingTime=window_duration(args.trigger))
    else:
        writer = writer.trigger(availableNow=True)
    query = writer.start()
    rows = _await_with_progress(query, f"archiving {args.queue}")
    print(f"archived {rows} dead letters from {args.queue} into {args.archive}", file=sys.stderr)
    return {"rows": rows}


def _rows(progress) -> int:
    return int(progress["numInputRows"] if isinstance(progress, dict)
               else getattr(progress, "numInputRows", 0))


def _await_with_progress(query, what: str, every: float = 5.0) -> int:
    """Wait for the query, printing rows so far on stderr when it has moved (long runs)."""
    done = shown = 0
    seen_batches = set()
    while not query.awaitTermination(every):
        for p in query.recentProgress:
            batch = p["batchId"] if isinstance(p, dict) else p.batchId
            if batch not in seen_batches:
                seen_batches.add(batch)
                done += _rows(p)
        if done != shown:
            print(f"amqp-broker-dlq: {what}: {done} rows in {len(seen_batches)} batches",
                  file=sys.stderr, flush=True)
            shown = done
    for p in query.recentProgress:
        batch = p["batchId"] if isinstance(p, dict) else p.batchId
        if batch not in seen_batches:
            seen_batches.add(batch)
            done += _rows(p)
    return done


def report(spark, args) -> dict:
    from . import dlq_output, dlq_report

    data = spark.read.parquet(args.archive)
    result = dlq_report.build(data, since=args.since, until=args.until,
                              bucket=window_duration(args.bucket), top=args.top)
    if args.format == "json":
        sys.stdout.write(dlq_output.render_json(result))
    elif args.format == "csv" and not args.out:
        for name in dlq_output.TABLES:
            sys.stdout.write(f"# {name}\n")
            dlq_output.write_csv(result[name], sys.stdout)
    else:
        sys.stdout.write(dlq_output.render_tables(result))
    if args.out:
        out = Path(args.out)
        written = dlq_output.write_files(result, out, "json" if args.format == "json" else "csv")
        chart = dlq_output.write_chart(result["over_time"], out / "dead_letters_over_time.png")
        page = dlq_output.write_html(result, out / "report.html", chart)
        for path in [*written, *([chart] if chart else []), page]:
            print(f"wrote {path}", file=sys.stderr)
    return result


def replay(spark, args) -> dict:
    import json

    from . import dlq_output, dlq_replay

    result = dlq_replay.replay(
        spark, args.url, args.archive, dry_run=args.dry_run,
        progress=lambda text: print(f"amqp-broker-dlq: {text}", file=sys.stderr, flush=True),
        reasons=args.reason, queues=args.source_queue, since=args.since, until=args.until,
        message_ids=args.message_id, exchange=args.to_exchange, routing_key=args.to_routing_key)
    if args.format == "json":
        sys.stdout.write(json.dumps(result, default=str, indent=2) + "\n")
    else:
        verb = "would replay" if args.dry_run else "replayed"
        sys.stdout.write(dlq_output.table_text(result["rows"]) + "\n")
        sys.stdout.write(f"{verb} {result['selected'] if args.dry_run else result['replayed']} "
                         f"dead letters ({result['replay_id']})\n")
    return result


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command in ("report", "replay") and "://" not in args.archive and not Path(args.archive).exists():
        print(f"amqp-broker-dlq: archive {args.archive} does not exist", file=sys.stderr)
        return 2
    spark = spark_session(args.master, args.ui)
    try:
        if args.command in ("archive", "run"):
            archive(spark, args)
        if args.command in ("report", "run"):
            report(spark, args)
        if args.command == "replay":
            replay(spark, args)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    if not __package__:
        # Run as a file (`spark-submit .../dlq.py report ...`): this module's relative imports need
        # its package, so run the package's copy; drop this file's directory from sys.path first,
        # or its siblings (source.py, options.py, ...) would shadow top-level modules.
        here = str(Path(__file__).resolve().parent)
        sys.path[:] = [p for p in sys.path if p and str(Path(p).resolve()) != here]
        from amqp_broker.spark.dlq import main as package_main
        sys.exit(package_main())
    sys.exit(main())
