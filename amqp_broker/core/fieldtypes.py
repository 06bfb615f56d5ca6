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

__all__ = ["Long", "WireInt", "WIRE_INTS", "args_equivalent", "describe_mismatch",
           "describe_value", "plain_arguments", "type_name", "values_equal"]


class Long(int):
    """An int that RabbitMQ sends as a signed 64-bit ``l`` field (e.g. x-death ``count``).

    pamqp encodes any int with the smallest type that fits (``b`` for 1); Java clients (and
    Spring AMQP's ``(Long) death.get("count")``) expect ``l``. pamqp still encodes a ``Long``
    as a plain int; an encoder that checks ``type(v) is Long`` can emit ``l``.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return f"Long({int(self)})"


class WireInt(int):
    """An int that remembers the AMQP field type a client sent it as (pamqp's decoder drops
    it): `amqp_type` is RabbitMQ's name for it. Made by the protocol layer for queue.declare
    arguments only, so that equivalence errors name the type as RabbitMQ does; converted back
    to plain ints (`plain_arguments`) before the arguments are stored or reach a queue."""

    __slots__ = ()
    amqp_type = ""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({int(self)})"

    __str__ = int.__repr__  # texts print the number (int's str would use the repr above)


def _wire_int(name: str, amqp_type: str) -> type:
    return type(name, (WireInt,), {"__slots__": (), "amqp_type": amqp_type})


# field-table type octet -> the int class that keeps it (rabbit_binary_parser's names)
WIRE_INTS: dict[int, type] = {
    ord("b"): _wire_int("Byte", "byte"),
    ord("B"): _wire_int("UnsignedByte", "unsignedbyte"),
    ord("s"): _wire_int("Short", "short"),
    ord("u"): _wire_int("UnsignedShort", "unsignedshort"),
    ord("I"): _wire_int("SignedInt", "signedint"),
    ord("i"): _wire_int("UnsignedInt", "unsignedint"),
    ord("l"): _wire_int("WireLong", "long"),
}


def plain_arguments(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """`arguments` with every `WireInt` turned back into a plain int (what is stored)."""
    return {k: int(v) if isinstance(v, WireInt) else v for k, v in arguments.items()}


def type_name(value: Any) -> str:
    """The AMQP field type RabbitMQ names for a decoded value (in its error texts): a ``str``
    or ``bytes`` (pamqp leaves a non-UTF-8 long string as bytes) is a longstr, a ``bytearray``
    the 'x' byte array; anything unknown is a binary.

    pamqp's decoder drops the wire type of integers; queue.declare arguments keep it
    (`WireInt`). Any other int in the signed 32-bit range is named 'signedint' ('I'), a larger
    one (or a `Long`) 'long' ('l'): what pika and the Java client send."""
    if value is None:
        return "void"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, WireInt):
        return value.amqp_type
    if isinstance(value, int):
        return "signedint" if -2**31 <= value < 2**31 and type(value) is not Long else "long"
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
    """rabbit_misc:val/1 of a field that only one side has, as in "received ... but current
    is ...": "none", or "the value 'V' of type 'T'"."""
    if value is None:
        return "none"
    return f"the value '{_erlang_text(value)}' of type '{type_name(value)}'"


def describe_mismatch(received: Any, current: Any) -> str:
    """The tail of RabbitMQ's "inequivalent arg" text: "received '6' but current is '5'" when
    both sides have the field (bare values), else with `describe_value`'s "none" / "the value
    'V' of type 'T'" (rabbit_misc:equivalence_fail). Used for queue and exchange arguments."""
    if received is not None and current is not None:
        return f"received '{_erlang_text(received)}' but current is '{_erlang_text(current)}'"
    return f"received {describe_value(received)} but current is {describe_value(current)}"


def args_equivalent(current: Any, received: Any) -> bool:
    """rabbit_misc:assert_args_equivalence for one key (None = absent): both absent, or the
    same type class (all integer types are one class, float and double another; str and bytes
    are both longstr) and equal values."""
    if current is None or received is None:
        return current is None and received is None
    return _type_class(current) == _type_class(received) and values_equal(current, received)


def _type_class(value: Any) -> str:
    if isinstance(value, (int, decimal.Decimal)) and not isinstance(value, bool):
        return "int"
    return type_name(value)


def _erlang_text(value: Any) -> str:
    """How RabbitMQ's ~ts / ~tp prints a field value in these texts."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    return str(value)


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
