"""A tiny AMQP client-side encoder/decoder on pamqp, used as the peer in protocol tests.

Tests feed bytes built here into a `ServerConnection` and parse what it writes back.
"""

from __future__ import annotations

from pamqp import body as pbody
from pamqp import commands as c
from pamqp import frame, header

from amqp_broker.protocol import ProtocolConfig, ServerConnection

HEADER = b"AMQP\x00\x00\x09\x01"


def method(channel: int, m) -> bytes:
    return frame.marshal(m, channel)


def raw_frame(ftype: int, channel: int, payload: bytes, end: int = 0xCE) -> bytes:
    return bytes([ftype]) + channel.to_bytes(2, "big") + len(payload).to_bytes(4, "big") + \
        payload + bytes([end])


def content(channel: int, body: bytes, props: c.Basic.Properties | None = None,
            frame_max: int = 131072) -> bytes:
    out = frame.marshal(header.ContentHeader(0, len(body), props or c.Basic.Properties()),
                        channel)
    step = frame_max - 8
    for i in range(0, len(body), step):
        out += frame.marshal(pbody.ContentBody(body[i : i + step]), channel)
    return out


def publish(channel: int, body: bytes, exchange: str = "", routing_key: str = "q",
            props: c.Basic.Properties | None = None, mandatory: bool = False,
            frame_max: int = 131072) -> bytes:
    return method(channel, c.Basic.Publish(exchange=exchange, routing_key=routing_key,
                                           mandatory=mandatory)) + \
        content(channel, body, props, frame_max)


def parse(data: bytes) -> list[tuple[int, object]]:
    """Split server output into (channel, pamqp frame object) pairs."""
    frames = []
    while data:
        if data.startswith(b"AMQP"):
            frames.append((0, "protocol-header"))
            data = data[8:]
            continue
        used, channel, obj = frame.unmarshal(data)
        frames.append((channel, obj))
        data = data[used:]
    return frames


def start_ok(capabilities: dict | None = None, mechanism: str = "PLAIN",
             response: str | bytes = "\x00guest\x00guest") -> bytes:
    props = {"product": "test", "capabilities": capabilities or {}}
    if isinstance(response, bytes):  # pamqp wants str; the tests only use ASCII bytes
        response = response.decode("ascii")
    return method(0, c.Connection.StartOk(client_properties=props, mechanism=mechanism,
                                          response=response))


def server(**config) -> ServerConnection:
    return ServerConnection(ProtocolConfig(**config))


def to_login(conn: ServerConnection, **kw) -> ServerConnection:
    """Drive a fresh connection up to the LoginRequest."""
    conn.feed(HEADER + start_ok(**kw))
    conn.data_to_send()
    conn.next_events()
    return conn


def opened(channel_max: int = 2047, frame_max: int = 131072, heartbeat: int = 60,
           channels: tuple[int, ...] = (1,), **config) -> ServerConnection:
    """A connection through the whole handshake with `channels` opened; output drained."""
    conn = to_login(server(**config))
    conn.accept_login()
    conn.feed(method(0, c.Connection.TuneOk(channel_max, frame_max, heartbeat)) +
              method(0, c.Connection.Open("/")))
    conn.accept_open()
    for ch in channels:
        conn.feed(method(ch, c.Channel.Open()))
    conn.data_to_send()
    conn.next_events()
    return conn


def close_of(conn: ServerConnection):
    """The connection.close the server wrote (asserts there is exactly one)."""
    closes = [f for _ch, f in parse(conn.data_to_send()) if isinstance(f, c.Connection.Close)]
    assert len(closes) == 1, closes
    return closes[0]
