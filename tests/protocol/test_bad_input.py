"""Bad input, one case per row of shared/PROTOCOL-ERRORS.md (rows 1-22 and 28) and the tune
rules of CLIENT-EXPECTATIONS.md section 4. Each case: state to start from, bytes in, and the
expected reaction: a connection.close with a code (and text prefix), or a silent close."""

import struct

import pytest
from pamqp import commands as c

from amqp_broker.protocol import ConnectionClosed

from .peer import (
    HEADER, close_of, content, method, opened, parse, raw_frame, server, start_ok, to_login,
)


def _tuning():
    conn = to_login(server(channel_max=16))
    conn.accept_login()
    conn.data_to_send()
    return conn


def _fresh():
    return server()


def _after_header():
    conn = server()
    conn.feed(HEADER)
    conn.data_to_send()
    return conn


def _open16():
    return opened(channel_max=16)


_TRUNCATED_DECLARE = struct.pack(">HHH", 50, 10, 0) + b"\x05ab"  # queue name says 5, has 2

# (id, start, input, expected code or None for silent close, reply text prefix)
CASES = [
    ("row01-wrong-version", _fresh, b"AMQP\x00\x00\x09\x02", None, None),
    ("row02-garbage", _fresh, b"HELLO WORLD", None, None),
    ("row02-http", _fresh, b"GET / HTTP/1.1\r\n", None, None),
    ("row07-unknown-mechanism", _after_header, start_ok(mechanism="BOGUS"), None, None),
    ("pre-tune-garbage-method", _after_header, method(0, c.Connection.TuneOk(0, 0, 0)), None, None),
    ("pre-tune-frame-over-8192", _after_header, raw_frame(1, 0, b"\x00" * 9000), None, None),
    ("tune-frame-max-below-4096", _tuning, method(0, c.Connection.TuneOk(16, 1000, 60)), None,
     "NOT_ALLOWED - negotiated frame_max = 1000 is lower than the minimum"),
    ("tune-frame-max-above-ours", _tuning, method(0, c.Connection.TuneOk(16, 200000, 60)), None,
     "NOT_ALLOWED - negotiated frame_max = 200000 is higher than the maximum"),
    ("tune-frame-max-zero", _tuning, method(0, c.Connection.TuneOk(16, 0, 60)), None,
     "NOT_ALLOWED - negotiated frame_max = 0"),
    ("tune-channel-max-above-ours", _tuning, method(0, c.Connection.TuneOk(17, 131072, 60)), None,
     "NOT_ALLOWED - negotiated channel_max = 17"),
    ("tune-channel-max-zero", _tuning, method(0, c.Connection.TuneOk(0, 131072, 60)), None,
     "NOT_ALLOWED - negotiated channel_max = 0"),
    ("row10-frame-too-large", _open16, raw_frame(1, 1, b"")[:3] + struct.pack(">I", 200000),
     501, "FRAME_ERROR - type 1, all octets = <<>>: {frame_too_large,200000,131064}"),
    ("row11-bad-frame-end", _open16, raw_frame(1, 1, method(1, c.Channel.Open())[7:-1], end=0),
     501, "FRAME_ERROR - type 1, all octets = <<0,20,0,10,1,48>>: {invalid_frame_end_marker,0}"),
    ("row11-bad-frame-end-long", _open16, raw_frame(1, 0, bytes(range(20)), end=7), 501,
     "FRAME_ERROR - type 1, first 16 octets = <<0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15>>: "
     "{invalid_frame_end_marker,\n" + " " * 70 + "7}"),  # as io_lib:format has it
    ("row12-unknown-frame-type", _open16, raw_frame(9, 1, b"abc"), 501,
     'FRAME_ERROR - type 9, all octets = <<"abc">>: unknown_frame'),
    ("heartbeat-with-payload", _open16, raw_frame(8, 0, b"ab"), 501,
     'FRAME_ERROR - type 8, all octets = <<"ab">>: unknown_frame'),
    ("row13-unknown-class", _open16, raw_frame(1, 1, struct.pack(">HH", 999, 1)), 540,
     "NOT_IMPLEMENTED - unknown method 999.1"),
    ("row13-unknown-method", _open16, raw_frame(1, 1, struct.pack(">HH", 60, 999)), 540,
     "NOT_IMPLEMENTED - unknown method 60.999"),
    ("row13-unknown-on-channel-0", _open16, raw_frame(1, 0, struct.pack(">HH", 10, 999)), 540,
     "NOT_IMPLEMENTED"),
    ("row14-truncated-declare", _open16, raw_frame(1, 1, _TRUNCATED_DECLARE), 501,
     "FRAME_ERROR - cannot decode <<0,0,5,97,98>>"),
    ("short-method-payload", _open16, raw_frame(1, 1, b"\x00\x3c"), 501, "FRAME_ERROR"),
    ("truncated-publish", _open16, raw_frame(1, 1, struct.pack(">HHH", 60, 40, 0) + b"\x09ab"),
     501, "FRAME_ERROR"),
    ("truncated-ack", _open16, raw_frame(1, 1, struct.pack(">HHI", 60, 80, 1)), 501,
     "FRAME_ERROR"),
    ("row15-header-without-publish", _open16, content(1, b"abc"), 505,
     "UNEXPECTED_FRAME - expected method frame, got non method frame instead"),
    ("row15-body-without-publish", _open16, raw_frame(3, 1, b"abc"), 505, "UNEXPECTED_FRAME"),
    ("row16-body-on-other-channel", lambda: opened(channels=(1, 2)),
     method(1, c.Basic.Publish(routing_key="q")) + content(1, b"abc")[:-11] +
     raw_frame(3, 2, b"abc"), 505, "UNEXPECTED_FRAME - expected method frame"),
    ("interleaved-method-before-header", _open16,
     method(1, c.Basic.Publish(routing_key="q")) + method(1, c.Basic.Qos()), 505,
     "UNEXPECTED_FRAME - expected content header for class 60"),
    ("interleaved-method-before-body", _open16,
     method(1, c.Basic.Publish(routing_key="q")) + content(1, b"abc")[:-11] +
     method(1, c.Basic.Ack(1)), 505, "UNEXPECTED_FRAME - expected content body"),
    ("header-wrong-class", _open16,
     method(1, c.Basic.Publish(routing_key="q")) +
     raw_frame(2, 1, struct.pack(">HHQH", 50, 0, 0, 0)), 505,
     "UNEXPECTED_FRAME - expected content header for class 60, got one for class 50"),
    ("malformed-properties", _open16,
     method(1, c.Basic.Publish(routing_key="q")) +
     raw_frame(2, 1, struct.pack(">HHQH", 60, 0, 0, 0x8000) + b"\x09ab"), 501, "FRAME_ERROR"),
    ("row17-heartbeat-on-channel-1", _open16, raw_frame(8, 1, b""), 505,
     "UNEXPECTED_FRAME - type 8, all octets = <<>>"),
    ("row18-basic-qos-on-channel-0", _open16, method(0, c.Basic.Qos()), 504,
     "CHANNEL_ERROR - unexpected method in connection state running"),
    ("row19-second-channel-open", _open16, method(1, c.Channel.Open()), 504,
     "CHANNEL_ERROR - second 'channel.open' seen"),
    ("row20-method-on-unopened-channel", _open16, method(5, c.Basic.Qos()), 504,
     "CHANNEL_ERROR - expected 'channel.open'"),
    ("row20-publish-on-unopened-channel", _open16, method(5, c.Basic.Publish()), 504,
     "CHANNEL_ERROR - expected 'channel.open'"),
    ("row20-content-on-unopened-channel", _open16, content(5, b"x"), 504, "CHANNEL_ERROR"),
    ("row22-more-channels-than-channel-max", lambda: opened(channel_max=2, channels=(1, 2)),
     method(3, c.Channel.Open()), 530,
     "NOT_ALLOWED - number of channels opened (2) has reached the negotiated channel_max (2)"),
    ("row28-body-longer-than-declared", _open16,
     method(1, c.Basic.Publish(routing_key="q")) + content(1, b"abc")[:-11] +
     raw_frame(3, 1, b"abcdef"), 501,
     "FRAME_ERROR - content body frame exceeds remaining content size"),
    ("server-only-method-from-client", _open16,
     method(1, c.Basic.Deliver("t", 1, False, "", "q")), 503, "COMMAND_INVALID"),
    ("connection-method-on-channel-1", _open16, method(1, c.Connection.Open("/")), 503,
     "COMMAND_INVALID"),
    ("connection-open-twice", _open16, method(0, c.Connection.Open("/")), 504,
     "CHANNEL_ERROR - unexpected method in connection state running"),
]


@pytest.mark.parametrize("start,data,code,text", [case[1:] for case in CASES],
                         ids=[case[0] for case in CASES])
def test_bad_input(start, data, code, text):
    conn = start()
    conn.feed(data)  # must never raise
    events = conn.next_events()
    assert [e for e in events if isinstance(e, ConnectionClosed)], events
    if code is None:
        assert conn.closed
        out = parse(conn.data_to_send())
        assert not [f for _, f in out if isinstance(f, c.Connection.Close)]
        if text is not None:  # the reason is still reported to the server (and its log)
            assert events[-1].reason.startswith(text), events[-1].reason
        return
    close = close_of(conn)
    assert close.reply_code == code
    assert close.reply_text.startswith(text), close.reply_text
    if text.endswith(">>") or " - type " in text:
        assert close.reply_text == text


def test_tune_ok_errors_close_after_the_silent_delay():
    conn = _tuning()
    conn.feed(method(0, c.Connection.TuneOk(16, 1000, 60)))
    assert conn.closed and conn.linger == 3.0


def test_channel_max_counts_open_channels_not_numbers():
    # RabbitMQ accepts any channel number 1..65535 (PROTOCOL-ERRORS.md row 21).
    conn = opened(channel_max=2, channels=(65535, 7))
    conn.feed(method(3, c.Channel.Open()))
    close = close_of(conn)
    assert (close.reply_code, close.class_id, close.method_id) == (530, 0, 0)


def test_bad_header_gets_our_header_back_at_once():
    conn = server()
    conn.feed(b"AMQP\x01\x01\x00\x0a")
    assert conn.data_to_send() == HEADER
    assert conn.closed and conn.linger == 0.0


def test_frame_size_is_checked_before_the_payload_arrives():
    conn = opened()
    conn.feed(b"\x01\x00\x01" + struct.pack(">I", 10_000_000))  # header only, no payload
    assert close_of(conn).reply_code == 501
    assert conn.closed and conn.linger == 3.0


def test_frame_at_frame_max_is_accepted_with_rabbitmq_fudge():
    conn = opened(frame_max=4096)
    body = b"x" * 4096  # payload == frame_max: 8 bytes over frame_max - 8, tolerated
    conn.feed(method(1, c.Basic.Publish(routing_key="q")))
    conn.feed(raw_frame(2, 1, struct.pack(">HHQH", 60, 0, len(body), 0)) + raw_frame(3, 1, body))
    [ev] = conn.next_events()
    assert ev.body == body


def test_frame_error_discards_the_rest_of_the_input():
    conn = opened()
    conn.feed(raw_frame(9, 1, b"") + method(1, c.Basic.Ack(1)))
    assert [type(e) for e in conn.next_events()] == [ConnectionClosed]


def test_after_hard_error_only_close_ok_is_accepted():
    conn = opened()
    conn.feed(method(0, c.Basic.Qos()) + method(1, c.Basic.Ack(1)))
    assert close_of(conn).reply_code == 504
    assert [type(e) for e in conn.next_events()] == [ConnectionClosed]
    assert not conn.closed
    conn.feed(method(0, c.Connection.CloseOk()))
    assert conn.closed


def test_crossing_connection_close_is_answered():
    conn = opened()
    conn.close_connection(320, "CONNECTION_FORCED - bye")
    conn.data_to_send()
    conn.feed(method(0, c.Connection.Close(200, "", 0, 0)))
    [(_, ok)] = parse(conn.data_to_send())
    assert isinstance(ok, c.Connection.CloseOk) and conn.closed


def test_frame_just_over_the_fudge_is_refused():
    conn = opened(frame_max=4096)
    conn.feed(method(1, c.Basic.Publish(routing_key="q")) +
              raw_frame(2, 1, struct.pack(">HHQH", 60, 0, 4097, 0)) + raw_frame(3, 1, b"x" * 4097))
    close = close_of(conn)
    assert close.reply_code == 501
    assert "{frame_too_large,4097,4088}" in close.reply_text


def test_bad_framing_while_waiting_for_close_ok_stops_reading():
    conn = opened()
    conn.close_connection(320, "CONNECTION_FORCED - bye")
    conn.data_to_send()
    conn.feed(raw_frame(1, 1, b"abcd", end=0x00))
    assert conn.closed and conn.linger == 3.0


def test_second_error_after_a_hard_error_closes():
    conn = opened()
    conn.feed(method(0, c.Basic.Qos()) + raw_frame(9, 1, b"", end=0x00))
    assert close_of(conn).reply_code == 504
    assert conn.closed


def test_an_exception_in_the_protocol_layer_is_541_with_its_traceback(monkeypatch):
    from amqp_broker.protocol import channel as channel_mod

    def broken(self, payload, max_size):
        raise KeyError("a bug")

    conn = _open16()
    monkeypatch.setattr(channel_mod.Channel, "on_header", broken)
    conn.feed(method(1, c.Basic.Publish(routing_key="q")) + content(1, b"abc"))
    [closed] = [e for e in conn.next_events() if isinstance(e, ConnectionClosed)]
    assert closed.reason == "541 INTERNAL_ERROR - KeyError: 'a bug'"
    assert "Traceback" in closed.bug and "a bug" in closed.bug  # the server logs it
    assert close_of(conn).reply_code == 541
