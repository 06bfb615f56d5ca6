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

__all__ = ["encode_command", "decode_command"]

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


def decode_command(data: bytes) -> Command:
    w = _dec.decode(data)
    tag = w[0]
    if tag == 0:
        return Enqueue(*w[1:])
    cls = _TAGS[tag]
    names = _FIELDS[cls]
    return cls(*(_unwire(n, v) for n, v in zip(names, w[1:])))
