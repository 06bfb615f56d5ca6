"""Channel open/close state machine, both directions."""

from pamqp import commands as c

from amqp_broker.protocol import (
    ChannelClosed, ChannelCloseRequested, ChannelOpened, MethodReceived,
)

from .peer import close_of, method, opened, parse, publish


def test_channel_open_sends_open_ok_and_event():
    conn = opened(channels=())
    conn.feed(method(3, c.Channel.Open()))
    assert conn.next_events() == [ChannelOpened(3)]
    [(ch, ok)] = parse(conn.data_to_send())
    assert ch == 3 and isinstance(ok, c.Channel.OpenOk)


def test_client_channel_close_replies_close_ok_and_frees_the_number():
    conn = opened()
    conn.feed(method(1, c.Channel.Close(200, "bye", 0, 0)))
    assert conn.next_events() == [ChannelCloseRequested(1, 200, "bye", 0, 0)]
    [(ch, ok)] = parse(conn.data_to_send())
    assert ch == 1 and isinstance(ok, c.Channel.CloseOk)
    conn.feed(method(1, c.Channel.Open()))
    assert conn.next_events() == [ChannelOpened(1)]


def test_client_close_in_the_middle_of_a_content_is_505_like_rabbitmq():
    conn = opened()
    conn.feed(publish(1, b"abc")[:-11] + method(1, c.Channel.Close(200, "", 0, 0)))
    assert close_of(conn).reply_code == 505


def test_server_close_drops_everything_until_close_ok():
    conn = opened()
    conn.close_channel(1, 406, "PRECONDITION_FAILED - unknown delivery tag 42", 60, 80)
    [(ch, close)] = parse(conn.data_to_send())
    assert ch == 1 and isinstance(close, c.Channel.Close)
    assert (close.reply_code, close.class_id, close.method_id) == (406, 60, 80)
    conn.feed(publish(1, b"late") + method(1, c.Basic.Ack(1)) + method(1, c.Basic.Qos()))
    assert conn.next_events() == [] and conn.data_to_send() == b""
    conn.send_deliver(1, "t", 1, False, "", "q", b"\x00\x00", b"x")  # dropped too
    assert conn.data_to_send() == b""
    conn.feed(method(1, c.Channel.CloseOk()))
    assert conn.next_events() == [ChannelClosed(1)]
    conn.feed(method(1, c.Channel.Open()))
    assert conn.next_events() == [ChannelOpened(1)]


def test_server_close_mid_content_discards_the_rest_of_that_content():
    conn = opened()
    data = publish(1, b"abc")
    conn.feed(data[:-11])  # publish + header, body pending
    conn.close_channel(1, 404, "NOT_FOUND - no exchange")
    conn.feed(data[-11:] + method(1, c.Channel.CloseOk()))
    assert conn.next_events() == [ChannelClosed(1)]


def test_crossing_channel_close_gets_close_ok():
    conn = opened()
    conn.close_channel(1, 406, "PRECONDITION_FAILED - x")
    conn.data_to_send()
    conn.feed(method(1, c.Channel.Close(200, "", 0, 0)))
    [(ch, ok)] = parse(conn.data_to_send())
    assert isinstance(ok, c.Channel.CloseOk)
    conn.feed(method(1, c.Channel.CloseOk()))
    assert conn.next_events() == [ChannelClosed(1)]


def test_close_on_unopened_channel_gets_close_ok():
    conn = opened(channels=())
    conn.feed(method(4, c.Channel.Close(200, "", 0, 0)))
    assert conn.next_events() == []
    [(ch, ok)] = parse(conn.data_to_send())
    assert ch == 4 and isinstance(ok, c.Channel.CloseOk)


def test_channel_flow_and_cancel_ok_from_client_are_passed_on():
    conn = opened()
    conn.feed(method(1, c.Channel.Flow(active=True)) + method(1, c.Basic.CancelOk("t")))
    events = conn.next_events()
    assert [type(e.method) for e in events if isinstance(e, MethodReceived)] == [
        c.Channel.Flow, c.Basic.CancelOk]


def test_highest_channel_number_is_usable():
    conn = opened(channel_max=16, channels=(16,))
    conn.feed(publish(16, b"x"))
    assert conn.next_events()[0].channel == 16


def test_garbage_on_a_closing_channel_is_dropped_undecoded():
    import struct
    from .peer import raw_frame
    conn = opened()
    conn.close_channel(1, 406, "PRECONDITION_FAILED - x")
    conn.data_to_send()
    conn.feed(raw_frame(1, 1, struct.pack(">HH", 999, 1)) +
              raw_frame(1, 1, b"\x00\x32\x00\x0a\x05a"))
    assert conn.state == "open" and conn.next_events() == []
    conn.feed(method(1, c.Channel.CloseOk()))
    assert conn.next_events() == [ChannelClosed(1)]


def test_channel_frame_before_open_ok_is_unexpected():
    # Before connection.open RabbitMQ's reader closes silently (after 3 s), sending no close.
    from .peer import parse, server, to_login
    from amqp_broker.protocol import ConnectionClosed
    conn = to_login(server())
    conn.accept_login()
    conn.data_to_send()
    conn.feed(method(0, c.Connection.TuneOk(2047, 131072, 60)) + method(1, c.Channel.Open()))
    assert conn.closed and conn.linger == 3.0 and parse(conn.data_to_send()) == []
    closed = [e for e in conn.next_events() if isinstance(e, ConnectionClosed)]
    assert closed[0].reason.startswith("UNEXPECTED_FRAME")
