"""Property tests: the struct fast path is byte-for-byte equal to pamqp, both directions."""

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pamqp import body as pbody
from pamqp import commands as c
from pamqp import frame, header

from amqp_broker.protocol import fastpath as fp
from amqp_broker.protocol import properties as pr
from amqp_broker.protocol.output import BY_REFERENCE, Output

from .peer import opened, publish
from .strategies import (
    SETTINGS, bodies, channel, exchange_name, properties, shortstr, tag, u32,
)


def _payload(m) -> bytes:
    """Method frame payload (class/method id + arguments) as pamqp encodes it."""
    return frame.marshal(m, 1)[7:-1]


@SETTINGS
@given(exchange_name, shortstr, st.booleans(), st.booleans())
def test_decode_publish_equals_pamqp(exchange, routing_key, mandatory, immediate):
    m = c.Basic.Publish(exchange=exchange, routing_key=routing_key, mandatory=mandatory,
                        immediate=immediate)
    payload = _payload(m)
    _, _, ref = frame.unmarshal(frame.marshal(m, 1))
    got = fp.decode_publish(payload)
    assert got == (ref.exchange, ref.routing_key, ref.mandatory, ref.immediate)
    assert got == (exchange, routing_key, mandatory, immediate)


@SETTINGS
@given(tag, st.booleans(), st.booleans())
def test_decode_ack_nack_reject_equal_pamqp(delivery_tag, multiple, requeue):
    assert fp.decode_ack(_payload(c.Basic.Ack(delivery_tag, multiple))) == (delivery_tag, multiple)
    assert fp.decode_nack(_payload(c.Basic.Nack(delivery_tag, multiple, requeue))) == (
        delivery_tag, multiple, requeue)
    assert fp.decode_reject(_payload(c.Basic.Reject(delivery_tag, requeue))) == (
        delivery_tag, requeue)


@SETTINGS
@given(tag, st.booleans(), st.binary(max_size=20), st.binary(max_size=20))
def test_decode_ack_inside_a_receive_buffer(delivery_tag, multiple, before, after):
    # The connection's frame loop decodes acks in place: payload = buf[start:end].
    payload = _payload(c.Basic.Ack(delivery_tag, multiple))
    buf = bytearray(before + payload + after)
    start, end = len(before), len(before) + len(payload)
    assert fp.decode_ack(buf, start, end) == (delivery_tag, multiple)
    with pytest.raises(ValueError):
        fp.decode_ack(buf, start, end - 1)  # truncated even though buf goes on


@SETTINGS
@given(channel, shortstr, tag, st.booleans(), exchange_name, shortstr)
def test_write_deliver_equals_pamqp(ch, consumer_tag, delivery_tag, redelivered, ex, rk):
    out = bytearray()
    fp.write_deliver(out, ch, consumer_tag, delivery_tag, redelivered, ex, rk)
    assert bytes(out) == frame.marshal(
        c.Basic.Deliver(consumer_tag, delivery_tag, redelivered, ex, rk), ch)


@SETTINGS
@given(channel, tag, st.booleans(), exchange_name, shortstr, u32)
def test_write_get_ok_equals_pamqp(ch, delivery_tag, redelivered, ex, rk, count):
    out = bytearray()
    fp.write_get_ok(out, ch, delivery_tag, redelivered, ex, rk, count)
    assert bytes(out) == frame.marshal(c.Basic.GetOk(delivery_tag, redelivered, ex, rk, count), ch)


@SETTINGS
@given(channel, st.integers(0, 65535), shortstr, exchange_name, shortstr)
def test_write_return_equals_pamqp(ch, code, text, ex, rk):
    out = bytearray()
    fp.write_return(out, ch, code, text, ex, rk)
    assert bytes(out) == frame.marshal(c.Basic.Return(code, text, ex, rk), ch)


@SETTINGS
@given(channel, tag, st.booleans(), st.booleans())
def test_write_confirm_equals_pamqp(ch, delivery_tag, multiple, ack):
    out = bytearray()
    fp.write_confirm(out, ch, delivery_tag, multiple, ack)
    ref = c.Basic.Ack(delivery_tag, multiple) if ack else c.Basic.Nack(delivery_tag, multiple,
                                                                        requeue=False)
    assert bytes(out) == frame.marshal(ref, ch)


# bodies of BY_REFERENCE bytes or more go out uncopied (frame by frame when split): the same bytes
_large_bodies = st.builds(lambda n, b: b * n, st.integers(BY_REFERENCE - 1, 3 * BY_REFERENCE),
                          st.binary(min_size=1, max_size=3))


@SETTINGS
@given(channel, properties(), bodies | _large_bodies,
       st.sampled_from([4096, 5000, 20000, 131072]))
def test_write_content_equals_pamqp(ch, props, body, frame_max):
    out = Output()
    out.buf += b"before"
    fp.write_content(out, ch, props.marshal(), body, frame_max - 8)
    out.buf += b"after"
    ref = b"before" + _content_frames(ch, props, body, frame_max) + b"after"
    assert len(out) == len(ref)
    assert b"".join(out.take()) == ref and len(out) == 0


@SETTINGS
@given(channel, shortstr, tag, st.booleans(), exchange_name, shortstr, properties(),
       bodies | _large_bodies, st.sampled_from([4096, 5000, 20000, 131072]))
def test_write_delivery_equals_pamqp_the_first_time_and_after(
        ch, consumer_tag, delivery_tag, redelivered, ex, rk, props, body, frame_max):
    # the first two deliveries of a (channel, consumer, exchange, routing key) are written
    # differently from later ones (`_delivery_forms`): the third must match too
    ref = (frame.marshal(c.Basic.Deliver(consumer_tag, delivery_tag, redelivered, ex, rk), ch)
           + _content_frames(ch, props, body, frame_max))
    for _ in range(3):
        out = Output()
        out.buf += b"before"
        fp.write_delivery(out, ch, consumer_tag, delivery_tag, redelivered, ex, rk,
                          props.marshal(), body, frame_max - 8)
        assert len(out) == len(ref) + 6
        assert b"".join(out.take()) == b"before" + ref


def _content_frames(ch, props, body, frame_max) -> bytes:
    ref = frame.marshal(header.ContentHeader(0, len(body), props), ch)
    step = frame_max - 8
    for i in range(0, len(body), step):
        ref += frame.marshal(pbody.ContentBody(body[i : i + step]), ch)
    return ref


@SETTINGS
@given(properties())
def test_properties_round_trip_and_peek(props):
    raw = props.marshal()
    pr.check_properties(raw)
    decoded = pr.decode_properties(raw)
    assert decoded == props
    assert pr.encode_properties(decoded) == raw
    for name in c.Basic.Properties.__slots__:
        if name == "cluster_id":
            continue
        assert pr.peek(raw, name) == getattr(props, name), name
    assert pr.peek_delivery_mode(raw) == props.delivery_mode
    assert pr.peek_headers(raw) == props.headers


@SETTINGS
@given(properties(), st.data())
def test_truncated_properties_are_refused(props, data):
    raw = props.marshal()
    if len(raw) <= 2:
        return
    cut = data.draw(st.integers(min_value=0, max_value=len(raw) - 1))
    try:
        pr.check_properties(raw[:cut])
    except ValueError:
        return
    raise AssertionError(f"truncated properties accepted: {raw[:cut]!r}")


@SETTINGS
@given(exchange_name, shortstr, st.booleans(), properties(), bodies,
       st.sampled_from([4096, 131072]))
def test_publish_event_equals_pamqp_encoding(ex, rk, mandatory, props, body, frame_max):
    conn = opened(frame_max=frame_max)
    conn.feed(publish(1, body, exchange=ex, routing_key=rk, props=props, mandatory=mandatory,
                      frame_max=frame_max))
    [ev] = conn.next_events()
    assert (ev.exchange, ev.routing_key, ev.mandatory, ev.body) == (ex, rk, mandatory, body)
    assert ev.properties == props.marshal()
    assert pr.decode_properties(ev.properties) == props


@SETTINGS
@given(st.binary(min_size=1, max_size=300))
def test_random_bytes_after_handshake_never_raise(garbage):
    conn = opened()
    conn.feed(garbage)
    conn.next_events()
    conn.data_to_send()
    assert conn.state in ("open", "closing", "closed")


@SETTINGS
@given(st.sampled_from([
    c.Basic.Publish(exchange="e", routing_key="k"), c.Basic.Ack(5), c.Basic.Nack(5),
    c.Basic.Reject(5), c.Queue.Declare(queue="q", arguments={"a": 1}), c.Basic.Qos(0, 10),
    c.Basic.Consume(queue="q", consumer_tag="t", arguments={"x": "y"}),
    c.Exchange.Declare(exchange="x", exchange_type="topic"),
]), st.data())
def test_truncated_methods_never_raise(m, data):
    payload = _payload(m)
    cut = data.draw(st.integers(min_value=0, max_value=len(payload) - 1))
    conn = opened()
    conn.feed(bytes([1, 0, 1]) + cut.to_bytes(4, "big") + payload[:cut] + b"\xce")
    events = conn.next_events()
    # A cut that still decodes is fine (e.g. dropping trailing bits); otherwise a clean close.
    assert conn.state == "open" or conn.state in ("closing", "closed") and events


@SETTINGS
@given(st.sampled_from(["fresh", "header", "login", "open", "closing", "channel-closing"]),
       st.lists(st.binary(min_size=1, max_size=60), min_size=1, max_size=4))
def test_random_bytes_in_any_state_never_raise_or_hang(state, chunks):
    from .peer import HEADER, server, to_login
    if state == "fresh":
        conn = server()
    elif state == "header":
        conn = server()
        conn.feed(HEADER)
    elif state == "login":
        conn = to_login(server())
        conn.accept_login()
    else:
        conn = opened()
        if state == "closing":
            conn.close_connection(320, "CONNECTION_FORCED - test")
        elif state == "channel-closing":
            conn.close_channel(1, 406, "PRECONDITION_FAILED - test")
    for chunk in chunks:
        conn.feed(chunk)
    conn.next_events()
    conn.data_to_send()
    assert conn.state in ("await_header", "await_start_ok", "await_tune_ok", "open", "closing",
                          "closed")


@SETTINGS
@given(channel, st.text(alphabet="abcXYZ019-_.:@#,/+ ", max_size=255), u32, u32)
def test_write_declare_ok_equals_pamqp(ch, queue, messages, consumers):
    out = bytearray()
    fp.write_declare_ok(out, ch, queue, messages, consumers)
    assert bytes(out) == frame.marshal(c.Queue.DeclareOk(queue, messages, consumers), ch)


def _events_of(conn) -> list[tuple]:
    out = []
    for ev in conn.next_events():
        if type(ev).__name__ == "Publish":
            out.append(("publish", ev.channel, ev.routing_key, bytes(ev.body)))
        else:
            out.append((type(ev).__name__, getattr(ev, "channel", None),
                        getattr(ev, "delivery_tag", None)))
    return out


@SETTINGS
@given(st.lists(st.tuples(st.binary(max_size=9000), st.booleans()), min_size=1, max_size=6),
       st.lists(st.integers(1, 5000), min_size=1, max_size=6),
       st.sampled_from([4096, 131072]))
def test_a_stream_cut_anywhere_gives_the_same_events(messages, cuts, frame_max):
    """Publishes (bodies up to two frames at frame_max 4096) and acks fed in reads cut at any
    point give the events that the whole stream gives, bodies byte for byte, with nothing
    left over."""
    stream = b"".join(
        publish(1, body, routing_key=f"k{i}", frame_max=frame_max)
        + (frame.marshal(c.Basic.Ack(delivery_tag=i + 1), 1) if ack else b"")
        for i, (body, ack) in enumerate(messages))
    whole = opened(frame_max=frame_max)
    whole.feed(stream)
    want = _events_of(whole)
    assert [e[3] for e in want if e[0] == "publish"] == [b for b, _ in messages]

    conn = opened(frame_max=frame_max)
    got = []
    pos = i = 0
    while pos < len(stream):
        step = cuts[i % len(cuts)]
        i += 1
        conn.feed(stream[pos:pos + step])
        pos += step
        got += _events_of(conn)
    assert got == want
    conn.feed(publish(1, b"after", routing_key="k", frame_max=frame_max))  # nothing left over
    assert _events_of(conn) == [("publish", 1, "k", b"after")]
