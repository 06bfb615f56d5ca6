"""The frame loop reads an open connection's input in place (`ServerConnection.feed` copies only
the frame a read left incomplete and the unparsed tail; that any cut of a stream gives the same
events is test_fastpath_props.py's `test_a_stream_cut_anywhere_gives_the_same_events`): an error
in what follows a topped-up frame is still answered as RabbitMQ does."""

from hypothesis import given
from hypothesis import strategies as st
from pamqp import commands as c

from .peer import method, opened, parse, publish, raw_frame
from .strategies import SETTINGS

_FRAME_MAX = 4096


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
