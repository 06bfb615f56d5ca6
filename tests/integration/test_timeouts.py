"""Connection-level timers seen from a raw socket: handshake timeout and missed heartbeats."""

from __future__ import annotations

import socket
import time

import pytest

from compat_tests.support.launcher import Broker


@pytest.fixture
def quick_broker(tmp_path):
    b = Broker(tmp_path, management=False, config="handshake_timeout = 1000\nheartbeat = 1\n").start()
    yield b
    b.stop()


def _wait_closed(sock: socket.socket, limit: float = 15.0) -> bytes:
    """Read until the server closes the socket; return what it sent."""
    sock.settimeout(limit)
    data = b""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk
    raise AssertionError("server never closed the connection")


def test_silent_client_is_dropped_after_handshake_timeout(quick_broker):
    with socket.create_connection(("127.0.0.1", quick_broker.port)) as sock:
        assert _wait_closed(sock) == b""


def test_client_that_stops_after_the_header_is_dropped(quick_broker):
    with socket.create_connection(("127.0.0.1", quick_broker.port)) as sock:
        sock.sendall(b"AMQP\x00\x00\x09\x01")
        sent = _wait_closed(sock)
        assert sent.startswith(b"\x01\x00\x00")  # connection.start came first, then the close


def test_client_missing_heartbeats_is_disconnected(quick_broker):
    from pamqp import commands, frame, header

    def send(sock, channel, method):
        sock.sendall(frame.marshal(method, channel))

    def read_method(sock, buf):
        while True:
            try:
                used, _channel, value = frame.unmarshal(bytes(buf))
            except Exception:  # incomplete frame: read more
                buf += sock.recv(65536)
                continue
            del buf[:used]
            if not isinstance(value, frame.heartbeat.Heartbeat):
                return value

    with socket.create_connection(("127.0.0.1", quick_broker.port)) as sock:
        sock.settimeout(15)
        buf = bytearray()
        sock.sendall(header.ProtocolHeader().marshal())
        assert isinstance(read_method(sock, buf), commands.Connection.Start)
        send(sock, 0, commands.Connection.StartOk(
            client_properties={}, mechanism="PLAIN", response="\x00guest\x00guest"))
        tune = read_method(sock, buf)
        send(sock, 0, commands.Connection.TuneOk(channel_max=tune.channel_max,
                                                 frame_max=tune.frame_max, heartbeat=1))
        send(sock, 0, commands.Connection.Open(virtual_host="/"))
        assert isinstance(read_method(sock, buf), commands.Connection.OpenOk)
        # From now on the client says nothing at all: no heartbeats.
        _wait_closed(sock)
