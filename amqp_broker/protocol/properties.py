"""Basic content properties kept as raw bytes, with cheap peeks and full decode on demand.

A `Publish` event carries `properties`: the property section of the content header (16-bit
flag word(s) followed by the present fields) exactly as the client sent it, so the broker can
forward it to consumers untouched. Routing and queues call the `peek_*` helpers to read the one
field they need (delivery_mode, priority, expiration, ...) without building a pamqp object;
dead-lettering and the management API call `decode_properties` / `encode_properties`.

Used by: connection.py (`check_properties` on every publish), server/, queues/, dlx/.
"""

from __future__ import annotations

import datetime
import struct
from typing import Any

from pamqp import commands, decode, encode

from amqp_broker.core.fieldtypes import Long

from .tables import check_table

__all__ = [
    "decode_properties",
    "encode_properties",
    "check_properties",
    "peek",
    "peek_delivery_mode",
    "peek_priority",
    "peek_expiration",
    "peek_headers",
    "peek_user_id",
    "peek_message_id",
    "peek_timestamp",
    "peek_reply_to",
    "peek_correlation_id",
    "EMPTY_PROPERTIES",
]

_Props = commands.Basic.Properties

# The 14 basic properties in wire order: (name, flag bit, kind). Kinds: s=shortstr, t=table,
# o=octet, T=timestamp (64-bit). Bit 0 of a flag word means "another flag word follows".
_FIELDS: tuple[tuple[str, int, str], ...] = (
    ("content_type", 0x8000, "s"),
    ("content_encoding", 0x4000, "s"),
    ("headers", 0x2000, "t"),
    ("delivery_mode", 0x1000, "o"),
    ("priority", 0x0800, "o"),
    ("correlation_id", 0x0400, "s"),
    ("reply_to", 0x0200, "s"),
    ("expiration", 0x0100, "s"),
    ("message_id", 0x0080, "s"),
    ("timestamp", 0x0040, "T"),
    ("message_type", 0x0020, "s"),
    ("user_id", 0x0010, "s"),
    ("app_id", 0x0008, "s"),
    ("cluster_id", 0x0004, "s"),
)
_INDEX = {name: i for i, (name, _flag, _kind) in enumerate(_FIELDS)}
_H = struct.Struct(">H")
_I = struct.Struct(">I")
_q = struct.Struct(">q")

#: The property section with no property set (one zero flag word).
EMPTY_PROPERTIES = b"\x00\x00"


def _flags(raw: bytes) -> tuple[int, int]:
    """Return (first flag word, offset of the first field). Extra flag words must be empty."""
    if len(raw) < 2:
        raise ValueError("content header flags are truncated")
    flags = _H.unpack_from(raw, 0)[0]
    pos = 2
    word = flags
    while word & 1:
        if len(raw) < pos + 2:
            raise ValueError("content header flags are truncated")
        word = _H.unpack_from(raw, pos)[0]
        pos += 2
        if word & 0xFFFE:
            raise ValueError("unknown property flags")
    return flags, pos


def _skip(raw: bytes, pos: int, kind: str) -> int:
    """Offset just after the field of `kind` starting at `pos`; ValueError if it overruns."""
    if kind == "s":
        if pos >= len(raw):
            raise ValueError("property truncated")
        end = pos + 1 + raw[pos]
    elif kind == "t":
        if pos + 4 > len(raw):
            raise ValueError("property truncated")
        end = pos + 4 + _I.unpack_from(raw, pos)[0]
    elif kind == "o":
        end = pos + 1
    else:
        end = pos + 8
    if end > len(raw):
        raise ValueError("property truncated")
    return end


def check_properties(raw: bytes) -> None:
    """Check that the field lengths of a property section add up; ValueError if not.

    Cost: one step per present field, no decoding; the headers table is walked field by field
    (`tables.check_table`: lengths, nesting; TableTooDeep if too deep). Called for every
    publish so that a malformed header is a connection error at once, not a crash later.
    """
    if raw == EMPTY_PROPERTIES:
        return
    flags, pos = _flags(raw)
    kinds = _kinds.get(flags)
    if kinds is None:
        kinds = _kinds[flags] = tuple(kind for _n, flag, kind in _FIELDS if flags & flag)
    n = len(raw)
    for kind in kinds:
        if kind == "o":
            pos += 1
        elif kind == "s":
            if pos >= n:
                raise ValueError("property truncated")
            pos += 1 + raw[pos]
        elif kind == "t":
            pos = check_table(raw, pos)  # lengths and nesting (tables.py)
        else:
            pos += 8
    if pos != n:
        raise ValueError("property lengths do not add up")


# flag word -> kinds of the present fields, in wire order (filled lazily; at most 2**15 keys).
_kinds: dict[int, tuple[str, ...]] = {}


def _locate(raw: bytes, name: str) -> int:
    """Offset of field `name` in `raw`, or -1 when its flag is not set."""
    flags, pos = _flags(raw)
    target = _INDEX[name]
    for i in range(target):
        field_name, flag, kind = _FIELDS[i]
        if flags & flag:
            pos = _skip(raw, pos, kind)
    return pos if flags & _FIELDS[target][1] else -1


def peek(raw: bytes, name: str) -> Any:
    """Decode one property (pamqp's attribute name, e.g. "delivery_mode"); None if absent."""
    pos = _locate(raw, name)
    if pos < 0:
        return None
    kind = _FIELDS[_INDEX[name]][2]
    if kind == "s":  # bytes that are not UTF-8 compare unequal, never raise (user_id, expiration)
        return raw[pos + 1 : pos + 1 + raw[pos]].decode("utf-8", "replace")
    if kind == "o":
        return raw[pos]
    if kind == "t":
        return decode.field_table(raw[pos:])[1]
    return decode.timestamp(raw[pos : pos + 8])[1]


def peek_delivery_mode(raw: bytes) -> int | None:
    """delivery_mode (2 = persistent). Fast: no field before it except content type/encoding
    and headers, which are skipped by length."""
    return peek(raw, "delivery_mode")


def peek_priority(raw: bytes) -> int | None:
    return peek(raw, "priority")


def peek_expiration(raw: bytes) -> str | None:
    return peek(raw, "expiration")


def peek_headers(raw: bytes) -> dict | None:
    """The headers table, fully decoded by pamqp (costs a few microseconds)."""
    return peek(raw, "headers")


def peek_user_id(raw: bytes) -> str | None:
    return peek(raw, "user_id")


def peek_message_id(raw: bytes) -> str | None:
    return peek(raw, "message_id")


def peek_timestamp(raw: bytes) -> datetime.datetime | None:
    return peek(raw, "timestamp")


def peek_reply_to(raw: bytes) -> str | None:
    return peek(raw, "reply_to")


def peek_correlation_id(raw: bytes) -> str | None:
    return peek(raw, "correlation_id")


def decode_properties(raw: bytes) -> _Props:
    """Full decode into pamqp's Basic.Properties (slow path, ~5-20 us)."""
    flags, pos = _flags(raw)
    props = _Props()
    props.unmarshal(flags, raw[pos:])
    return props


def encode_properties(props: _Props) -> bytes:
    """Encode pamqp Basic.Properties into a raw property section (pamqp's encoding).

    Header values of type `Long` (core.fieldtypes), at any depth, go out as ``l`` (signed
    64-bit) as RabbitMQ sends them, e.g. x-death ``count``: pamqp would pick the smallest
    integer type and Java clients cast the value to Long."""
    headers = props.headers
    if not headers or not _has_long(headers):
        return props.marshal()
    # pamqp encodes everything but the headers; the table is spliced in at its place
    # (after content_type and content_encoding, the only fields before it).
    props.headers = None
    try:
        raw = props.marshal()
    finally:
        props.headers = headers
    flags, pos = _flags(raw)
    for _name, flag, kind in _FIELDS[:2]:
        if flags & flag:
            pos = _skip(raw, pos, kind)
    return (_H.pack(flags | 0x2000) + raw[2:pos] + _encode_table(headers) + raw[pos:])


def append_headers(raw: bytes, entries: dict) -> bytes:
    """`raw` with `entries` added to its headers table (made if absent), without decoding
    anything: the caller knows none of the keys is in the table already. ~2 us; used for
    every publish to a partitioned queue (queues/partitioned.py)."""
    data = b"".join(encode.short_string(k) + _encode_value(v) for k, v in entries.items())
    pos = _locate(raw, "headers")
    if pos < 0:
        flags, pos = _flags(raw)
        for _name, flag, kind in _FIELDS[:2]:
            if flags & flag:
                pos = _skip(raw, pos, kind)
        return _H.pack(flags | 0x2000) + raw[2:pos] + _I.pack(len(data)) + data + raw[pos:]
    size = _I.unpack_from(raw, pos)[0]
    end = pos + 4 + size
    return raw[:pos] + _I.pack(size + len(data)) + raw[pos + 4:end] + data + raw[end:]


def _has_long(value: Any) -> bool:
    if type(value) is Long:
        return True
    if isinstance(value, dict):
        return any(_has_long(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_long(v) for v in value)
    return False


def _encode_value(value: Any) -> bytes:
    if type(value) is Long:
        return b"l" + _q.pack(value)
    if isinstance(value, dict):
        return b"F" + _encode_table(value)
    if isinstance(value, list):
        data = b"".join(_encode_value(v) for v in value)
        return b"A" + _I.pack(len(data)) + data
    return encode.encode_table_value(value)


def _encode_table(table: dict) -> bytes:
    # Keys in insertion order, as RabbitMQ keeps them.
    data = b"".join(encode.short_string(k) + _encode_value(v) for k, v in table.items())
    return _I.pack(len(data)) + data
