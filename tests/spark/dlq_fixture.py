"""A small dead-letter archive with known answers, written with pyarrow (fast, no JVM).

Used by the S8 report test.  Same columns as the source's row schema plus the `dt` partition
directory that `amqp-broker-dlq archive` writes.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

UTC = dt.timezone.utc
DAY = dt.datetime(2026, 11, 1, tzinfo=UTC)

# (message_id, reason, queue, death hour, x_death count, delivery_count, times archived)
MESSAGES = [
    *[(f"order-{i}", "rejected", "orders", 10, 1, None, 1) for i in range(4)],
    ("order-dup", "rejected", "orders", 10, 1, None, 2),       # archived twice (redelivery)
    *[(f"pay-{i}", "expired", "payments", 11, 1, None, 1) for i in range(3)],
    ("big-1", "maxlen", "orders", 11, 1, None, 1),
    ("poison-1", "delivery_limit", "orders", 12, 3, 25, 1),    # the worst one
    ("poison-2", "delivery_limit", "orders", 12, 1, 21, 1),
]
EXPECTED_TOTAL_ROWS = sum(m[-1] for m in MESSAGES)            # 12
EXPECTED = {("rejected", "orders"): (6, 5), ("expired", "payments"): (3, 3),
            ("maxlen", "orders"): (1, 1), ("delivery_limit", "orders"): (2, 2)}


def _schema():
    import pyarrow as pa
    ts = pa.timestamp("us", tz="UTC")
    props = pa.struct([("content_type", pa.string()), ("content_encoding", pa.string()),
                       ("delivery_mode", pa.int32()), ("priority", pa.int32()),
                       ("correlation_id", pa.string()), ("reply_to", pa.string()),
                       ("expiration", pa.string()), ("message_id", pa.string()), ("timestamp", ts),
                       ("type", pa.string()), ("user_id", pa.string()), ("app_id", pa.string())])
    death = pa.struct([("queue", pa.string()), ("reason", pa.string()), ("exchange", pa.string()),
                       ("routing_keys", pa.list_(pa.string())), ("count", pa.int64()), ("time", ts),
                       ("original_expiration", pa.string())])
    return pa.schema([
        ("seq", pa.int64()), ("queue", pa.string()), ("body", pa.binary()), ("exchange", pa.string()),
        ("routing_key", pa.string()), ("redelivered", pa.bool_()), ("delivery_tag", pa.int64()),
        ("delivery_count", pa.int32()), ("headers", pa.map_(pa.string(), pa.string())),
        ("properties", props), ("x_death", pa.list_(death)),
        ("x_first_death_reason", pa.string()), ("x_first_death_queue", pa.string()),
        ("x_first_death_exchange", pa.string()), ("x_last_death_reason", pa.string()),
        ("x_last_death_queue", pa.string()), ("x_last_death_exchange", pa.string()),
        ("consumed_at", ts)])


def rows() -> list[dict]:
    out, seq = [], 0
    for mid, reason, queue, hour, count, dcount, times in MESSAGES:
        died = DAY.replace(hour=hour, minute=5)
        for copy in range(times):
            seq += 1
            out.append({
                "seq": seq, "queue": "dlq.analytics", "body": f"payload of {mid}".encode(),
                "exchange": "dlx", "routing_key": queue, "redelivered": copy > 0, "delivery_tag": seq,
                "delivery_count": dcount, "headers": [("x-first-death-reason", reason)],
                "properties": {"message_id": mid, "delivery_mode": 2},
                "x_death": [{"queue": queue, "reason": reason, "exchange": "", "routing_keys": [queue],
                             "count": count, "time": died, "original_expiration": None}],
                "x_first_death_reason": reason, "x_first_death_queue": queue,
                "x_first_death_exchange": "", "x_last_death_reason": None,
                "x_last_death_queue": None, "x_last_death_exchange": None,
                "consumed_at": died + dt.timedelta(minutes=30 + copy),
            })
    return out


def write_archive(path: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq
    table = pa.Table.from_pylist(rows(), schema=_schema())
    part = path / f"dt={DAY.date().isoformat()}"
    part.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, part / "part-00000.parquet")
    return path
