"""Spark's own ceiling for the source query of `spark_bench.py`, with no broker and no connector.

    python bench/spark_ceiling.py [--rows 200000] [--batch 30000] [--runs 3] [--master local[2]]

A Python streaming data source with the `amqp` source's schema whose `read()` yields one prebuilt
record batch of 1 KiB bodies (built once per Python worker), drained to Parquet with
Trigger.AvailableNow, `--batch` rows a trigger, timed as `spark_bench.py` times the real source
(from query start to termination).  What the real source reaches is bounded by this figure on
the same machine.  Needs the `[spark]` extra.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from spark_bench import local_session  # noqa: E402  the same session as the real source's query

_built: dict[int, object] = {}


def _prebuilt(rows: int):
    """`rows` rows as the source's consumer makes them (persistent, no headers), one batch."""
    if rows not in _built:
        from amqp_broker.spark.arrow_rows import record_batch
        from amqp_broker.spark.rows import ledger_columns, property_columns

        class Persistent:  # the properties of a plain persistent message
            delivery_mode, headers = 2, None

            def __getattr__(self, name):
                return None

        columns = ledger_columns(property_columns(Persistent()))
        now = dt.datetime.now(dt.timezone.utc)
        ledger_rows = [("bench", os.urandom(1024), "", "bench", False, i + 1, *columns, now)
                       for i in range(rows)]
        _built[rows] = record_batch(list(range(1, rows + 1)), ledger_rows)
    return _built[rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=30_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming.datasource import ReadMaxRows, SupportsTriggerAvailableNow

    from amqp_broker.spark.rows import SCHEMA_DDL

    total, batch = args.rows, args.batch

    class Slice(InputPartition):
        def __init__(self, index: int, rows: int) -> None:
            super().__init__(index)
            self.rows = rows

    class Reader(DataSourceStreamReader, SupportsTriggerAvailableNow):
        def initialOffset(self):
            return {"seq": 0}

        def getDefaultReadLimit(self):
            return ReadMaxRows(batch)

        def prepareForTriggerAvailableNow(self):
            pass

        def latestOffset(self, start, limit=None):
            return {"seq": min(total, start["seq"] + batch)}

        def partitions(self, start, end):
            rows = end["seq"] - start["seq"]
            return [Slice(0, rows // 2), Slice(1, rows - rows // 2)]

        def read(self, partition):
            return iter([_prebuilt(partition.rows)])

        def commit(self, end):
            pass

    class Ceiling(DataSource):
        @classmethod
        def name(cls):
            return "amqp_ceiling"

        def schema(self):
            return SCHEMA_DDL

        def streamReader(self, schema):
            return Reader()

    spark = local_session(args.master, "amqp-spark-ceiling")
    spark.dataSource.register(Ceiling)
    work = Path(tempfile.mkdtemp(prefix="spark-ceiling-"))
    try:
        for run in range(args.runs):
            start = time.perf_counter()
            query = (spark.readStream.format("amqp_ceiling").load().writeStream.format("parquet")
                     .option("path", str(work / f"out{run}"))
                     .option("checkpointLocation", str(work / f"ckpt{run}"))
                     .trigger(availableNow=True).start())
            query.awaitTermination()
            elapsed = time.perf_counter() - start
            rows = sum(p["numInputRows"] for p in query.recentProgress)
            assert rows == total, rows
            print(f"run {run}: {rows} rows in {elapsed:.2f} s = {rows / elapsed:.0f} rows/s"
                  + ("  (the first run warms the JVM up)" if run == 0 else ""))
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
