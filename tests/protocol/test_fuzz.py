"""The sans-IO connection fed fuzzed client byte streams (fuzz_frames.sessions), in chunks of
random sizes, answering every login and open: `feed` never raises, no exception inside it ends a
connection (541 with a traceback), and everything the server writes is well-formed AMQP frames
that pamqp decodes. The same streams go over TCP to a real broker in
tests/hardening/test_fuzz_live.py."""

from hypothesis import given
from hypothesis import strategies as st

from amqp_broker.protocol import ConnectionClosed, LoginRequest, OpenRequest

from .fuzz_frames import sessions
from .peer import parse, server
from .strategies import SETTINGS


@SETTINGS
@given(sessions(), st.lists(st.integers(1, 400), min_size=1, max_size=8))
def test_fuzzed_streams_never_break_the_connection(data, cuts):
    conn = server()
    out = bytearray()
    pos = 0
    i = 0
    while pos < len(data) and not conn.closed:
        step = cuts[i % len(cuts)]
        i += 1
        conn.feed(data[pos:pos + step])
        pos += step
        while events := conn.next_events():
            for ev in events:
                if isinstance(ev, LoginRequest):
                    conn.accept_login()
                elif isinstance(ev, OpenRequest):
                    conn.accept_open()
                elif isinstance(ev, ConnectionClosed):
                    assert not ev.bug, ev.bug
        out += conn.data_to_send()
    parse(bytes(out))  # raises if the server wrote anything but whole, valid frames
