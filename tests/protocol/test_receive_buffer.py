"""The frame loop reads large input in place (`ServerConnection.feed` copies only the frame a
read left incomplete and the unparsed tail): what a stream means must not depend on where the
reads cut it, however large they are."""

from hypothesis import given
from hypothesis import strategies as st
from pamqp import commands as c

from .peer import method, opened, parse, publish, raw_frame
from .strategies import SETTINGS

_FRAME_MAX = 4096


def _stream(bodies: list[int], acks: bool) -> bytes:
    out = b""
    for n, size in enumerate(bodies):
        out += publish(1, bytes([n % 251]) * size, routing_key=f"k{n}", frame_max=_FRAME_MAX)
        if acks:
            out += method(1, c.Basic.Ack(n + 1))
    return out


def _feed(data: bytes, cuts: list[int]) -> tuple[list, bytes]:
    conn = opened(frame_max=_FRAME_MAX)
    events = []
    pos = i = 0
    while pos < len(data):
        step = cuts[i % len(cuts)]
        i += 1
        conn.feed(data[pos:pos + step])
        pos += step
        events += conn.next_events()
    return events, conn.data_to_send()


@SETTINGS
@given(st.lists(st.integers(0, 3 * _FRAME_MAX), min_size=1, max_size=8), st.booleans(),
       st.lists(st.integers(1, 6 * _FRAME_MAX), min_size=1, max_size=6))
def test_the_events_do_not_depend_on_where_the_reads_cut_the_stream(bodies, acks, cuts):
    data = _stream(bodies, acks)
    whole, out = _feed(data, [len(data)])
    assert out == b""
    assert [(e.routing_key, len(e.body)) for e in whole if hasattr(e, "body")] == [
        (f"k{n}", size) for n, size in enumerate(bodies)]
    cut, cut_out = _feed(data, cuts)
    assert cut == whole
    assert cut_out == out


@SETTINGS
@given(st.integers(0, 3 * _FRAME_MAX), st.integers(1, 200))
def test_a_bad_frame_end_after_a_topped_up_frame_still_closes_the_connection(size, at):
    good = publish(1, b"x" * size, frame_max=_FRAME_MAX)
    bad = raw_frame(1, 1, method(1, c.Basic.Ack(1))[7:-1], end=0x00)
    data = good + bad
    conn = opened(frame_max=_FRAME_MAX)
    at = min(at, len(good) - 1)
    conn.feed(data[:at])      # leaves the first frame incomplete
    conn.feed(data[at:])      # completes it, then reads the rest in place
    closes = [f for _, f in parse(conn.data_to_send()) if isinstance(f, c.Connection.Close)]
    assert [f.reply_code for f in closes] == [501]
    bodies = [e.body for e in conn.next_events() if hasattr(e, "body")]
    assert bodies == [b"x" * size]
