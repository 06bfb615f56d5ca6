"""Slow-path method codec: pamqp for every method that is not on the per-message hot path.

pamqp decodes without checking that strings and tables fit in the frame (it validates only
when building a frame), so `decode_method` first walks the argument layout with bounds checks.
Called by connection.py.
"""

from __future__ import annotations

import struct

from pamqp import commands, frame

from .replies import FRAME_ERROR, NOT_IMPLEMENTED, ProtocolError

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


def _check_args(layout: tuple[str, ...], data: bytes, pos: int) -> None:
    """Raise ValueError unless every argument of `layout` fits in `data` from `pos`."""
    n = len(data)
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
            pos += 4 + _I.unpack_from(data, pos)[0]
        else:
            pos += _FIXED[kind]
        if pos > n:
            raise ValueError("truncated")


def decode_method(mid: int, payload: bytes):
    """Decode a method payload (id included) into a pamqp command object.

    Unknown class/method -> 540; arguments that do not fit or do not decode -> 501.
    """
    cls = commands.INDEX_MAPPING.get(mid)
    if cls is None:
        raise ProtocolError(
            NOT_IMPLEMENTED, f"unknown method {mid >> 16}.{mid & 0xFFFF}", mid >> 16, mid & 0xFFFF
        )
    try:
        _check_args(_layout(cls), payload, 4)
        method = cls()
        method.unmarshal(payload[4:])
    except Exception:  # pamqp raises struct.error, ValueError, TypeError, KeyError...
        raise ProtocolError(
            FRAME_ERROR, cannot_decode(payload[4:]), mid >> 16, mid & 0xFFFF
        ) from None
    return method


def encode_method(channel: int, method) -> bytes:
    """One method frame via pamqp (validates the arguments; ValueError/TypeError if bad)."""
    return frame.marshal(method, channel)
