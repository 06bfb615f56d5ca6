"""The dead-letter report queries over the archive (SPARK.md 6.3), as Spark DataFrames.

Called by `dlq.py` (the `amqp-broker-dlq report` command).  Built-in DataFrame functions only, no
Python UDFs, so a cluster run needs nothing beyond pyspark.  Each function returns a small
DataFrame that the caller collects and renders with `dlq_output.py`.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

# The x-death entry written when the message first died: its `time` dates the dead lettering.
_FIRST_DEATH_TIME = F.expr(
    "element_at(filter(coalesce(x_death, array()), "
    "d -> d.queue = x_first_death_queue AND d.reason = x_first_death_reason), 1).time")
# 256 bytes of the body: as text when they are valid UTF-8, else base64 (prefixed so it shows).
_BODY_PREVIEW = F.expr(
    "CASE WHEN is_valid_utf8(substring(body, 1, 256)) THEN decode(substring(body, 1, 256), 'UTF-8') "
    "ELSE concat('base64:', base64(substring(body, 1, 256))) END")
_TOTAL_DEATHS = F.expr("aggregate(coalesce(x_death, array()), 0L, (a, d) -> a + coalesce(d.count, 0L))")


def prepare(archive: DataFrame, since: str | None = None, until: str | None = None) -> DataFrame:
    """Add `event_time` (first death, else consumption time) and `message_key`; filter the window."""
    df = (archive
          .withColumn("event_time", F.coalesce(_FIRST_DEATH_TIME, F.col("consumed_at")))
          .withColumn("message_key", F.coalesce(F.col("properties.message_id"),
                                                F.sha2(F.col("body"), 256)))
          .withColumn("total_deaths", _TOTAL_DEATHS))
    if since:
        df = df.filter(F.col("event_time") >= F.to_timestamp(F.lit(since)))
    if until:
        df = df.filter(F.col("event_time") < F.to_timestamp(F.lit(until)))
    return df


def over_time(df: DataFrame, bucket: str) -> DataFrame:
    """Dead letters per time bucket and (reason, queue, exchange)."""
    return (df.groupBy(F.window("event_time", bucket).alias("w"),
                       F.col("x_first_death_reason").alias("reason"),
                       F.col("x_first_death_queue").alias("queue"),
                       F.col("x_first_death_exchange").alias("exchange"))
            .agg(F.count(F.lit(1)).alias("dead_letters"),
                 F.countDistinct("message_key").alias("distinct_messages"))
            .select(F.col("w.start").alias("bucket_start"), "reason", "queue", "exchange",
                    "dead_letters", "distinct_messages")
            .orderBy("bucket_start", "reason", "queue", "exchange"))


def totals(df: DataFrame) -> DataFrame:
    """Reason x origin-queue totals with their share of all dead letters in the window."""
    # the grand total as a one-row join, not a window over one partition (Spark warns on that)
    grand = df.agg(F.count(F.lit(1)).alias("grand_total"))
    return (df.groupBy(F.col("x_first_death_reason").alias("reason"),
                       F.col("x_first_death_queue").alias("queue"))
            .agg(F.count(F.lit(1)).alias("dead_letters"),
                 F.countDistinct("message_key").alias("distinct_messages"))
            .crossJoin(grand)
            .withColumn("share", F.round(F.col("dead_letters") / F.col("grand_total"), 4))
            .drop("grand_total")
            .orderBy(F.desc("dead_letters"), "reason", "queue"))


def top_poison(df: DataFrame, top: int) -> DataFrame:
    """Messages dead-lettered most: by delivery count, then total dead-letterings."""
    return (df.groupBy("message_key")
            .agg(F.max("delivery_count").alias("max_delivery_count"),
                 F.max("total_deaths").alias("total_deaths"),
                 F.count(F.lit(1)).alias("times_archived"),
                 F.min("event_time").alias("first_seen"),
                 F.max("event_time").alias("last_seen"),
                 F.first("x_first_death_queue", ignorenulls=True).alias("origin_queue"),
                 F.first("x_first_death_reason", ignorenulls=True).alias("reason"),
                 F.first(_BODY_PREVIEW, ignorenulls=True).alias("body_preview"))
            .orderBy(F.desc_nulls_last("max_delivery_count"), F.desc("total_deaths"),
                     F.desc("times_archived"), "message_key")
            .limit(top))


def build(archive: DataFrame, *, since=None, until=None, bucket: str = "1 hour", top: int = 20) -> dict:
    """All three tables, collected as lists of plain dicts (they are small)."""
    df = prepare(archive, since, until).cache()
    try:
        return {
            "over_time": [r.asDict() for r in over_time(df, bucket).collect()],
            "totals": [r.asDict() for r in totals(df).collect()],
            "top_poison": [r.asDict() for r in top_poison(df, top).collect()],
        }
    finally:
        df.unpersist()
