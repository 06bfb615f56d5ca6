"""What a client declares is judged before it is buffered: a content header's body size against
max_message_size (the channel is closed at the header and the body frames that follow are
discarded, never assembled), and field tables' lengths and nesting (`protocol/tables.py`)."""

import struct

from hypothesis import given
from hypothesis import strategies as st
from pamqp import commands as c
from pamqp import encode

from amqp_broker.protocol import ChannelClosed, ChannelFailed, ConnectionClosed, Publish
from amqp_broker.protocol.tables import MAX_DEPTH, TableError, TableTooDeep, check_table

from .peer import close_of, method, opened, parse, publish, raw_frame
from .strategies import SETTINGS, headers

_HUGE = 1 << 62


def _header(channel: int, body_size: int, props: bytes = b"\x00\x00") -> bytes:
    return raw_frame(2, channel, struct.pack(">HHQ", 60, 0, body_size) + props)


def _publish_method(channel: int) -> bytes:
    return method(channel, c.Basic.Publish(routing_key="q"))


def test_declared_body_over_max_message_size_closes_the_channel_at_the_header():
    conn = opened(max_message_size=1000)
    conn.feed(_publish_method(1) + _header(1, _HUGE))
    [failed] = conn.next_events()
    text = f"PRECONDITION_FAILED - message size {_HUGE} is larger than configured max size 1000"
    assert failed == ChannelFailed(1, 406, text, 60, 40)
    [(ch, close)] = parse(conn.data_to_send())
    assert ch == 1 and isinstance(close, c.Channel.Close)
    assert (close.reply_code, close.reply_text, close.class_id, close.method_id) == (
        406, text, 60, 40)


def test_body_frames_after_a_refused_header_are_discarded_as_they_arrive():
    conn = opened(max_message_size=1000, channels=(1, 2))
    conn.feed(_publish_method(1) + _header(1, _HUGE))
    conn.next_events()
    conn.data_to_send()
    chunk = raw_frame(3, 1, b"x" * 131000)
    for _ in range(200):  # 26 MB of body frames: none of it is kept
        conn.feed(chunk)
        assert conn.next_events() == []
        assert len(conn._buf) < 2 * len(chunk)
    assert conn.data_to_send() == b""
    # Other channels carry on meanwhile; the refused one is free again after close-ok.
    conn.feed(publish(2, b"ok"))
    [ev] = conn.next_events()
    assert isinstance(ev, Publish) and ev.body == b"ok"
    conn.feed(method(1, c.Channel.CloseOk()) + method(1, c.Channel.Open()))
    events = conn.next_events()
    assert events[0] == ChannelClosed(1)
    assert not conn.closed


def test_body_at_max_message_size_is_accepted():
    conn = opened(max_message_size=1000)
    conn.feed(publish(1, b"y" * 1000))
    [ev] = conn.next_events()
    assert isinstance(ev, Publish) and len(ev.body) == 1000


def _nested(depth: int) -> bytes:
    """A table holding a table ... `depth` tables in all (the outermost counts)."""
    inner = b""
    for _ in range(depth - 1):
        inner = b"\x01aF" + struct.pack(">I", len(inner)) + inner
    return struct.pack(">I", len(inner)) + inner


def _declare(arguments: bytes) -> bytes:
    payload = struct.pack(">HHH", 50, 10, 0) + b"\x01q" + b"\x00" + arguments
    return raw_frame(1, 1, payload)


def test_declare_arguments_nested_too_deep_is_502():
    conn = opened()
    conn.feed(_declare(_nested(MAX_DEPTH + 1)))
    close = close_of(conn)
    assert (close.reply_code, close.class_id, close.method_id) == (502, 50, 10)
    assert close.reply_text == f"SYNTAX_ERROR - field tables nested deeper than {MAX_DEPTH} levels"


def test_declare_arguments_at_the_depth_limit_decode():
    conn = opened()
    conn.feed(_declare(_nested(MAX_DEPTH)))
    [ev] = conn.next_events()
    assert isinstance(ev.method, c.Queue.Declare)


def test_deep_table_filling_a_frame_is_refused_without_recursion():
    conn = opened()
    conn.feed(_declare(_nested(18000)))  # ~126 kB: pamqp alone would hit the recursion limit
    assert close_of(conn).reply_code == 502


def test_string_running_past_its_table_is_501_not_a_short_read():
    table = b"\x01aS" + struct.pack(">I", 100000) + b"abc"
    conn = opened()
    conn.feed(_declare(struct.pack(">I", len(table)) + table))
    close = close_of(conn)
    assert (close.reply_code, close.class_id, close.method_id) == (501, 50, 10)
    assert close.reply_text.startswith("FRAME_ERROR - cannot decode")


def test_headers_property_nested_too_deep_is_502():
    conn = opened()
    conn.feed(_publish_method(1) + _header(1, 0, b"\x20\x00" + _nested(MAX_DEPTH + 1)))
    assert conn.next_events()[-1] == ConnectionClosed(
        f"502 SYNTAX_ERROR - field tables nested deeper than {MAX_DEPTH} levels")


def test_headers_property_with_a_bad_inner_length_is_501():
    table = b"\x01aS" + struct.pack(">I", 100000) + b"abc"
    conn = opened()
    conn.feed(_publish_method(1) + _header(1, 0, b"\x20\x00" + struct.pack(">I", len(table)) +
                                           table))
    close = close_of(conn)
    assert close.reply_code == 501


@SETTINGS
@given(headers)
def test_check_table_accepts_every_table_pamqp_encodes(value):
    data = encode.field_table(value)
    assert check_table(data, 0) == len(data)


@SETTINGS
@given(st.binary(max_size=300))
def test_check_table_on_arbitrary_bytes_only_ever_raises_table_errors(data):
    try:
        end = check_table(data, 0)
    except TableError:
        return
    assert end <= len(data)


def test_nesting_counts_arrays_too():
    inner = b""
    for _ in range(MAX_DEPTH):  # MAX_DEPTH arrays inside the table
        inner = b"A" + struct.pack(">I", len(inner)) + inner
    data = struct.pack(">I", len(inner) + 2) + b"\x01a" + inner
    try:
        check_table(data, 0)
    except TableTooDeep:
        return
    raise AssertionError("an array nesting past the limit was accepted")


def test_header_field_name_that_is_not_utf8_is_501_at_the_publish():
    # Found by the live fuzz: accepted, then a 541 and a traceback when the headers were read.
    table = b"\x01\x85S" + struct.pack(">I", 1) + b"x"
    conn = opened()
    conn.feed(_publish_method(1) + _header(1, 0, b"\x20\x00" + struct.pack(">I", len(table)) +
                                           table))
    close = close_of(conn)
    assert close.reply_code == 501
    assert close.reply_text == "FRAME_ERROR - cannot decode content header"
