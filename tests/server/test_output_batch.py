"""`OutputBatch` and `Session.flush_now` over a real loopback connection: inside a batch an
idle writer is not woken and the batch's end writes; what the kernel does not take goes
through the writer, whole and in order; outside a batch `wake` wakes the writer as before."""

import pytest
import trio

from amqp_broker.server.session import Session
from tests.server.test_session_events import _FakeBroker

pytestmark = pytest.mark.trio


async def _session_with_writer(nursery):
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    client = await trio.open_tcp_stream("127.0.0.1", port)
    server = await listeners[0].accept()
    await listeners[0].aclose()
    broker = _FakeBroker()
    session = Session(broker, server, peer=("127.0.0.1", port))
    nursery.start_soon(session._writer)
    await trio.sleep(0.01)   # the writer parks, idle
    return broker.output_batch, session, client


async def _read(client, n: int) -> bytes:
    got = bytearray()
    with trio.fail_after(10):
        while len(got) < n:
            got += await client.receive_some(1 << 20)
    return bytes(got)


async def test_inside_a_batch_the_end_writes_and_the_writer_is_not_woken():
    async with trio.open_nursery() as nursery:
        batch, session, client = await _session_with_writer(nursery)
        with batch:
            session.conn.put_output(b"first ")
            session.wake()
            with batch:                       # nested: only the outer end writes
                session.conn.put_output(b"second")
                session.wake()
            assert session.conn.output_size() == 12 and not session._wake_event.is_set()
        assert session.conn.output_size() == 0 and not session._wake_event.is_set()
        assert session.send_cnt == 1
        assert await _read(client, 12) == b"first second"
        session.conn.put_output(b"!")       # outside a batch: the writer
        session.wake()
        assert session._wake_event.is_set()
        assert await _read(client, 1) == b"!"
        nursery.cancel_scope.cancel()


async def test_what_the_kernel_does_not_take_goes_through_the_writer_in_order():
    async with trio.open_nursery() as nursery:
        batch, session, client = await _session_with_writer(nursery)
        big = bytes(range(256)) * (64 * 1024)  # 16 MiB: more than loopback's buffers hold
        with batch:
            session.conn.put_output(big)
            session.wake()
        assert session._unsent and session._wake_event.is_set()
        assert session.output_full(1 << 20)   # the rest counts against the output bound
        with batch:                            # the writer is busy: not written here
            session.conn.put_output(b"tail")
            session.wake()
        assert await _read(client, len(big) + 4) == big + b"tail"
        await trio.sleep(0.01)
        assert not session._unsent and session._in_flight == 0
        nursery.cancel_scope.cancel()



async def test_functions_at_the_end_run_after_the_output_is_written_and_their_own_goes_out_too():
    """`at_end` (the journal's write of a publish): the batch's output is written first (a
    delivery does not wait for the fsync), then the function, and what it wakes (a confirm)
    is written before the batch closes; outside a batch `at_end` declines."""
    async with trio.open_nursery() as nursery:
        batch, session, client = await _session_with_writer(nursery)
        seen = []

        def at_end():
            seen.append(session.conn.output_size())   # the delivery is written already
            session.conn.put_output(b"confirm")
            session.wake()

        assert batch.at_end(at_end) is False and seen == []
        with batch:
            session.conn.put_output(b"delivery ")
            session.wake()
            assert batch.at_end(at_end) is True
            assert batch.at_end(at_end) is True   # once per batch, however often asked
        assert seen == [0] and batch.active == 0
        assert await _read(client, len(b"delivery confirm")) == b"delivery confirm"
        nursery.cancel_scope.cancel()
