"""`sockio.DirectSocket`: a session's reads and writes on a plain TCP socket, over real
loopback connections: data in order whether the kernel takes a write whole or not (pieces of
every kind, more than one writev takes), EOF, trio's errors for a reset and for a closed
socket; `JoiningStream` for other streams."""

import socket
import struct

import pytest
import trio
import trio.testing

from amqp_broker.server.sockio import DirectSocket, JoiningStream, for_stream

pytestmark = pytest.mark.trio


async def _pair():
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    client = await trio.open_tcp_stream("127.0.0.1", port)
    server = await listeners[0].accept()
    await listeners[0].aclose()
    return DirectSocket(server), server, client


async def test_plain_streams_get_a_direct_socket_others_are_used_as_they_are():
    direct, server, client = await _pair()
    assert isinstance(for_stream(server), DirectSocket)
    other = trio.testing.MemorySendStream()
    joining = for_stream(other)
    assert isinstance(joining, JoiningStream)
    await joining.send_pieces([b"ab", bytearray(b"cd"), memoryview(b"xef")[1:]])
    assert other.get_data_nowait() == b"abcdef"
    await server.aclose()
    await client.aclose()


async def test_reads_what_the_peer_sent_then_eof():
    direct, server, client = await _pair()
    await client.send_all(b"hello")
    assert await direct.receive_some(100) == b"hello"
    async with trio.open_nursery() as nursery:  # a read that waits for the socket
        got = []

        async def read():
            got.append(await direct.receive_some(100))
        nursery.start_soon(read)
        await trio.sleep(0.05)
        await client.send_all(b"later")
    assert got == [b"later"]
    await client.aclose()
    assert await direct.receive_some(100) == b""
    await server.aclose()


async def test_writes_larger_than_the_socket_buffer_arrive_whole_and_in_order():
    direct, server, client = await _pair()
    big = bytes(range(256)) * (32 * 1024)  # 8 MiB: the kernel takes part, then waits
    small = [bytes([i % 251]) * (i % 7 + 1) for i in range(3000)]  # more than IOV_MAX pieces
    pieces = [big[:100], bytearray(big[100:5000]), memoryview(big)[5000:], *small, big]
    data = b"".join(pieces) + b"!"
    received = bytearray()

    async def read_slowly():
        while len(received) < len(data):
            chunk = await client.receive_some(65536)
            assert chunk
            received.extend(chunk)
            await trio.sleep(0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(read_slowly)
        await direct.send_pieces(pieces)
        await direct.send_pieces([b"!"])
    assert bytes(received) == data
    await server.aclose()
    await client.aclose()


async def test_a_reset_peer_is_a_broken_resource():
    direct, server, client = await _pair()
    client.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    await client.aclose()  # RST
    await trio.sleep(0.05)
    with pytest.raises(trio.BrokenResourceError):
        await direct.receive_some(100)
    await server.aclose()


async def test_a_closed_socket_is_a_closed_resource():
    direct, server, client = await _pair()
    await server.aclose()
    with pytest.raises(trio.ClosedResourceError):
        await direct.receive_some(100)
    with pytest.raises(trio.ClosedResourceError):
        await direct.send_pieces([b"x"])
    await client.aclose()


async def test_after_a_short_read_the_next_waits_for_data_and_gets_what_came_meanwhile():
    direct, server, client = await _pair()
    await client.send_all(b"one")
    await trio.sleep(0.05)
    assert await direct.receive_some(100) == b"one"      # less than asked: waits next time
    await client.send_all(b"two")
    await trio.sleep(0.05)
    with trio.fail_after(5):                              # already there: not waited for
        assert await direct.receive_some(100) == b"two"
    await client.send_all(b"x" * 150)
    await trio.sleep(0.05)
    assert await direct.receive_some(100) == b"x" * 100  # as much as asked: reads again at once
    assert await direct.receive_some(100) == b"x" * 50
    await server.aclose()
    with pytest.raises(trio.ClosedResourceError):         # closed after a short read
        await direct.receive_some(100)
    await client.aclose()


async def test_blocked_since_is_set_while_a_write_waits_for_a_client_that_does_not_read():
    """What `Session.client_lagging` reads: when a send began to wait for room (None while
    the kernel takes writes whole), cleared once the client has read everything."""
    direct, server, client = await _pair()
    assert direct.blocked_since is None
    await direct.send_pieces([b"x" * 1000])  # taken whole: no wait
    assert direct.blocked_since is None
    big = b"y" * (16 << 20)  # more than the socket buffers hold
    async with trio.open_nursery() as nursery:
        nursery.start_soon(direct.send_pieces, [big])
        await trio.sleep(0.2)
        since = direct.blocked_since
        assert since is not None and trio.current_time() - since >= 0.2 - 0.01
        got = 0
        while got < len(big) + 1000:
            got += len(await client.receive_some(1 << 20))
    assert direct.blocked_since is None
    await server.aclose()
    await client.aclose()
