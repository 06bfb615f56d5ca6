"""Turn one AMQP delivery into a row of the source's schema (SPARK.md 5.3).

Pure (no pyspark, no I/O, no clock: `consumed_at` is passed in).  Called by the driver-side consumer
in `consumer.py` when a delivery arrives, and by the batch reader in `batch.py`.  The typed AMQP
field table (pika's decoded headers) is parsed directly; the stringified `headers` map is only for
display and filtering.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from typing import Any

SCHEMA_DDL = (
    "seq LONG, queue STRING, body BINARY, exchange STRING, routing_key STRING, "
    "redelivered BOOLEAN, delivery_tag LONG, delivery_count INT, headers MAP<STRING, STRING>, "
    "properties STRUCT<content_type: STRING, content_encoding: STRING, delivery_mode: INT, "
    "priority: INT, correlation_id: STRING, reply_to: STRING, expiration: STRING, "
    "message_id: STRING, timestamp: TIMESTAMP, type: STRING, user_id: STRING, app_id: STRING>, "
    "x_death ARRAY<STRUCT<queue: STRING, reason: STRING, exchange: STRING, "
    "routing_keys: ARRAY<STRING>, count: LONG, time: TIMESTAMP, original_expiration: STRING>>, "
    "x_first_death_reason STRING, x_first_death_queue STRING, x_first_death_exchange STRING, "
    "x_last_death_reason STRING, x_last_death_queue STRING, x_last_death_exchange STRING, "
    "consumed_at TIMESTAMP"
)

COLUMNS = ("seq", "queue", "body", "exchange", "routing_key", "redelivered", "delivery_tag",
           "delivery_count", "headers", "properties", "x_death", "x_first_death_reason",
           "x_first_death_queue", "x_first_death_exchange", "x_last_death_reason",
           "x_last_death_queue", "x_last_death_exchange", "consumed_at")

PROPERTY_FIELDS = ("content_type", "content_encoding", "delivery_mode", "priority", "correlation_id",
                   "reply_to", "expiration", "message_id", "timestamp", "type", "user_id", "app_id")
_INT_PROPERTIES = ("delivery_mode", "priority")


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", errors="replace")
    return str(value)


def _json_default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return {"base64": base64.b64encode(raw).decode("ascii")}
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    return str(value)


def header_text(value: Any) -> str | None:
    """Header value for the `map<string,string>` column: scalars as text, tables/arrays as JSON."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, default=_json_default, sort_keys=True, separators=(",", ":"))
    if isinstance(value, dt.datetime):
        return _utc(value).isoformat()
    return _text(value)


def headers_map(headers: dict | None) -> dict[str, str | None]:
    return {str(k): header_text(v) for k, v in (headers or {}).items()}


def _utc(value: dt.datetime) -> dt.datetime:
    # pika decodes AMQP timestamps as naive UTC datetimes.
    return value.replace(tzinfo=dt.timezone.utc) if value.tzinfo is None else value


def _timestamp(value: Any) -> dt.datetime | None:
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        return _utc(value)
    if isinstance(value, (int, float)):  # basic.properties timestamp: seconds since the epoch
        return dt.datetime.fromtimestamp(value, tz=dt.timezone.utc)
    return None


def _int_or_none(value: Any) -> int | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def properties_struct(props: Any) -> tuple:
    """basic.properties (any object with pika's attribute names) -> the `properties` struct."""
    values = []
    for name in PROPERTY_FIELDS:
        value = getattr(props, name, None) if props is not None else None
        if name in _INT_PROPERTIES:
            values.append(_int_or_none(value))
        elif name == "timestamp":
            values.append(_timestamp(value))
        else:
            values.append(_text(value))
    return tuple(values)


def _death_entry(entry: Any) -> tuple | None:
    if not isinstance(entry, dict):
        return None
    keys = entry.get("routing-keys")
    routing_keys = [_text(k) for k in keys] if isinstance(keys, (list, tuple)) else None
    return (
        _text(entry.get("queue")),
        _text(entry.get("reason")),
        _text(entry.get("exchange")),
        routing_keys,
        _int_or_none(entry.get("count")),
        _timestamp(entry.get("time")),
        _text(entry.get("original-expiration")),
    )


def x_death(headers: dict | None) -> list[tuple] | None:
    """The typed `x-death` array, or None when the message was never dead-lettered."""
    raw = (headers or {}).get("x-death")
    if not isinstance(raw, (list, tuple)):
        return None
    entries = [_death_entry(e) for e in raw]
    return [e for e in entries if e is not None]


def delivery_count(headers: dict | None) -> int | None:
    return _int_or_none((headers or {}).get("x-delivery-count"))


_DEATH_HEADERS = ("x-first-death-reason", "x-first-death-queue", "x-first-death-exchange",
                  "x-last-death-reason", "x-last-death-queue", "x-last-death-exchange")
_NO_DEATHS = (None,) * len(_DEATH_HEADERS)


def property_columns(properties: Any) -> tuple:
    """The columns that a delivery's basic.properties alone decide, in `COLUMNS` order
    (`delivery_count` through `x_last_death_exchange`).  Equal properties give equal columns, so
    the source's consumer works them out once per distinct content header."""
    headers = getattr(properties, "headers", None)
    if headers:
        count, mapped, death = delivery_count(headers), headers_map(headers), x_death(headers)
        deaths = tuple(_text(headers.get(name)) for name in _DEATH_HEADERS)
    else:  # the usual message: nothing to work out
        count, mapped, death, deaths = None, {}, None, _NO_DEATHS
    return (count, mapped, properties_struct(properties), death, *deaths)


def ledger_columns(columns: tuple) -> tuple:
    """`property_columns` as the source's ledger keeps them: `headers` as a tuple of (key, value)
    pairs and `x_death` as tuples, not a dict and lists.  A tuple of atomic values is one that
    Python's garbage collector stops tracking, and the ledger holds up to a prefetch window of
    rows: tracked, every full collection walked all of them (a fifth of the runner's time)."""
    count, mapped, struct, death, *deaths = columns
    if death is not None:
        death = tuple(entry[:3] + (None if entry[3] is None else tuple(entry[3]),) + entry[4:]
                      for entry in death)
    return (count, tuple(mapped.items()), struct, death, *deaths)


def make_row(*, seq: int, queue: str, body: bytes | None, exchange: str, routing_key: str,
             redelivered: bool, delivery_tag: int, properties: Any,
             consumed_at: dt.datetime) -> tuple:
    """One row in `COLUMNS` order.  `body=None` when includeBody=false."""
    return (seq, queue, body, exchange, routing_key, bool(redelivered), delivery_tag,
            *property_columns(properties), _utc(consumed_at))


def row_bytes(body: bytes | None) -> int:
    """Approximate size of a delivery's row, for maxBytesPerBatch."""
    return (len(body) if body else 0) + 256
