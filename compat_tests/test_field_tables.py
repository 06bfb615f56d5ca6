"""Message headers (AMQP field tables) survive the broker: every value type pika and aio-pika can
send comes back equal, and the content-header bytes themselves pass through unchanged, so type
codes a client chose (RabbitMQ's table types: b B s u I i l f d D S A T F V x t) are never
re-encoded."""

import datetime
import decimal
import struct

import aio_pika
import pika
from pamqp import commands

from compat_tests.support import get_n
from compat_tests.support.raw import RawClient

_UTC = datetime.timezone.utc


def test_pika_header_value_types_round_trip(conn, names):
    ch = conn.channel()
    ch.confirm_delivery()
    q = names.queue()
    ch.queue_declare(q)
    headers = {
        "int": 1, "neg": -5, "big": 2 ** 40, "str": "s", "unicode": "héllo", "empty": "",
        "bytes": b"\x00\x01", "true": True, "false": False, "none": None,
        "list": [1, "a", [2]], "emptylist": [], "dict": {"k": {"n": 1}},
        "dec": decimal.Decimal("1.25"), "ts": datetime.datetime(2024, 1, 2, 3, 4, 5),
    }
    ch.basic_publish("", q, b"x", pika.BasicProperties(headers=headers))
    (_, props, _), = get_n(ch, q, 1)
    got = dict(props.headers)
    # pika decodes timestamps as aware UTC datetimes.
    assert got.pop("ts") == headers["ts"].replace(tzinfo=_UTC)
    assert got == {k: v for k, v in headers.items() if k != "ts"}


def test_aio_pika_header_value_types_round_trip(aio, names):
    q = names.queue()
    headers = {"float": 1.5, "int": 7, "neg": -2 ** 40, "false": False, "list": [1.5, "x"],
               "ts": datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=_UTC), "nested": {"a": [1, {"b": "c"}]}}

    async def body(conn):
        ch = await conn.channel()
        queue = await ch.declare_queue(q)
        await ch.default_exchange.publish(aio_pika.Message(b"y", headers=headers), routing_key=q)
        msg = await queue.get(no_ack=True)
        return dict(msg.headers)

    got = aio(body)
    assert got == headers


def _table(entries: list[tuple[bytes, bytes, bytes]]) -> bytes:
    raw = b"".join(bytes([len(k)]) + k + t + v for k, t, v in entries)
    return struct.pack(">I", len(raw)) + raw


_ODD_TYPES = [
    (b"b8", b"b", b"\xfe"),                          # signed 8-bit
    (b"B8", b"B", b"\xfe"),                          # unsigned 8-bit
    (b"s16", b"s", b"\xff\xfe"),                     # signed 16-bit (RabbitMQ's 's', not shortstr)
    (b"u16", b"u", b"\xff\xfe"),                     # unsigned 16-bit
    (b"i32", b"i", b"\xff\xff\xff\xfe"),             # unsigned 32-bit
    (b"l64", b"l", b"\x80" + b"\x00" * 7),           # signed 64-bit
    (b"f32", b"f", struct.pack(">f", 2.5)),
    (b"d64", b"d", struct.pack(">d", -0.125)),
    (b"dec", b"D", b"\x02\x00\x00\x00\x7d"),         # 1.25
    (b"ts", b"T", struct.pack(">Q", 1700000000)),
    (b"bin", b"x", b"\x00\x00\x00\x03\x00\xff\x01"),
    (b"void", b"V", b""),
    (b"arr", b"A", b"\x00\x00\x00\x04" + b"b\x01b\x02"),
]


def test_content_header_bytes_pass_through_unchanged(broker_url, names):
    q = names.queue()
    table = _table(_ODD_TYPES)
    body = b"bytes"
    # class 60, weight 0, body size, property flags: headers only (bit 13).
    header_payload = struct.pack(">HHQH", 60, 0, len(body), 0x2000) + table
    with RawClient(broker_url) as raw:
        raw.handshake()
        raw.open_channel(1)
        raw.send(1, commands.Queue.Declare(queue=q))
        raw.read_method(commands.Queue.DeclareOk)
        raw.send(1, commands.Confirm.Select())
        raw.read_method(commands.Confirm.SelectOk)
        raw.send(1, commands.Basic.Publish(exchange="", routing_key=q))
        raw.send_raw(struct.pack(">BHI", 2, 1, len(header_payload)) + header_payload + b"\xce")
        raw.send_raw(struct.pack(">BHI", 3, 1, len(body)) + body + b"\xce")
        raw.read_method(commands.Basic.Ack)
        raw.send(1, commands.Basic.Get(queue=q, no_ack=True))
        raw.read_method(commands.Basic.GetOk)
        kind, channel, payload = raw.read_raw_frame()
        assert (kind, channel) == (2, 1)
        assert payload == header_payload
        kind, _, got_body = raw.read_raw_frame()
        assert (kind, got_body) == (3, body)
