"""Compact log encoding of fifo commands: `encode_command(cmd) -> bytes` and
`decode_command(bytes) -> cmd`, used by the quorum adapter when proposing and by the
Raft driver when applying.

Format: a msgpack array `[tag, field1, field2, ...]` in dataclass field order; tags are
fixed forever once a log format ships (append new commands at the end, never reuse).
An Enqueue of a 1 KiB payload costs 1 KiB + about 10 bytes.
"""
from __future__ import annotations

from dataclasses import fields

import msgspec

from .commands import (Cancel, Checkout, Command, ConsumerDown, ConsumerKey, Credit, Dequeue,
                       Discard, DlxSettle, Enqueue, NodeDown, NodeUp, Purge, QueueConfig,
                       Requeue, Return, Settle, Tick, Unsent, UpdateConfig)

__all__ = ["encode_command", "encode_enqueue", "decode_command"]

_TAGS: list[type] = [Enqueue, Checkout, Dequeue, Settle, Return, Requeue, Discard, Credit,
                     Cancel, ConsumerDown, NodeDown, NodeUp, Purge, Tick, UpdateConfig,
                     DlxSettle, Unsent]
_TAG_OF = {cls: i for i, cls in enumerate(_TAGS)}
_FIELDS = {cls: tuple(f.name for f in fields(cls)) for cls in _TAGS}
_CONFIG_FIELDS = tuple(f.name for f in fields(QueueConfig))

_enc = msgspec.msgpack.Encoder()
_dec = msgspec.msgpack.Decoder()


def _wire(v):
    if isinstance(v, QueueConfig):
        return [getattr(v, n) for n in _CONFIG_FIELDS]
    return v          # ConsumerKey (a tuple) and tuples encode as arrays


def _unwire(name: str, v):
    if name == "consumer":
        return ConsumerKey(*v)
    if name in ("msg_ids", "dlx_ids"):
        return tuple(v)
    if name == "config":
        return QueueConfig(*v)
    return v


def encode_command(cmd: Command) -> bytes:
    cls = type(cmd)
    if cls is Enqueue:      # hot path: no reflection
        return _enc.encode((0, cmd.publisher, cmd.seq, cmd.size, cmd.payload, cmd.priority,
                            cmd.ttl, cmd.persistent, cmd.partition))
    return _enc.encode([_TAG_OF[cls], *(_wire(getattr(cmd, n)) for n in _FIELDS[cls])])


def encode_enqueue(publisher, seq, size, payload: tuple[bytes, ...], priority, ttl, persistent,
                   partition) -> bytes:
    """`encode_command(Enqueue(publisher, seq, size, b"".join(payload), ...))`, with the payload
    given as pieces and copied once, into the result (a large message body is not joined into
    a payload first and then copied again into the command)."""
    n = sum(map(len, payload))
    head = _enc.encode((0, publisher, seq, size))
    binary = (b"\xc4" + bytes((n,)) if n < 256 else b"\xc5" + n.to_bytes(2, "big")
              if n < 65536 else b"\xc6" + n.to_bytes(4, "big"))
    tail = _enc.encode((priority, ttl, persistent, partition))
    # msgpack: `encode_command`'s 9-array [0, publisher, seq, size, payload, priority, ttl,
    # persistent, partition]: the fields before and after the payload are encoded as arrays
    # of four, whose array headers are dropped
    return b"".join((b"\x99", memoryview(head)[1:], binary, *payload, memoryview(tail)[1:]))


def decode_command(data: bytes) -> Command:
    w = _dec.decode(data)
    tag = w[0]
    if tag == 0:
        return Enqueue(*w[1:])
    cls = _TAGS[tag]
    names = _FIELDS[cls]
    return cls(*(_unwire(n, v) for n, v in zip(names, w[1:])))
