"""Handshake: protocol header, start/start-ok, login answers, tune/tune-ok, open."""

from pamqp import commands as c

from amqp_broker.protocol import (
    ConnectionClosed, LoginRequest, OpenRequest, ProtocolConfig, ServerConnection, Tuned,
    default_server_properties,
)

from .peer import HEADER, close_of, method, opened, parse, server, start_ok, to_login


def test_header_gets_connection_start_with_server_properties():
    conn = server()
    conn.feed(HEADER)
    [(ch, start)] = parse(conn.data_to_send())
    assert ch == 0 and isinstance(start, c.Connection.Start)
    assert (start.version_major, start.version_minor) == (0, 9)
    assert start.mechanisms == "PLAIN AMQPLAIN"
    assert start.locales == "en_US"
    caps = start.server_properties["capabilities"]
    assert caps["publisher_confirms"] and caps["basic.nack"] and caps["per_consumer_qos"]
    assert caps["authentication_failure_close"] and caps["consumer_cancel_notify"]
    assert caps["connection.blocked"] is False
    # Not "RabbitMQ": kombu then assumes spec (per-consumer) QoS semantics.
    assert start.server_properties["product"] != "RabbitMQ"


def test_product_and_version_are_configurable():
    props = default_server_properties(product="RabbitMQ", version="3.10.8")
    conn = ServerConnection(ProtocolConfig(server_properties=props))
    conn.feed(HEADER)
    [(_, start)] = parse(conn.data_to_send())
    assert start.server_properties["product"] == "RabbitMQ"
    assert start.server_properties["version"] == "3.10.8"


def test_header_split_across_reads():
    conn = server()
    conn.feed(HEADER[:3])
    assert conn.data_to_send() == b""
    conn.feed(HEADER[3:])
    assert isinstance(parse(conn.data_to_send())[0][1], c.Connection.Start)


def test_plain_login_request():
    conn = server()
    conn.feed(HEADER + start_ok(capabilities={"authentication_failure_close": True}))
    [ev] = conn.next_events()
    assert isinstance(ev, LoginRequest)
    assert (ev.mechanism, ev.username, ev.password) == ("PLAIN", "guest", "guest")
    assert conn.client_capabilities == {"authentication_failure_close": True}


def test_plain_login_with_authzid():
    conn = server()
    conn.feed(HEADER + start_ok(response="admin\x00bob\x00secret"))
    [ev] = conn.next_events()
    assert (ev.username, ev.password) == ("bob", "secret")


def test_amqplain_login_request():
    from pamqp import encode
    response = encode.field_table({"LOGIN": "alice", "PASSWORD": "pw"})[4:]
    conn = server()
    conn.feed(HEADER + start_ok(mechanism="AMQPLAIN", response=response))
    [ev] = conn.next_events()
    assert (ev.mechanism, ev.username, ev.password) == ("AMQPLAIN", "alice", "pw")


def test_accept_login_sends_tune_with_config_values():
    conn = to_login(server(channel_max=16, frame_max=65536, heartbeat=30))
    conn.accept_login()
    [(_, tune)] = parse(conn.data_to_send())
    assert isinstance(tune, c.Connection.Tune)
    assert (tune.channel_max, tune.frame_max, tune.heartbeat) == (16, 65536, 30)


def test_full_handshake_negotiates_client_values():
    conn = to_login(server())
    conn.accept_login()
    conn.data_to_send()
    conn.feed(method(0, c.Connection.TuneOk(100, 4096, 10)) +
              method(0, c.Connection.Open("vh")))
    assert conn.next_events() == [Tuned(10), OpenRequest("vh")]
    assert (conn.channel_max, conn.frame_max, conn.heartbeat) == (100, 4096, 10)
    conn.accept_open()
    [(_, ok)] = parse(conn.data_to_send())
    assert isinstance(ok, c.Connection.OpenOk)
    assert conn.state == "open" and not conn.closed


def test_input_waits_while_open_is_undecided():
    conn = to_login(server())
    conn.accept_login()
    conn.feed(method(0, c.Connection.TuneOk(2047, 131072, 60)) + method(0, c.Connection.Open("/"))
              + method(1, c.Channel.Open()))
    assert conn.next_events() == [Tuned(60), OpenRequest("/")]
    conn.data_to_send()
    conn.accept_open()  # the pipelined channel.open is parsed only now
    frames = [f for _, f in parse(conn.data_to_send())]
    assert isinstance(frames[0], c.Connection.OpenOk)
    assert isinstance(frames[1], c.Channel.OpenOk)


def test_refuse_open_is_530_then_close_ok_closes():
    conn = to_login(server())
    conn.accept_login()
    conn.feed(method(0, c.Connection.TuneOk(2047, 131072, 60)) +
              method(0, c.Connection.Open("nope")))
    conn.next_events()
    conn.data_to_send()
    conn.refuse_open("vhost nope not found")
    close = close_of(conn)
    assert close.reply_code == 530
    assert close.reply_text == "NOT_ALLOWED - vhost nope not found"
    assert isinstance(conn.next_events()[0], ConnectionClosed)
    assert not conn.closed
    conn.feed(method(0, c.Connection.CloseOk()))
    assert conn.closed


def test_refused_login_with_capability_is_403():
    conn = to_login(server(), capabilities={"authentication_failure_close": True})
    conn.refuse_login()
    close = close_of(conn)
    assert close.reply_code == 403
    assert close.reply_text.startswith("ACCESS_REFUSED - Login was refused using authentication")
    conn.feed(method(0, c.Connection.CloseOk()))
    assert conn.closed


def test_refused_login_without_capability_is_silent_with_delay():
    conn = to_login(server())
    conn.refuse_login()
    assert conn.data_to_send() == b""
    assert conn.closed and conn.linger == 3.0
    assert isinstance(conn.next_events()[0], ConnectionClosed)


def test_malformed_plain_response_is_a_refused_login():
    conn = server()
    conn.feed(HEADER + start_ok(response="no-nul-bytes"))
    [ev] = conn.next_events()
    assert isinstance(ev, ConnectionClosed) and ev.reason.startswith("ACCESS_REFUSED")
    frames = [f for _, f in parse(conn.data_to_send())]
    assert conn.closed and len(frames) == 1 and isinstance(frames[0], c.Connection.Start)


def test_client_close_while_open():
    from .peer import opened
    conn = opened()
    conn.feed(method(0, c.Connection.Close(200, "bye", 0, 0)))
    events = conn.next_events()
    assert events[0].reply_code == 200 and events[0].reply_text == "bye"
    assert isinstance(events[1], ConnectionClosed)
    [(_, ok)] = parse(conn.data_to_send())
    assert isinstance(ok, c.Connection.CloseOk)
    assert conn.closed and conn.linger == 0.0


def test_eof_closes():
    from .peer import opened
    conn = opened()
    conn.feed(b"")
    assert conn.closed
    assert isinstance(conn.next_events()[0], ConnectionClosed)


def test_server_close_connection_discards_until_close_ok():
    from .peer import opened, publish
    conn = opened()
    conn.close_connection(320, "CONNECTION_FORCED - shutdown")
    assert close_of(conn).reply_code == 320
    assert isinstance(conn.next_events()[0], ConnectionClosed)
    conn.feed(publish(1, b"x") + method(1, c.Basic.Ack(1)) +
              method(1, c.Channel.Close(200, "", 0, 0)))
    assert conn.next_events() == [] and conn.data_to_send() == b""
    assert not conn.closed
    conn.feed(method(0, c.Connection.CloseOk()))
    assert conn.closed


def test_client_close_with_frames_behind_it_is_clean_and_asks_for_a_drain():
    # connection.close followed, in the same read, by frames the client had queued: close-ok,
    # the connection's end says why (not an internal error), the rest is discarded, and the
    # server is told how long to keep reading and discarding: the heartbeat, capped at 30 s.
    from amqp_broker.protocol import ConnectionClosed

    for heartbeat, drain in ((0, 30.0), (10, 10.0), (60, 30.0)):
        conn = opened(heartbeat=heartbeat)
        conn.feed(method(0, c.Connection.Close(200, "bye", 0, 0)) +
                  method(1, c.Basic.Publish(exchange="", routing_key="q")))
        ends = [e for e in conn.next_events() if isinstance(e, ConnectionClosed)]
        assert [e.reason for e in ends] == ["client closed the connection"]
        assert conn.closed and conn.drain == drain
        assert [type(f) for _ch, f in parse(conn.data_to_send())] == [c.Connection.CloseOk]
        conn.feed(method(1, c.Channel.Close(200, "", 0, 0)))  # discarded
        assert conn.next_events() == [] and conn.data_to_send() == b""
