"""Turn one sink input row into an AMQP message to publish (SPARK.md 5.4).

Pure (no pyspark import, no I/O).  Called by the sink's `write()` on executors, row by row; it only
duck-types the Row (`asDict`, attributes) so tests can pass plain dicts.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterator
from typing import Any

from .options import SinkOptions
from .rows import PROPERTY_FIELDS


@dataclasses.dataclass(frozen=True, slots=True)
class Outgoing:
    exchange: str
    routing_key: str
    body: bytes
    properties: dict  # keyword arguments for pika.BasicProperties


def deterministic_id(query_id: str, batch_id: int | str, partition_id: int, row_index: int) -> str:
    """Same input row, same id, on every retry or re-run of the batch: consumers dedupe on it."""
    return id_prefix(query_id, batch_id, partition_id) + str(row_index)


def id_prefix(query_id: str, batch_id: int | str, partition_id: int) -> str:
    """What the deterministic ids of one partition's rows share: the row index follows."""
    return f"{query_id}:{batch_id}:{partition_id}:"


def _as_dict(value: Any) -> dict:
    if value is None:
        return {}
    if isinstance(value, dict):
        return value
    as_dict = getattr(value, "asDict", None)
    if as_dict is not None:
        return as_dict()
    return dict(value)


def _body(value: Any) -> bytes:
    if value is None:
        return b""
    if isinstance(value, str):
        return value.encode("utf-8")
    return bytes(value)


def _properties(value: Any, opts: SinkOptions) -> dict:
    given = _as_dict(value)
    if not given:  # no properties column: the usual sink input
        return {"delivery_mode": opts.delivery_mode}
    props: dict = {}
    for name in PROPERTY_FIELDS:
        item = given.get(name)
        if item is None:
            continue
        if name == "timestamp" and isinstance(item, dt.datetime):
            item = int(item.timestamp())  # AMQP timestamps are whole seconds
        props[name] = item
    props.setdefault("delivery_mode", opts.delivery_mode)
    return props


def body_messages(bodies: list, opts: SinkOptions, ids: str | None, first: int) -> Iterator[Outgoing]:
    """The sink's usual input, a lone `body` column: what `to_message` makes of each row, without
    a dict per row. `ids` is the deterministic id prefix (`id_prefix`) or None, `first` the
    partition's index of the first body."""
    exchange, routing_key, mode = opts.exchange, opts.routing_key, opts.delivery_mode
    for index, value in enumerate(bodies, first):
        body = value.encode("utf-8") if type(value) is str else _body(value)
        props = {"delivery_mode": mode} if ids is None else {"delivery_mode": mode,
                                                             "message_id": ids + str(index)}
        yield Outgoing(exchange, routing_key, body, props)


def to_message(row: Any, opts: SinkOptions, message_id: str | None) -> Outgoing:
    """`message_id` is the deterministic id, or None to keep the input column (messageId=none)."""
    fields = _as_dict(row)
    if "body" not in fields:
        raise ValueError("the amqp sink needs a 'body' column")
    props = _properties(fields.get("properties"), opts)
    headers = fields.get("headers")
    if headers:
        props["headers"] = {str(k): v for k, v in dict(headers).items()}
    if message_id is not None:
        props["message_id"] = message_id
    elif fields.get("message_id") is not None:
        props["message_id"] = str(fields["message_id"])
    exchange = fields.get("exchange")
    routing_key = fields.get("routing_key")
    return Outgoing(
        exchange=opts.exchange if exchange is None else str(exchange),
        routing_key=opts.routing_key if routing_key is None else str(routing_key),
        body=_body(fields.get("body")),
        properties=props,
    )
