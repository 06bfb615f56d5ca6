"""Hypothesis strategies of AMQP client byte streams for fuzzing: a protocol header and a
handshake (good, or broken in a few ways), then well-formed methods, contents whose parts may
be missing, lie about their size or come on another channel, random frames and mutated frames.

Used by tests/protocol/test_fuzz.py (in process, on the sans-IO connection) and
tests/hardening/test_fuzz_live.py (over TCP, against a real broker).
"""

from __future__ import annotations

import struct

from hypothesis import strategies as st
from pamqp import commands as C
from pamqp import frame as pframe

HEADER = b"AMQP\x00\x00\x09\x01"
SHARED_QUEUES = ("fz.a", "fz.b")  # a live test declares them with a length limit
QUEUE_ARGS = {"x-max-length": 20}


def _handshake(channel_max: int = 16, frame_max: int = 131072, heartbeat: int = 0) -> bytes:
    """start-ok, tune-ok, open: sent ahead, without waiting for the server's frames (the
    protocol layer buffers what comes while a login or open is being answered)."""
    return (pframe.marshal(C.Connection.StartOk(
                client_properties={"product": "fuzz", "capabilities": {
                    "connection.blocked": True, "authentication_failure_close": True}},
                mechanism="PLAIN", response="\0guest\0guest"), 0) +
            pframe.marshal(C.Connection.TuneOk(channel_max, frame_max, heartbeat), 0) +
            pframe.marshal(C.Connection.Open("/"), 0))


def _raw(ftype: int, channel: int, payload: bytes, end: int = 0xCE) -> bytes:
    return struct.pack(">BHI", ftype, channel, len(payload)) + payload + bytes([end])


channels = st.sampled_from([0, 1, 1, 1, 2, 3, 65535])
queue_names = st.sampled_from(["", *SHARED_QUEUES, "fz.missing", "amq.bad"])
tags = st.integers(0, 20) | st.integers(0, 2**63 - 1)
shortstrs = st.text(max_size=10)


def _declare(q: str, passive: bool):
    return C.Queue.Declare(queue=q, exclusive=q == "", passive=passive,
                           arguments=QUEUE_ARGS if q in SHARED_QUEUES else {})


routing_keys = st.sampled_from(["", "fz.a", "fz.b", "x.y"])
methods = st.one_of(
    st.just(C.Channel.Open()),
    st.just(C.Channel.Close(200, "bye", 0, 0)),
    st.just(C.Channel.CloseOk()),
    st.builds(C.Channel.Flow, active=st.booleans()),
    st.builds(C.Basic.Qos, prefetch_count=st.integers(0, 5), global_=st.booleans()),
    st.builds(C.Basic.Consume, queue=queue_names,
              consumer_tag=st.sampled_from(["", "c1", "c2"]), no_ack=st.booleans(),
              exclusive=st.booleans()),
    st.builds(C.Basic.Cancel, consumer_tag=st.sampled_from(["c1", "c2", "nope"])),
    st.builds(_declare, queue_names, st.booleans()),
    st.builds(C.Queue.Declare, queue=st.just(""), exclusive=st.just(True),
              arguments=st.dictionaries(
                  st.sampled_from(["x-max-length", "x-message-ttl", "x-expires", "x-bogus"]),
                  st.integers(-5, 100) | shortstrs, max_size=2)),
    st.builds(C.Queue.Bind, queue=queue_names,
              exchange=st.sampled_from(["amq.topic", "fz.x", "nope"]), routing_key=routing_keys),
    st.builds(C.Queue.Purge, queue=queue_names),
    st.builds(C.Queue.Delete, queue=st.sampled_from(["", "fz.missing"])),
    st.builds(C.Exchange.Declare, exchange=st.just("fz.x"), auto_delete=st.just(True),
              exchange_type=st.sampled_from(["topic", "direct", "fanout", "headers"])),
    st.builds(C.Exchange.Delete, exchange=st.sampled_from(["fz.x", "amq.direct", "nope"])),
    st.builds(C.Basic.Get, queue=queue_names, no_ack=st.booleans()),
    st.builds(C.Basic.Ack, delivery_tag=tags, multiple=st.booleans()),
    st.builds(C.Basic.Nack, delivery_tag=tags, multiple=st.booleans(), requeue=st.booleans()),
    st.builds(C.Basic.Reject, delivery_tag=tags, requeue=st.booleans()),
    st.builds(C.Basic.Recover, requeue=st.booleans()),
    st.sampled_from([C.Confirm.Select(), C.Tx.Select(), C.Tx.Commit(), C.Tx.Rollback(),
                     C.Connection.Close(200, "bye", 0, 0)]),
)


@st.composite
def method_frames(draw) -> bytes:
    return pframe.marshal(draw(methods), draw(channels))


@st.composite
def publishes(draw) -> bytes:
    """basic.publish, a content header (properties mostly valid, the size mostly honest) and
    body frames: each part may be missing, lie or come on another channel."""
    ch = draw(channels)
    props = draw(st.sampled_from([
        C.Basic.Properties(),
        C.Basic.Properties(delivery_mode=2, headers={"CC": ["fz.b"], "n": 1}),
        C.Basic.Properties(expiration=draw(st.sampled_from(["0", "10", "-1", "x"]))),
        C.Basic.Properties(user_id=draw(st.sampled_from(["guest", "other"])), priority=3),
    ])).marshal()
    body = draw(st.binary(max_size=300))
    declared = draw(st.sampled_from([len(body)] * 4 + [0, len(body) + 5, 1 << 62]))
    out = pframe.marshal(C.Basic.Publish(
        exchange=draw(st.sampled_from(["", "amq.topic", "fz.x", "nope"])),
        routing_key=draw(st.sampled_from(["fz.a", "fz.b", "x.y", "fz.missing"])),
        mandatory=draw(st.booleans()), immediate=draw(st.booleans()) and draw(st.booleans())),
        ch)
    if draw(st.integers(0, 9)):
        out += _raw(2, draw(st.sampled_from([ch, ch, ch, 2])),
                    struct.pack(">HHQ", draw(st.sampled_from([60, 60, 60, 50])), 0, declared) +
                    props)
    if body and draw(st.integers(0, 9)):
        cut = draw(st.integers(0, len(body)))
        out += _raw(3, ch, body[:cut]) + (_raw(3, ch, body[cut:]) if cut < len(body) else b"")
    return out


@st.composite
def random_frames(draw) -> bytes:
    return _raw(draw(st.sampled_from([1, 2, 3, 8, 0, 4, 9, 206])), draw(channels),
                draw(st.binary(max_size=40)), draw(st.sampled_from([0xCE] * 6 + [0, 0xFF])))


@st.composite
def mutated(draw) -> bytes:
    data = bytearray(draw(method_frames() | publishes()))
    if draw(st.booleans()):
        i = draw(st.integers(0, len(data) - 1))
        data[i] = draw(st.integers(0, 255))
    else:
        data = data[:draw(st.integers(0, len(data)))]
    return bytes(data)


@st.composite
def sessions(draw) -> bytes:
    start = draw(st.sampled_from(["ok"] * 8 + ["no-open", "bad-login", "bad-tune", "garbage"]))
    if start == "ok":
        prefix = HEADER + _handshake() + pframe.marshal(C.Channel.Open(), 1)
    elif start == "no-open":
        prefix = HEADER
    elif start == "bad-login":
        prefix = HEADER + pframe.marshal(C.Connection.StartOk(
            client_properties={}, mechanism="PLAIN", response="\0guest\0wrong"), 0)
    elif start == "bad-tune":
        prefix = HEADER + _handshake(channel_max=0, frame_max=1000)
    else:
        prefix = draw(st.binary(min_size=1, max_size=12))
    parts = draw(st.lists(method_frames() | publishes() | random_frames() | mutated(),
                          max_size=12))
    return prefix + b"".join(parts)
