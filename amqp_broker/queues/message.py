"""The immutable message and the per-queue entry that wraps it.

Who uses it: the server's channel code builds one `Message` per basic.publish (`Message.from_publish`)
and hands the same object to every queue the router picked, so the body `bytes` is shared, never
copied. Queues wrap it in an `Entry` (their own msg id, redelivered flag, expiry deadline). The
journal (`amqp_broker/store/journal.py`) persists messages and rebuilds them on recovery.

Only the three properties the queue needs (delivery-mode, priority, expiration) are parsed at publish
time, by walking the raw property section with `struct` and skipping the fields in front of them.
The headers table is decoded lazily, only when something (dead-lettering, headers exchange) asks.
"""

from __future__ import annotations

import struct
from typing import Any

__all__ = ["Message", "Entry", "parse_basic_properties"]

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")

# basic.properties flag bits, in wire order (bit 15 first).
_F_CONTENT_TYPE = 1 << 15
_F_CONTENT_ENCODING = 1 << 14
_F_HEADERS = 1 << 13
_F_DELIVERY_MODE = 1 << 12
_F_PRIORITY = 1 << 11
_F_CORRELATION_ID = 1 << 10
_F_REPLY_TO = 1 << 9
_F_EXPIRATION = 1 << 8


def parse_basic_properties(raw: bytes) -> tuple[bool, int, int | None, int]:
    """Peek (persistent, priority, expiration_ms, headers_offset) from a raw property section.

    `raw` starts with the 16-bit property flags. `expiration_ms` is None when absent or not a
    non-negative integer string (the channel validates and rejects bad values before this).
    `headers_offset` is the index of the headers table's length prefix, or -1 when absent.
    Cost: a handful of struct reads; nothing is decoded that the queue does not need.
    """
    try:
        return _parse(raw)
    except (IndexError, struct.error):
        # malformed section: the protocol layer rejects these; never crash a queue on them
        return False, 0, None, -1


def _parse(raw: bytes) -> tuple[bool, int, int | None, int]:
    if len(raw) < 2:
        return False, 0, None, -1
    (flags,) = _U16.unpack_from(raw, 0)
    pos = 2
    if flags & _F_CONTENT_TYPE:
        pos += 1 + raw[pos]
    if flags & _F_CONTENT_ENCODING:
        pos += 1 + raw[pos]
    headers_offset = -1
    if flags & _F_HEADERS:
        headers_offset = pos
        pos += 4 + _U32.unpack_from(raw, pos)[0]
    persistent = False
    if flags & _F_DELIVERY_MODE:
        persistent = raw[pos] == 2
        pos += 1
    priority = 0
    if flags & _F_PRIORITY:
        priority = raw[pos]
        pos += 1
    if not flags & _F_EXPIRATION:
        return persistent, priority, None, headers_offset
    if flags & _F_CORRELATION_ID:
        pos += 1 + raw[pos]
    if flags & _F_REPLY_TO:
        pos += 1 + raw[pos]
    n = raw[pos]
    text = raw[pos + 1 : pos + 1 + n]
    expiration = int(text) if text.isdigit() else _signed_expiration(text)
    if expiration is not None and expiration > MAX_EXPIRATION_MS:
        expiration = None  # refused by the channel: {value_too_large,N}
    return persistent, priority, expiration, headers_offset


MAX_EXPIRATION_MS = 315_360_000_000  # ten years: RabbitMQ 3.10 refuses larger per-message TTLs


def _signed_expiration(text: bytes) -> int | None:
    # Erlang's string:to_integer takes a sign: "+1" and "-0" are valid TTLs for RabbitMQ.
    if text[:1] in (b"+", b"-") and text[1:].isdigit():
        value = int(text)
        return value if value >= 0 else None
    return None


class Message:
    """One published message, immutable and shared by every queue it was routed to.

    `properties` is the raw content-header property section (flags + fields) exactly as the
    publisher sent it; it is forwarded untouched on delivery. `persistent`, `priority` and
    `expiration_ms` are parsed from it once. `size` is the body length (what x-max-length-bytes
    counts, as RabbitMQ does).
    """

    __slots__ = (
        "exchange", "routing_key", "properties", "body",
        "persistent", "priority", "expiration_ms", "headers_offset", "_headers",
    )

    exchange: str
    routing_key: str
    properties: bytes
    body: bytes
    persistent: bool
    priority: int
    expiration_ms: int | None
    headers_offset: int  # where the headers table starts in `properties`; -1: no headers

    def __init__(
        self,
        exchange: str,
        routing_key: str,
        properties: bytes,
        body: bytes,
        persistent: bool = False,
        priority: int = 0,
        expiration_ms: int | None = None,
        headers_offset: int = -1,
    ) -> None:
        self.exchange = exchange
        self.routing_key = routing_key
        self.properties = properties
        self.body = body
        self.persistent = persistent
        self.priority = priority
        self.expiration_ms = expiration_ms
        self.headers_offset = headers_offset
        self._headers: dict[str, Any] | None = None

    @classmethod
    def from_publish(
        cls, exchange: str, routing_key: str, properties: bytes, body: bytes
    ) -> "Message":
        """Build a message from a basic.publish, parsing only what queues need."""
        persistent, priority, expiration, hoff = parse_basic_properties(properties)
        return cls(exchange, routing_key, properties, body, persistent, priority, expiration, hoff)

    @property
    def size(self) -> int:
        return len(self.body)

    @property
    def headers(self) -> dict[str, Any]:
        """The headers table, decoded on first access (empty dict when absent)."""
        if self._headers is None:
            if self.headers_offset < 0:
                self._headers = {}
            else:
                from pamqp import decode  # lazy: only dead-lettering/headers routing need it

                _, table = decode.field_table(self.properties[self.headers_offset :])
                self._headers = dict(table)
        return self._headers

    def route_with_headers(self, headers: dict[str, Any]) -> None:
        """Make routing see `headers` rather than the table in `properties`. For BCC stripping
        (`server.channel`): the delivered copy loses BCC, routing still needs its keys. Call
        only on a new message, before it is shared."""
        self._headers = headers

    def __repr__(self) -> str:
        return (
            f"Message({self.exchange!r}, {self.routing_key!r}, body={len(self.body)}B, "
            f"persistent={self.persistent}, priority={self.priority})"
        )


class Entry:
    """A message's place in one queue.

    `msg_id` is unique and increasing per queue (publish order), which is what requeue uses to put
    a message back at its original position. `expires_at` is an absolute ms deadline or None;
    a message is expired when `now_ms > expires_at`, so a TTL of 0 still reaches a consumer that is
    ready at publish time, as in RabbitMQ. `delivery_count` counts deliveries (classic queues only
    use it to set `redelivered`).
    """

    __slots__ = ("msg_id", "message", "redelivered", "delivery_count", "expires_at")

    def __init__(
        self,
        msg_id: int,
        message: Message,
        expires_at: int | None = None,
        redelivered: bool = False,
        delivery_count: int = 0,
    ) -> None:
        self.msg_id = msg_id
        self.message = message
        self.expires_at = expires_at
        self.redelivered = redelivered
        self.delivery_count = delivery_count

    def __repr__(self) -> str:
        return f"Entry({self.msg_id}, redelivered={self.redelivered}, {self.message!r})"
