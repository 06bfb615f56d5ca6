"""Dead-letter replay: put archived dead letters back (`amqp-broker-dlq replay`).

Called by `dlq.py`.  Selects archived rows by filter (reason, origin queue, time window of the
first death, message ids), leaves out rows replayed before, and republishes them with publisher
confirms through the `amqp` sink: to the exchange and routing key the message was first published
with (the x-death entry of its first death), or to a named exchange / routing key.  The replayed
rows are then recorded in `<archive>/_replayed` (Parquet: row_id, replay_id, replayed_at, target),
which is how "marked in the archive" works on an append-only file-sink archive: Spark's reads of
the archive ignore `_`-prefixed directories, and the next replay anti-joins on `row_id`.

At-least-once, like the sink: if publishing fails part-way, nothing is recorded and the next run
republishes what already went.  The dead-lettering headers (x-death, x-first-death-*,
x-last-death-*) and x-delivery-count are dropped from the republished message, which carries
`x-replayed-from-archive` = the replay id instead; its message_id and other properties are kept.
"""

from __future__ import annotations

import datetime as dt
import uuid
from pathlib import Path

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from . import dlq_report

LEDGER_DIR = "_replayed"
_DEATH_HEADERS = ("x-death", "x-first-death-reason", "x-first-death-queue",
                  "x-first-death-exchange", "x-last-death-reason", "x-last-death-queue",
                  "x-last-death-exchange", "x-delivery-count")

# The row's identity in the archive: the connector offset is unique per archive checkpoint, and
# the consumption time and message key make it unique across re-created checkpoints too.
_ROW_ID = F.sha2(F.concat_ws("|", F.col("queue"), F.col("seq").cast("string"),
                             F.col("consumed_at").cast("string"), F.col("message_key")), 256)
_FIRST_DEATH = F.expr("element_at(filter(coalesce(x_death, array()), "
                      "d -> d.queue = x_first_death_queue AND d.reason = x_first_death_reason), 1)")


def ledger_path(archive: str) -> str:
    return archive.rstrip("/") + "/" + LEDGER_DIR


def _replayed_ids(spark, archive: str) -> DataFrame | None:
    path = ledger_path(archive)
    if "://" not in path and not Path(path).exists():
        return None
    try:
        return spark.read.parquet(path).select("row_id").distinct()
    except Exception as exc:  # an empty or missing ledger on remote storage
        if "PATH_NOT_FOUND" in str(exc) or "UNABLE_TO_INFER_SCHEMA" in str(exc):
            return None
        raise


def select(spark, archive: str, *, reasons=(), queues=(), since=None, until=None,
           message_ids=(), exchange: str | None = None, routing_key: str | None = None) -> DataFrame:
    """Archived rows to replay, not replayed before, with their target exchange and routing key."""
    df = dlq_report.prepare(spark.read.parquet(archive), since, until).withColumn("row_id", _ROW_ID)
    if reasons:
        df = df.filter(F.col("x_first_death_reason").isin(list(reasons)))
    if queues:
        df = df.filter(F.col("x_first_death_queue").isin(list(queues)))
    if message_ids:
        df = df.filter(F.col("properties.message_id").isin(list(message_ids)))
    done = _replayed_ids(spark, archive)
    if done is not None:
        df = df.join(done, "row_id", "left_anti")
    first = _FIRST_DEATH
    original_exchange = F.coalesce(first.getField("exchange"), F.col("x_first_death_exchange"))
    original_key = F.coalesce(F.element_at(first.getField("routing_keys"), 1), F.col("routing_key"))
    df = df.withColumn("target_exchange",
                       F.lit(exchange) if exchange is not None else F.coalesce(original_exchange, F.lit("")))
    df = df.withColumn("target_routing_key",
                       F.lit(routing_key) if routing_key is not None else F.coalesce(original_key, F.lit("")))
    return df.dropDuplicates(["row_id"])


def to_messages(selected: DataFrame, replay_id: str) -> DataFrame:
    """The sink's input columns: body, exchange, routing_key, headers, properties, message_id."""
    kept = F.map_filter("headers", lambda k, _v: ~k.isin(list(_DEATH_HEADERS)))
    headers = F.map_concat(kept, F.create_map(F.lit("x-replayed-from-archive"), F.lit(replay_id)))
    return selected.select(
        "body", F.col("target_exchange").alias("exchange"),
        F.col("target_routing_key").alias("routing_key"), headers.alias("headers"),
        "properties",
        F.col("properties.message_id").alias("message_id"))


def preview(selected: DataFrame, limit: int = 1000) -> list[dict]:
    rows = (selected.orderBy("event_time", "row_id")
            .select("message_key", F.col("x_first_death_reason").alias("reason"),
                    F.col("x_first_death_queue").alias("origin_queue"), "event_time",
                    F.col("target_exchange").alias("exchange"),
                    F.col("target_routing_key").alias("routing_key"))
            .limit(limit).collect())
    return [r.asDict() for r in rows]


def replay(spark, url: str, archive: str, *, dry_run: bool = False, progress=None,
           **filters) -> dict:
    """Select, publish with confirms, record.  Returns counts and the replay id."""
    replay_id = f"replay-{dt.datetime.now(dt.timezone.utc):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:8]}"
    selected = select(spark, archive, **filters).persist()
    try:
        count = selected.count()
        if progress:
            progress(f"{count} dead letters selected")
        if dry_run or count == 0:
            return {"replay_id": replay_id, "selected": count, "replayed": 0,
                    "rows": preview(selected)}
        (to_messages(selected, replay_id).write.format("amqp").option("url", url)
         .option("messageId", "none").mode("append").save())
        if progress:
            progress(f"{count} republished with confirms; recording them in {ledger_path(archive)}")
        (selected.select("row_id", F.lit(replay_id).alias("replay_id"),
                         F.current_timestamp().alias("replayed_at"),
                         F.col("target_exchange").alias("exchange"),
                         F.col("target_routing_key").alias("routing_key"), "message_key")
         .coalesce(1).write.mode("append").parquet(ledger_path(archive)))
        return {"replay_id": replay_id, "selected": count, "replayed": count,
                "rows": preview(selected)}
    finally:
        selected.unpersist()
