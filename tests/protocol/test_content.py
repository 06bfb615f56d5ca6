"""Content assembly (publish + header + bodies -> one Publish) and content output
(deliver/get-ok/return split at frame_max - 8)."""

from pamqp import commands as c
from pamqp import body as pbody

from amqp_broker.protocol import Ack, Acks, Nack, Publish, Reject
from amqp_broker.protocol.properties import decode_properties

from .peer import method, opened, parse, publish


def test_publish_with_one_body_frame():
    conn = opened()
    props = c.Basic.Properties(delivery_mode=2, content_type="text/plain", headers={"k": "v"})
    conn.feed(publish(1, b"hello", exchange="ex", routing_key="rk", props=props, mandatory=True))
    [ev] = conn.next_events()
    assert ev == Publish(1, "ex", "rk", True, False, props.marshal(), b"hello")
    assert decode_properties(ev.properties) == props


def test_zero_length_body_has_no_body_frame():
    conn = opened()
    conn.feed(publish(1, b""))
    [ev] = conn.next_events()
    assert ev.body == b"" and ev.properties == b"\x00\x00"


def test_multi_frame_body_is_joined():
    conn = opened(frame_max=4096)
    body = bytes(range(256)) * 40  # 10240 bytes -> 3 body frames
    conn.feed(publish(1, body, frame_max=4096))
    [ev] = conn.next_events()
    assert ev.body == body


def test_publish_fed_byte_by_byte():
    conn = opened()
    data = publish(1, b"abc" * 100) + method(1, c.Basic.Ack(7, multiple=True))
    for i in range(len(data)):
        conn.feed(data[i : i + 1])
    events = conn.next_events()
    assert [type(e) for e in events] == [Publish, Ack]
    assert events[0].body == b"abc" * 100
    assert events[1] == Ack(1, 7, True)


def test_channels_may_interleave_their_contents():
    conn = opened(channels=(1, 2))
    p1, p2 = publish(1, b"one"), publish(2, b"two")
    # method(1) method(2) header(1) header(2) body(1) body(2)
    f1, f2 = _frames(p1), _frames(p2)
    conn.feed(b"".join(a + b for a, b in zip(f1, f2)))
    events = conn.next_events()
    assert [(e.channel, e.body) for e in events] == [(1, b"one"), (2, b"two")]


def _frames(data: bytes) -> list[bytes]:
    out = []
    while data:
        size = int.from_bytes(data[3:7], "big")
        out.append(data[: 8 + size])
        data = data[8 + size :]
    return out


def test_ack_nack_reject_events():
    conn = opened()
    conn.feed(method(1, c.Basic.Ack(3, False)) + method(1, c.Basic.Nack(4, True, False)) +
              method(1, c.Basic.Reject(5, True)))
    assert conn.next_events() == [Acks(1, [3]), Nack(1, 4, True, False), Reject(1, 5, True)]


def test_consecutive_single_acks_of_a_channel_arrive_as_one_event_in_order():
    conn = opened(channels=(1, 2))
    ack = lambda ch, tag, multiple=False: method(ch, c.Basic.Ack(tag, multiple))  # noqa: E731
    conn.feed(ack(1, 1) + ack(1, 2) + ack(1, 3) + ack(2, 1) + ack(2, 2) + ack(1, 4)
              + ack(1, 6, True) + ack(1, 7) + publish(1, b"x") + ack(1, 8) + ack(1, 9))
    events = conn.next_events()
    assert events[:5] == [Acks(1, [1, 2, 3]), Acks(2, [1, 2]), Acks(1, [4]), Ack(1, 6, True),
                          Acks(1, [7])]
    assert type(events[5]) is Publish and events[6:] == [Acks(1, [8, 9])]
    # an event already handed out is never added to
    conn.feed(ack(1, 10))
    assert conn.next_events() == [Acks(1, [10])] and events[6] == Acks(1, [8, 9])


def test_other_methods_arrive_as_pamqp_objects():
    conn = opened()
    args = {"x-queue-type": "quorum"}
    conn.feed(method(1, c.Queue.Declare(queue="q1", durable=True, arguments=args)))
    [ev] = conn.next_events()
    assert ev.channel == 1 and isinstance(ev.method, c.Queue.Declare)
    assert ev.method.queue == "q1" and ev.method.durable
    assert ev.method.arguments == {"x-queue-type": "quorum"}


def test_deliver_output_is_split_at_frame_max_minus_8():
    conn = opened(frame_max=4096)
    body = b"z" * 10000
    conn.send_deliver(1, "ctag", 9, True, "ex", "rk", b"\x10\x00\x02", body)
    frames = parse(conn.data_to_send())
    deliver = frames[0][1]
    assert isinstance(deliver, c.Basic.Deliver)
    assert (deliver.consumer_tag, deliver.delivery_tag, deliver.redelivered) == ("ctag", 9, True)
    assert frames[1][1].body_size == 10000 and frames[1][1].properties.delivery_mode == 2
    sizes = [len(f.value) for _, f in frames[2:] if isinstance(f, pbody.ContentBody)]
    assert sizes == [4088, 4088, 1824]


def test_deliver_with_empty_body_has_no_body_frame():
    conn = opened()
    conn.send_deliver(1, "t", 1, False, "", "q", b"\x00\x00", b"")
    assert len(parse(conn.data_to_send())) == 2


def test_get_ok_return_and_confirms():
    conn = opened()
    conn.send_get_ok(1, 4, False, "ex", "rk", 12, b"\x00\x00", b"b")
    conn.send_return(1, 312, "NO_ROUTE", "ex", "rk", b"\x00\x00", b"r")
    conn.send_confirm(1, 5, True, True)
    conn.send_confirm(1, 6, False, False)
    frames = [f for _, f in parse(conn.data_to_send())]
    get_ok, ret, ack, nack = frames[0], frames[3], frames[6], frames[7]
    assert isinstance(get_ok, c.Basic.GetOk) and get_ok.message_count == 12
    assert isinstance(ret, c.Basic.Return) and ret.reply_code == 312
    assert isinstance(ack, c.Basic.Ack) and (ack.delivery_tag, ack.multiple) == (5, True)
    assert isinstance(nack, c.Basic.Nack) and (nack.delivery_tag, nack.requeue) == (6, False)


def test_output_to_a_channel_that_is_not_open_is_dropped():
    conn = opened()
    conn.send_deliver(7, "t", 1, False, "", "q", b"\x00\x00", b"x")
    conn.send_confirm(7, 1, False, True)
    conn.send_method(7, c.Basic.ConsumeOk("t"))
    assert conn.data_to_send() == b""


def test_output_is_coalesced_in_one_buffer():
    conn = opened()
    for tag in range(1, 101):
        conn.send_deliver(1, "t", tag, False, "", "q", b"\x00\x00", b"x")
    data = conn.data_to_send()
    assert len(parse(data)) == 300
    assert conn.data_to_send() == b""


def test_declare_ok_allows_any_utf8_queue_name():
    conn = opened()
    conn.send_declare_ok(1, "naïve queue ✓", 3, 1)
    [(_, ok)] = parse(conn.data_to_send())
    assert (ok.queue, ok.message_count, ok.consumer_count) == ("naïve queue ✓", 3, 1)


def test_send_method_routes_closes_to_the_close_handshakes():
    conn = opened()
    conn.send_method(1, c.Channel.Close(406, "PRECONDITION_FAILED - x", 60, 80))
    conn.data_to_send()
    conn.feed(publish(1, b"dropped"))
    assert conn.next_events() == []
    conn.send_method(0, c.Connection.Close(320, "CONNECTION_FORCED - x", 0, 0))
    assert conn.state == "closing"
