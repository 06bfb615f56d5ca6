"""JSON <-> AMQP conversions for the management API: message properties and payloads for
`/api/exchanges/.../publish` and `/api/queues/.../get`, and field-table values (arguments,
headers) made JSON-safe.

Called by `admin.Admin`. Pure: no trio, no IO.
"""

from __future__ import annotations

import base64
import datetime
import decimal
from typing import Any

from pamqp import commands

from amqp_broker.protocol import decode_properties, encode_properties

from .errors import BadRequest

__all__ = ["jsonable", "properties_to_json", "properties_from_json", "payload_to_json",
           "payload_from_json"]

# JSON name -> pamqp attribute (RabbitMQ calls message_type "type").
_PROPS = {
    "content_type": "content_type", "content_encoding": "content_encoding", "headers": "headers",
    "delivery_mode": "delivery_mode", "priority": "priority", "correlation_id": "correlation_id",
    "reply_to": "reply_to", "expiration": "expiration", "message_id": "message_id",
    "timestamp": "timestamp", "type": "message_type", "user_id": "user_id", "app_id": "app_id",
    "cluster_id": "cluster_id",
}


def jsonable(value: Any) -> Any:
    """A field-table value as JSON: bytes as text, Decimal as number, timestamps as seconds."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, datetime.datetime):
        return int(value.replace(tzinfo=value.tzinfo or datetime.timezone.utc).timestamp())
    return value


def properties_to_json(raw: bytes) -> dict[str, Any]:
    props = decode_properties(raw)
    out: dict[str, Any] = {}
    for name, attr in _PROPS.items():
        value = getattr(props, attr, None)
        if value is not None and not (name == "cluster_id" and not value):
            out[name] = jsonable(value)
    return out


def properties_from_json(props: Any) -> bytes:
    if props is None:
        props = {}
    if not isinstance(props, dict):
        raise BadRequest("properties must be an object")
    kwargs: dict[str, Any] = {}
    for name, value in props.items():
        attr = _PROPS.get(name)
        if attr is None:
            raise BadRequest(f"unknown property '{name}'")
        if attr == "timestamp" and isinstance(value, (int, float)):
            value = datetime.datetime.fromtimestamp(value, datetime.timezone.utc)
        kwargs[attr] = value
    try:
        return encode_properties(commands.Basic.Properties(**kwargs))
    except (TypeError, ValueError) as e:
        raise BadRequest(f"invalid properties: {e}") from None


def payload_from_json(payload: Any, encoding: str) -> bytes:
    if not isinstance(payload, str):
        raise BadRequest("payload must be a string")
    if encoding == "string":
        return payload.encode()
    if encoding == "base64":
        try:
            return base64.b64decode(payload, validate=True)
        except ValueError:
            raise BadRequest("payload is not valid base64") from None
    raise BadRequest(f"unknown payload_encoding '{encoding}'")


def payload_to_json(body: bytes, encoding: str, truncate: int | None) -> tuple[str, str]:
    """(payload, payload_encoding) as RabbitMQ's /get returns them."""
    if truncate is not None:
        body = body[:truncate]
    if encoding == "auto":
        try:
            return body.decode("utf-8"), "string"
        except UnicodeDecodeError:
            pass
    return base64.b64encode(body).decode(), "base64"
