"""Slow-path method codec: pamqp for every method that is not on the per-message hot path.

pamqp decodes without checking that strings and tables fit in the frame (it validates only
when building a frame), so `decode_method` first walks the argument layout with bounds checks,
and every field table through `tables.check_table` (lengths inside their table, nesting depth).
Called by connection.py.
"""

from __future__ import annotations

import struct

from pamqp import commands, frame

from amqp_broker.core.fieldtypes import WIRE_INTS

from .replies import FRAME_ERROR, NOT_IMPLEMENTED, SYNTAX_ERROR, ProtocolError
from .tables import TableTooDeep, check_table

__all__ = ["decode_method", "encode_method", "method_id", "SERVER_ONLY", "cannot_decode"]

_I = struct.Struct(">I")
_FIXED = {"octet": 1, "short": 2, "long": 4, "longlong": 8, "timestamp": 8}
_layouts: dict[type, tuple[str, ...]] = {}

# Methods only a server sends; a client sending one gets 503 (RabbitMQ: "unimplemented method").
SERVER_ONLY = frozenset(
    cls.index
    for cls in (
        commands.Channel.OpenOk, commands.Basic.QosOk, commands.Basic.ConsumeOk,
        commands.Basic.Deliver, commands.Basic.GetOk, commands.Basic.GetEmpty,
        commands.Basic.Return, commands.Basic.RecoverOk, commands.Queue.DeclareOk,
        commands.Queue.BindOk, commands.Queue.UnbindOk, commands.Queue.PurgeOk,
        commands.Queue.DeleteOk, commands.Exchange.DeclareOk, commands.Exchange.DeleteOk,
        commands.Exchange.BindOk, commands.Exchange.UnbindOk, commands.Tx.SelectOk,
        commands.Tx.CommitOk, commands.Tx.RollbackOk, commands.Confirm.SelectOk,
    )
)


def method_id(payload: bytes) -> int:
    """The 32-bit class/method id at the start of a method payload."""
    if len(payload) < 4:
        raise ProtocolError(FRAME_ERROR, cannot_decode(payload))
    return _I.unpack_from(payload, 0)[0]


def cannot_decode(data: bytes) -> str:
    """RabbitMQ-style detail text, e.g. "cannot decode <<0,1>>" (first 16 octets)."""
    shown = ",".join(str(b) for b in data[:16])
    more = ",..." if len(data) > 16 else ""
    return f"cannot decode <<{shown}{more}>>"


def _layout(cls: type) -> tuple[str, ...]:
    layout = _layouts.get(cls)
    if layout is None:
        layout = _layouts[cls] = tuple(cls.amqp_type(a) for a in cls.__slots__)
    return layout


def _check_args(layout: tuple[str, ...], data: bytes, pos: int) -> int | None:
    """Raise ValueError unless every argument of `layout` fits in `data` from `pos`; return
    where the (last) field table starts, if the method has one."""
    n = len(data)
    table = None
    bits = 0  # bits used in the current bit octet; 0 = no octet open
    for kind in layout:
        if kind == "bit":
            if bits == 0 or bits == 8:
                pos += 1
                bits = 0
            bits += 1
            if pos > n:
                raise ValueError("bits truncated")
            continue
        bits = 0
        if kind == "shortstr":
            if pos >= n:
                raise ValueError("truncated")
            pos += 1 + data[pos]
        elif kind in ("longstr", "table"):
            if pos + 4 > n:
                raise ValueError("truncated")
            if kind == "table":
                table = pos
                pos = check_table(data, pos)
            else:
                pos += 4 + _I.unpack_from(data, pos)[0]
        else:
            pos += _FIXED[kind]
        if pos > n:
            raise ValueError("truncated")
    return table


# Sizes of the field values `_keep_int_types` steps over; an unknown type stops the walk.
_VALUE_SIZE = {ord(t): n for t, n in (("t", 1), ("b", 1), ("B", 1), ("s", 2), ("u", 2),
                                       ("I", 4), ("i", 4), ("l", 8), ("L", 8), ("f", 4),
                                       ("d", 8), ("D", 5), ("T", 8), ("V", 0))}
_PREFIXED = frozenset(map(ord, "SxFA"))  # a 32-bit length, then that many octets


def _keep_int_types(data: bytes, table: int, arguments: dict) -> None:
    """Re-type the top-level integer arguments with the wire type the client used (pamqp
    decodes b/s/I/l... all to int; RabbitMQ's inequivalent-arg texts name the type)."""
    end = table + 4 + _I.unpack_from(data, table)[0]
    pos = table + 4
    while pos < end:
        klen = data[pos]
        key = data[pos + 1:pos + 1 + klen].decode("utf-8", "replace")
        pos += 1 + klen
        tag = data[pos]
        pos += 1
        cls = WIRE_INTS.get(tag)
        value = arguments.get(key)
        if cls is not None and type(value) is int:
            arguments[key] = cls(value)
        if tag in _PREFIXED:
            pos += 4 + _I.unpack_from(data, pos)[0]
        elif tag in _VALUE_SIZE:
            pos += _VALUE_SIZE[tag]
        else:
            return


def decode_method(mid: int, payload: bytes):
    """Decode a method payload (id included) into a pamqp command object.

    Unknown class/method -> 540; arguments that do not fit or do not decode -> 501; field
    tables nested deeper than tables.MAX_DEPTH -> 502.
    """
    cls = commands.INDEX_MAPPING.get(mid)
    if cls is None:
        raise ProtocolError(
            NOT_IMPLEMENTED, f"unknown method {mid >> 16}.{mid & 0xFFFF}", mid >> 16, mid & 0xFFFF
        )
    try:
        table = _check_args(_layout(cls), payload, 4)
    except TableTooDeep as err:
        raise ProtocolError(SYNTAX_ERROR, str(err), mid >> 16, mid & 0xFFFF) from None
    except Exception:  # ValueError, struct.error, IndexError: the layout does not fit
        raise ProtocolError(
            FRAME_ERROR, cannot_decode(payload[4:]), mid >> 16, mid & 0xFFFF
        ) from None
    try:
        method = cls()
        method.unmarshal(payload[4:])
        if cls is commands.Queue.Declare and table is not None and method.arguments:
            _keep_int_types(payload, table, method.arguments)
    except Exception:  # pamqp raises struct.error, ValueError, TypeError, KeyError...
        raise ProtocolError(
            FRAME_ERROR, cannot_decode(payload[4:]), mid >> 16, mid & 0xFFFF
        ) from None
    return method


def encode_method(channel: int, method) -> bytes:
    """One method frame via pamqp (validates the arguments; ValueError/TypeError if bad)."""
    return frame.marshal(method, channel)
