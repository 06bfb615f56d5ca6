"""The bad-input table: one row per thing a client can send wrong, with what comes back.

Each row: what is sent (after `setup`: nothing, the handshake, or the handshake and channel 1
open), the expected reply code, its scope (`channel`: channel.close and the connection lives
on; `connection`: connection.close, then the socket is closed; `silent`: the socket is closed
with no frame; `header`: our protocol header back, then closed; `accepted`: the method's -ok;
`no reply`: nothing within the wait), the reply text's prefix, the class/method ids, and
`timing`: how soon the reply comes, as a wait the row allows (no lower bound is asserted: speed
is not tested here). Runs against this broker and, in CI's RabbitMQ stage, against RabbitMQ 3.10
(`docs/COMPAT.md`). Where the two differ on purpose, the row exists twice: `only="ours"` (our
behaviour, skipped against RabbitMQ) and `only="rabbitmq"` (what RabbitMQ 3.10 does, measured,
skipped against this broker), each with the reason. /work/shared/PROTOCOL-ERRORS.md has the
measured table these rows come from (row numbers in the ids).
"""

from __future__ import annotations

import ssl
import struct
from dataclasses import dataclass
from typing import Callable

import pytest
from pamqp import commands as C
from pamqp import frame as pframe

from compat_tests.support.raw import RawClient

AMQP_0_9_1 = b"AMQP\x00\x00\x09\x01"
MiB = 1024 * 1024

#: Seconds a row waits for its reply (and then for the socket to close), per timing.
WAITS = {"at once": 5.0, "silent-close delay (3 s)": 10.0, "handshake_timeout (10 s)": 20.0,
         "after the whole body": 60.0}


@dataclass(frozen=True)
class Row:
    id: str
    send: Callable[["Ctx"], bytes]
    scope: str
    code: int | None = None
    text: str = ""
    ids: tuple[int, int] | None = None
    timing: str = "at once"
    setup: str = "channel"  # "none" | "handshake" | "channel" | "two channels"
    exact: bool = False  # the text must match whole, not only as a prefix
    only: str = ""  # "ours" / "rabbitmq": an intentional deviation, see `why`
    why: str = ""


@dataclass(frozen=True)
class Ctx:
    max_message_size: int


def raw(ftype: int, channel: int, payload: bytes, end: int = 0xCE) -> bytes:
    return struct.pack(">BHI", ftype, channel, len(payload)) + payload + bytes([end])


def method(channel: int, m) -> bytes:
    return pframe.marshal(m, channel)


def publish_method(channel: int = 1) -> bytes:
    return method(channel, C.Basic.Publish(exchange="", routing_key="compat-nowhere"))


def content_header(channel: int, size: int, props: bytes = b"\x00\x00") -> bytes:
    return raw(2, channel, struct.pack(">HHQ", 60, 0, size) + props)


def body_frames(channel: int, size: int, frame_max: int = 131072) -> bytes:
    step = frame_max - 8
    full = raw(3, channel, b"b" * step)
    out = bytearray(full * (size // step))
    if size % step:
        out += raw(3, channel, b"b" * (size % step))
    return bytes(out)


def nested_table(depth: int) -> bytes:
    inner = b""
    for _ in range(depth - 1):
        inner = b"\x01aF" + struct.pack(">I", len(inner)) + inner
    return struct.pack(">I", len(inner)) + inner


def declare_with_arguments(table: bytes) -> bytes:
    """queue.declare of an exclusive server-named queue with raw argument-table bytes."""
    return raw(1, 1, struct.pack(">HHH", 50, 10, 0) + b"\x00" + b"\x08" + table)


def _tls_client_hello() -> bytes:
    """The first flight of a real TLS client (what an amqps:// client sends to a plain port)."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ssl.create_default_context().wrap_bio(incoming, outgoing, server_hostname="localhost")
    try:
        tls.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


_STRING_PAST_TABLE = b"\x01aS" + struct.pack(">I", 100000) + b"abc"


ROWS = [
    # -- before and during the handshake ------------------------------------------------------
    Row("row01-protocol-header-0-9-2", lambda c: b"AMQP\x00\x00\x09\x02", "header", setup="none"),
    Row("row01-protocol-header-amqp-1.0", lambda c: b"AMQP\x01\x01\x00\x0a", "header",
        setup="none"),
    Row("row02-garbage-header", lambda c: b"HELLO WORLD\r\n", "header", setup="none"),
    Row("row02-http-request", lambda c: b"GET / HTTP/1.1\r\n\r\n", "header", setup="none"),
    Row("row02-tls-client-hello", lambda c: _tls_client_hello(), "header", setup="none"),
    Row("row03-idle-connection", lambda c: b"", "silent", timing="handshake_timeout (10 s)",
        setup="none"),
    # -- framing ------------------------------------------------------------------------------
    Row("row10-oversized-frame", lambda c: struct.pack(">BHI", 1, 0, 200_000) + b"\x00" * 64,
        "connection", 501, "FRAME_ERROR - type 1, all octets = <<>>: "
        "{frame_too_large,200000,131064}", (0, 0), exact=True, setup="handshake"),
    Row("row11-bad-frame-end", lambda c: raw(1, 1, method(1, C.Channel.Open())[7:-1], end=0),
        "connection", 501, "FRAME_ERROR - type 1, all octets = <<0,20,0,10,1,48>>: "
        "{invalid_frame_end_marker,0}", (0, 0), exact=True, setup="handshake"),
    Row("row12-unknown-frame-type", lambda c: raw(9, 0, b"abcd"), "connection", 501,
        'FRAME_ERROR - type 9, all octets = <<"abcd">>: unknown_frame', (0, 0), exact=True,
        setup="handshake"),
    Row("heartbeat-with-a-payload", lambda c: raw(8, 0, b"ab"), "connection", 501,
        'FRAME_ERROR - type 8, all octets = <<"ab">>: unknown_frame', (0, 0), exact=True,
        setup="handshake"),
    Row("row17-heartbeat-on-a-channel", lambda c: raw(8, 1, b""), "connection", 505,
        "UNEXPECTED_FRAME - type 8, all octets = <<>>", (0, 0), exact=True),
    # -- unknown methods: RabbitMQ's reader crashes ------------------------------------------
    Row("row13-unknown-class", lambda c: raw(1, 1, struct.pack(">HH", 999, 1)), "connection",
        540, "NOT_IMPLEMENTED - unknown method 999.1", (999, 1), exact=True, only="ours",
        why="RabbitMQ 3.10 drops the socket with no close frame (a crash report in its log)"),
    Row("row13-unknown-class-rabbitmq", lambda c: raw(1, 1, struct.pack(">HH", 999, 1)),
        "silent", only="rabbitmq", why="see row13-unknown-class"),
    Row("row13-unknown-method", lambda c: raw(1, 1, struct.pack(">HH", 60, 999)), "connection",
        540, "NOT_IMPLEMENTED - unknown method 60.999", (60, 999), exact=True, only="ours",
        why="RabbitMQ 3.10 drops the socket with no close frame"),
    Row("row13-unknown-method-rabbitmq", lambda c: raw(1, 1, struct.pack(">HH", 60, 999)),
        "silent", only="rabbitmq", why="see row13-unknown-method"),
    # -- content out of place -----------------------------------------------------------------
    Row("row15-content-header-without-publish", lambda c: content_header(1, 0), "connection",
        505, "UNEXPECTED_FRAME - expected method frame, got non method frame instead",
        exact=True),
    Row("row15-body-without-publish", lambda c: raw(3, 1, b"abc"), "connection", 505,
        "UNEXPECTED_FRAME - expected method frame, got non method frame instead", (0, 0),
        exact=True),
    Row("row16-interleaved-bodies", lambda c: publish_method(1) + content_header(1, 3) +
        raw(3, 2, b"abc"), "connection", 505,
        "UNEXPECTED_FRAME - expected method frame, got non method frame instead", (0, 0),
        exact=True, setup="two channels"),
    Row("method-between-header-and-body", lambda c: publish_method(1) + content_header(1, 3) +
        method(1, C.Basic.Qos()), "connection", 505,
        "UNEXPECTED_FRAME - expected content body, got non content body frame instead",
        (60, 40), exact=True),
    Row("second-header-instead-of-body", lambda c: publish_method(1) + content_header(1, 3) +
        content_header(1, 3), "connection", 505,
        "UNEXPECTED_FRAME - expected content body, got non content body frame instead",
        (60, 40), exact=True),
    Row("body-instead-of-header", lambda c: publish_method(1) + raw(3, 1, b"abc"), "connection",
        505, "UNEXPECTED_FRAME - expected content header for class 60, got non content header "
        "frame instead", (60, 40), exact=True),
    # -- channels -----------------------------------------------------------------------------
    Row("row19-second-channel-open", lambda c: method(1, C.Channel.Open()), "connection", 504,
        "CHANNEL_ERROR - second 'channel.open' seen", (20, 10), exact=True),
    Row("row20-method-on-unopened-channel", lambda c: method(3, C.Queue.Declare(
        queue="", exclusive=True)), "connection", 504,
        "CHANNEL_ERROR - expected 'channel.open'", exact=True),
    # -- message size -------------------------------------------------------------------------
    Row("row27-oversized-message-whole-body", lambda c: publish_method(1) +
        content_header(1, c.max_message_size + 1) + body_frames(1, c.max_message_size + 1),
        "channel", 406, "PRECONDITION_FAILED - message size ", (60, 40),
        timing="after the whole body"),
    Row("oversized-message-declared-in-the-header", lambda c: publish_method(1) +
        content_header(1, 1 << 62), "channel", 406,
        f"PRECONDITION_FAILED - message size {1 << 62} is larger than configured max size ",
        (60, 40), only="ours",
        why="refused when the header arrives, the body frames discarded as they come; RabbitMQ "
            "3.10 assembles the body first and refuses it after its last frame, same text"),
    Row("oversized-message-declared-in-the-header-rabbitmq", lambda c: publish_method(1) +
        content_header(1, 1 << 62), "no reply", only="rabbitmq",
        why="see oversized-message-declared-in-the-header"),
    # -- field tables -------------------------------------------------------------------------
    Row("row14-truncated-arguments", lambda c: raw(1, 1, struct.pack(">HHH", 50, 10, 0) +
        b"\x05ab"), "connection", 501, "FRAME_ERROR - cannot decode <<0,0,5,97,98>>", (50, 10),
        exact=True),
    Row("table-length-past-the-frame", lambda c: declare_with_arguments(
        struct.pack(">I", 100000) + b"\x01aSabc"), "connection", 501,
        "FRAME_ERROR - cannot decode <<", (50, 10)),
    Row("string-length-past-its-table", lambda c: declare_with_arguments(
        struct.pack(">I", len(_STRING_PAST_TABLE)) + _STRING_PAST_TABLE), "connection", 501,
        "FRAME_ERROR - cannot decode <<", (50, 10), only="ours",
        why="RabbitMQ 3.10 drops the socket with no close frame"),
    Row("string-length-past-its-table-rabbitmq", lambda c: declare_with_arguments(
        struct.pack(">I", len(_STRING_PAST_TABLE)) + _STRING_PAST_TABLE), "silent",
        only="rabbitmq", why="see string-length-past-its-table"),
    Row("headers-property-length-past-its-table", lambda c: publish_method(1) + content_header(
        1, 0, b"\x20\x00" + struct.pack(">I", len(_STRING_PAST_TABLE)) + _STRING_PAST_TABLE),
        "connection", 501, "FRAME_ERROR - cannot decode content header", only="ours",
        why="RabbitMQ 3.10 fails later, with 541 INTERNAL_ERROR"),
    Row("headers-property-length-past-its-table-rabbitmq", lambda c: publish_method(1) +
        content_header(1, 0, b"\x20\x00" + struct.pack(">I", len(_STRING_PAST_TABLE)) +
                       _STRING_PAST_TABLE) + method(1, C.Basic.Qos()), "connection", 541,
        "INTERNAL_ERROR", only="rabbitmq", why="see headers-property-length-past-its-table"),
    Row("deep-table-in-arguments", lambda c: declare_with_arguments(nested_table(65)),
        "connection", 502, "SYNTAX_ERROR - field tables nested deeper than 64 levels", (50, 10),
        exact=True, only="ours",
        why="RabbitMQ 3.10 accepts any depth (Erlang recursion is unbounded); pamqp and Python "
            "are not, so this broker refuses more than 64 levels"),
    Row("deep-table-in-arguments-rabbitmq", lambda c: declare_with_arguments(nested_table(65)),
        "accepted", only="rabbitmq", why="see deep-table-in-arguments"),
    Row("deep-table-in-headers", lambda c: publish_method(1) + content_header(
        1, 0, b"\x20\x00" + nested_table(5000)), "connection", 502,
        "SYNTAX_ERROR - field tables nested deeper than 64 levels", exact=True, only="ours",
        why="RabbitMQ 3.10 accepts any depth; see deep-table-in-arguments"),
]


def _ctx(server_info) -> Ctx:
    # RabbitMQ 3.10's default max_message_size is 128 MiB; this broker's is 16 MiB (RabbitMQ 4's)
    return Ctx(max_message_size=128 * MiB if server_info.is_rabbitmq3 else 16 * MiB)


def _setup(client: RawClient, setup: str) -> None:
    if setup == "none":
        return
    assert client.handshake().name == "Connection.OpenOk"
    if setup in ("channel", "two channels"):
        client.open_channel(1)
    if setup == "two channels":
        client.open_channel(2)


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_bad_input(row: Row, broker_url, server_info):
    if row.only == "ours" and server_info.is_rabbitmq:
        pytest.skip(f"intentional deviation from RabbitMQ: {row.why}")
    if row.only == "rabbitmq" and not server_info.is_rabbitmq:
        pytest.skip(f"what RabbitMQ 3.10 does instead: {row.why}")
    wait = WAITS[row.timing]
    with RawClient(broker_url, timeout=wait) as client:
        _setup(client, row.setup)
        data = row.send(_ctx(server_info))
        if data:
            client.send_raw(data)
        if row.scope == "header":
            assert client.read_until_eof(timeout=wait) == AMQP_0_9_1 and client.eof
        elif row.scope == "silent":
            assert client.read_until_eof(timeout=wait) == b"" and client.eof
        elif row.scope == "no reply":
            assert client.read_until_eof(timeout=3.0) == b"" and not client.eof
        elif row.scope == "accepted":
            reply = client.read_method()
            assert reply is not None and reply.name.endswith("Ok"), reply
        else:
            reply = client.read_method()
            assert reply is not None, "the socket closed without a close frame"
            kind = C.Channel.Close if row.scope == "channel" else C.Connection.Close
            assert isinstance(reply, kind), reply
            assert reply.reply_code == row.code, reply.reply_text
            if row.exact:
                assert reply.reply_text == row.text
            else:
                assert reply.reply_text.startswith(row.text), reply.reply_text
            if row.ids is not None:
                assert (reply.class_id, reply.method_id) == row.ids
            if row.scope == "channel":
                # Only the channel: after close-ok its number opens again on the same socket.
                client.send(1, C.Channel.CloseOk())
                client.send(1, C.Channel.Open())
                assert isinstance(client.read_method(), C.Channel.OpenOk)
            else:
                client.send(0, C.Connection.CloseOk())
                assert client.read_until_eof(timeout=WAITS["silent-close delay (3 s)"]) == b""
                assert client.eof
