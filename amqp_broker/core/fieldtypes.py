"""AMQP field-table values as pamqp decodes them: type names and RabbitMQ-style equality.

pamqp turns a field table into plain Python values (str, int, bool, float, Decimal, datetime,
bytes, list, dict, None for void). RabbitMQ compares header values with Erlang ``==``, which
ignores the numeric type (1 == 1.0) but never equates a boolean with a number; and its error
texts name AMQP types ("longstr", "long", ...). This module supplies both for the routing core
(headers exchange, equivalence errors) and the policy validation.
"""

from __future__ import annotations

import datetime
import decimal
from typing import Any, Mapping

__all__ = ["Long", "describe_value", "type_name", "values_equal"]


class Long(int):
    """An int that RabbitMQ sends as a signed 64-bit ``l`` field (e.g. x-death ``count``).

    pamqp encodes any int with the smallest type that fits (``b`` for 1); Java clients (and
    Spring AMQP's ``(Long) death.get("count")``) expect ``l``. pamqp still encodes a ``Long``
    as a plain int; an encoder that checks ``type(v) is Long`` can emit ``l``.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return f"Long({int(self)})"


def type_name(value: Any) -> str:
    """The AMQP field type RabbitMQ names for a decoded value (in its error texts): a ``str``
    or ``bytes`` (pamqp leaves a non-UTF-8 long string as bytes) is a longstr, a ``bytearray``
    the 'x' byte array; anything unknown is a binary."""
    if value is None:
        return "void"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "long"
    if isinstance(value, float):
        return "double"
    if isinstance(value, decimal.Decimal):
        return "decimal"
    if isinstance(value, (str, bytes)):
        return "longstr"
    if isinstance(value, (bytearray, memoryview)):
        return "bytearray"
    if isinstance(value, datetime.datetime):
        return "timestamp"
    if isinstance(value, Mapping):
        return "table"
    if isinstance(value, (list, tuple)):
        return "array"
    return "binary"


def describe_value(value: Any) -> str:
    """rabbit_misc:val/1 as in "received ... but current is ...": "none", or
    "the value 'V' of type 'T'"."""
    if value is None:
        return "none"
    return f"the value '{value}' of type '{type_name(value)}'"


def values_equal(a: Any, b: Any) -> bool:
    """Erlang ``==`` on decoded field values.

    Numbers compare by value across int/float/Decimal; booleans equal only booleans; a str and
    a bytes value are both binaries in RabbitMQ, so they compare by UTF-8 bytes.
    """
    if type(a) is type(b) and not isinstance(a, (list, tuple, dict)):
        return a == b
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (str, bytes, bytearray)) and isinstance(b, (str, bytes, bytearray)):
        return _as_bytes(a) == _as_bytes(b)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(values_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(values_equal(a[k], b[k]) for k in a)
    if isinstance(a, (int, float, decimal.Decimal)) and isinstance(b, (int, float, decimal.Decimal)):
        return a == b
    return a == b


def _as_bytes(v: str | bytes | bytearray) -> bytes:
    return v.encode("utf-8") if isinstance(v, str) else bytes(v)
