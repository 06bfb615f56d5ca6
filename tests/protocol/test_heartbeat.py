"""Heartbeats, handshake timeout and close-ok timeout, driven by a fake `now`."""

from pamqp import commands as c

from amqp_broker.protocol import ConnectionClosed, HeartbeatTimeout

from .peer import HEADER, method, opened, server

_HB = b"\x08\x00\x00\x00\x00\x00\x00\xce"


def test_heartbeat_sent_at_half_the_interval_when_idle():
    conn = opened(heartbeat=10)
    conn.tick(100.0)
    conn.tick(104.0)
    assert conn.data_to_send() == b""
    conn.tick(105.0)
    assert conn.data_to_send() == _HB


def test_no_heartbeat_while_other_output_flows():
    conn = opened(heartbeat=10)
    conn.tick(0.0)
    for now in (3.0, 6.0, 9.0):
        conn.send_confirm(1, 1, False, True)
        assert conn.data_to_send() != b""
        conn.feed(_HB)
        conn.tick(now)
    assert conn.data_to_send() == b""


def test_two_missed_intervals_time_out():
    conn = opened(heartbeat=10)
    conn.tick(0.0)
    conn.tick(19.0)
    assert conn.next_events() == []
    conn.tick(20.0)
    events = conn.next_events()
    assert isinstance(events[0], HeartbeatTimeout) and isinstance(events[1], ConnectionClosed)
    assert conn.closed


def test_inbound_bytes_keep_the_connection_alive():
    conn = opened(heartbeat=10)
    conn.tick(0.0)
    for now in range(5, 100, 5):
        conn.feed(_HB)
        conn.tick(float(now))
    assert not conn.closed and conn.next_events() == []


def test_heartbeat_zero_disables_both_directions():
    conn = opened(heartbeat=0)
    conn.tick(0.0)
    conn.tick(10_000.0)
    assert conn.data_to_send() == b"" and not conn.closed


def test_client_heartbeat_from_tune_ok_is_used():
    conn = opened(heartbeat=4)  # the server proposed 60
    assert conn.heartbeat == 4
    conn.tick(0.0)
    conn.tick(8.0)
    assert conn.closed


def test_handshake_timeout():
    conn = server(handshake_timeout=10.0)
    conn.tick(0.0)
    conn.feed(HEADER)
    conn.tick(9.0)
    assert not conn.closed
    conn.tick(10.0)
    assert conn.closed
    assert conn.next_events() == [ConnectionClosed("handshake timeout")]


def test_close_ok_wait_is_capped():
    conn = opened(heartbeat=10)
    conn.tick(0.0)
    conn.close_connection(320, "CONNECTION_FORCED - bye")
    conn.tick(1.0)
    conn.tick(10.0)
    assert not conn.closed
    conn.tick(11.0)
    assert conn.closed


def test_close_ok_arriving_in_time_closes_at_once():
    conn = opened(heartbeat=10)
    conn.close_connection(320, "CONNECTION_FORCED - bye")
    conn.feed(method(0, c.Connection.CloseOk()))
    assert conn.closed


def test_paused_monitor_does_not_time_out_and_resumes_from_now():
    conn = opened(heartbeat=10)
    conn.tick(0.0)
    conn.pause_monitor()  # the server stopped reading (blocked publisher)
    conn.tick(50.0)
    conn.tick(100.0)
    assert conn.next_events() == [] and not conn.closed
    conn.resume_monitor()
    conn.tick(101.0)
    conn.tick(120.0)
    assert conn.next_events() == []
    conn.tick(121.0)  # two intervals after the resume
    assert isinstance(conn.next_events()[0], HeartbeatTimeout)


def test_short_heartbeat_sends_every_half_interval_when_idle():
    # A 1 s heartbeat: the server ticks every 0.5 s and each idle tick carries a heartbeat,
    # including the tick right after the previous heartbeat was flushed.
    conn = opened(heartbeat=1)
    assert conn.tick_interval == 0.5
    conn.tick(0.0)
    conn.data_to_send()
    sent = []
    for i in range(1, 9):
        conn.feed(_HB)  # the client keeps its side alive
        conn.tick(i * 0.5)
        sent.append(conn.data_to_send())
    assert sent == [_HB] * 8


def test_tick_interval_is_a_second_until_tuned_and_for_long_heartbeats():
    assert server().tick_interval == 1.0
    assert opened(heartbeat=60).tick_interval == 1.0
    assert opened(heartbeat=0).tick_interval == 1.0
    assert opened(heartbeat=1).tick_interval == 0.5
