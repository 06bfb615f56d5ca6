"""Raw-socket behaviour around the bad-input table (compat_tests/test_bad_input_table.py holds
one row per bad input: header, framing, content order, channels, sizes, tables): the layout of
frame-error texts, tune-ok refusals, heartbeats, channel_max, channel.flow and the close
handshakes.  See /work/shared/PROTOCOL-ERRORS.md for the measured table."""

import struct
import time

import pytest
from pamqp import body, commands, frame, header, heartbeat

from compat_tests.support.raw import RawClient

def _expect_connection_close(raw, code, class_id=None, method_id=None):
    reply = raw.read_method()
    assert reply is not None, "socket closed without a connection.close"
    assert reply.name == "Connection.Close", reply
    assert reply.reply_code == code, reply.reply_text
    if class_id is not None:
        assert (reply.class_id, reply.method_id) == (class_id, method_id)
    return reply


def test_frame_error_shows_the_first_16_octets_as_erlang_prints_them(broker_url):
    # RabbitMQ formats the snippet and the reason with ~p: 80 columns, then a line break.
    with RawClient(broker_url) as raw:
        raw.handshake()
        payload = b"\x00\x0a\x00\x28" + b"abcdefghijklmnopqrstuvwxyz"
        raw.send_raw(struct.pack(">BHI", 1, 0, len(payload)) + payload + b"\x00")
        reply = _expect_connection_close(raw, 501, 0, 0)
        assert reply.reply_text == (
            "FRAME_ERROR - type 1, first 16 octets = "
            "<<0,10,0,40,97,98,99,100,101,102,103,104,105,106,107,\n" + " " * 28 +
            "108>>: {invalid_frame_end_marker,0}")


def _assert_silently_refused_before_open(raw, reply):
    """RabbitMQ logs "failed to negotiate connection parameters" and, after its 3 s silent-close
    delay, drops the socket without a connection.close: before connection.open its reader
    sends no close frame.  Never an open-ok."""
    assert reply is None, reply
    assert raw.read_until_eof(timeout=10) == b"" and raw.eof


def test_tune_ok_frame_max_below_minimum_is_refused(broker_url):
    with RawClient(broker_url) as raw:
        reply = raw.handshake(tune_ok={"frame_max": 1024})
        _assert_silently_refused_before_open(raw, reply)


def test_tune_ok_frame_max_above_server_is_refused(broker_url):
    with RawClient(broker_url) as raw:
        reply = raw.handshake(tune_ok={"frame_max": 1 << 20})
        _assert_silently_refused_before_open(raw, reply)


def test_heartbeat_frames_on_channel_zero_are_accepted(broker_url):
    with RawClient(broker_url) as raw:
        raw.handshake()
        raw.send(0, heartbeat.Heartbeat())
        raw.send(1, commands.Channel.Open())
        assert raw.read_method().name == "Channel.OpenOk"


def test_close_handshake_from_client(broker_url):
    with RawClient(broker_url) as raw:
        raw.handshake()
        raw.send(0, commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0))
        # The client, having sent close, is the one that closes the socket after close-ok.
        assert raw.read_method().name == "Connection.CloseOk"


def test_opening_more_channels_than_channel_max_is_530(broker_url):
    with RawClient(broker_url) as raw:
        raw.handshake(tune_ok={"channel_max": 2})
        raw.open_channel(1)
        raw.open_channel(2)
        raw.send(3, commands.Channel.Open())
        reply = _expect_connection_close(raw, 530, 0, 0)
        assert reply.reply_text == ("NOT_ALLOWED - number of channels opened (2) has reached the "
                                    "negotiated channel_max (2)")


def test_any_channel_number_up_to_65535_is_usable(broker_url):
    # channel_max limits how many channels are open, not their numbers (PROTOCOL-ERRORS #21).
    with RawClient(broker_url) as raw:
        raw.handshake(tune_ok={"channel_max": 2})
        raw.open_channel(65535)
        raw.open_channel(1000)
        raw.send(65535, commands.Basic.Qos(prefetch_count=1))
        assert raw.read_method().name == "Basic.QosOk"
        raw.send(7, commands.Channel.Open())
        reply = _expect_connection_close(raw, 530, 0, 0)
        assert reply.reply_text == ("NOT_ALLOWED - number of channels opened (2) has reached the "
                                    "negotiated channel_max (2)")


def test_channel_flow_active_false_is_540(broker_url):
    with RawClient(broker_url) as raw:
        raw.handshake()
        raw.open_channel(1)
        raw.send(1, commands.Channel.Flow(active=False))
        reply = _expect_connection_close(raw, 540)
        assert reply.reply_text == "NOT_IMPLEMENTED - active=false"


def test_channel_flow_active_true_is_flow_ok(broker_url):
    with RawClient(broker_url) as raw:
        raw.handshake()
        raw.open_channel(1)
        raw.send(1, commands.Channel.Flow(active=True))
        reply = raw.read_method(commands.Channel.FlowOk)
        assert reply.active is True


def test_server_sends_heartbeats_and_drops_a_silent_client(broker_url):
    with RawClient(broker_url) as raw:
        raw.handshake(tune_ok={"heartbeat": 1})
        channel, value = raw.read_frame()
        assert (channel, value.name) == (0, "Heartbeat")
        # We never answer: the server closes the socket (RabbitMQ after ~3 missed beats) and
        # sends nothing but heartbeats before that, no connection.close.
        rest = raw.read_until_eof(timeout=20)
        assert raw.eof
        assert rest == b"\x08\x00\x00\x00\x00\x00\x00\xce" * (len(rest) // 8)


def test_frames_after_client_close_are_discarded_not_reset(broker_url):
    # amqplib sends connection.close on channel 0 ahead of channel frames still buffered behind it
    # (its own suite's "find high watermark" then hangs in close).  RabbitMQ answers close-ok and
    # keeps reading, discarding what follows, until the client closes the socket (rabbit_reader:
    # connection_state closed, terminate_connection after at most ?CLOSING_TIMEOUT s).  Closing
    # the socket with frames still arriving makes the kernel answer them with a TCP reset.
    with RawClient(broker_url) as raw:
        raw.handshake()
        raw.open_channel(1)
        publish = commands.Basic.Publish(exchange="", routing_key="compat-nowhere")
        batch = b"".join(
            frame_bytes for _ in range(200) for frame_bytes in (
                frame.marshal(publish, 1),
                frame.marshal(header.ContentHeader(0, 5, commands.Basic.Properties()), 1),
                frame.marshal(body.ContentBody(b"hello"), 1)))
        raw.send_raw(frame.marshal(commands.Connection.Close(
            reply_code=200, reply_text="bye", class_id=0, method_id=0), 0) + batch)
        assert raw.read_method().name == "Connection.CloseOk"
        try:
            for _ in range(5):  # frames the client had queued before it saw close-ok
                raw.send_raw(batch)
                time.sleep(0.05)
        except (BrokenPipeError, ConnectionResetError) as exc:
            pytest.fail(f"the server reset the connection after close-ok: {exc!r}")
        tail = raw.read_until_eof(timeout=0.5)
        assert tail == b"", f"nothing may follow close-ok, got {tail[:40]!r}"
        assert not raw.reset, "the server reset the connection instead of discarding the frames"

