"""The link proxy (`proxy.py`) against a plain echo server: forwarding, cut (reset and
black-hole), stall and heal behave as the nemesis relies on."""

from __future__ import annotations

import socket
import socketserver
import threading
import time

import pytest

from .proxy import Proxy


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while True:
            try:
                data = self.request.recv(4096)
            except OSError:
                return
            if not data:
                return
            self.request.sendall(data)


@pytest.fixture
def echo():
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address
    server.shutdown()
    server.server_close()


@pytest.fixture
def proxy(echo):
    with Proxy() as p:
        p.add_link("a->b", echo)
        yield p


def _dial(proxy: Proxy) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", proxy._links["a->b"].port), timeout=2)
    s.settimeout(2)
    return s


def _echoes(s: socket.socket, data: bytes = b"ping") -> bool:
    s.sendall(data)
    got = b""
    while len(got) < len(data):
        chunk = s.recv(4096)
        if not chunk:
            return False
        got += chunk
    return got == data


def _closed_by_peer(s: socket.socket) -> bool:
    """The proxy ended this connection: EOF or a reset on the next read."""
    try:
        s.sendall(b"x")
        return s.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True


def test_forwards_both_ways(proxy):
    with _dial(proxy) as s:
        assert _echoes(s, b"hello" * 1000)
    assert proxy.stats("a->b").accepted == 1
    # both ways (the count follows each send, so the echo can arrive a moment before it)
    deadline = time.monotonic() + 2
    while proxy.stats("a->b").bytes < 10000 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert proxy.stats("a->b").bytes == 10000


def test_cut_resets_live_connections_and_refuses_new_ones(proxy):
    s = _dial(proxy)
    assert _echoes(s)
    proxy.cut("a->b")
    assert _closed_by_peer(s)
    s.close()
    try:
        s2 = _dial(proxy)  # the listener accepts, then resets at once
    except ConnectionResetError:
        pass  # the reset arrived before connect() returned (a loaded machine): refused too
    else:
        with s2:
            assert _closed_by_peer(s2)
    assert proxy.stats("a->b").reset == 1
    assert proxy.stats("a->b").refused == 1
    assert proxy.live("a->b") == 0


def test_blackhole_holds_new_connections_silent_until_heal(proxy):
    proxy.cut("a->b", blackhole=True)
    s = _dial(proxy)
    s.settimeout(0.5)
    s.sendall(b"ping")
    with pytest.raises(socket.timeout):
        s.recv(4)  # nothing comes back, and the connection stays open
    proxy.heal("a->b")
    s.settimeout(2)
    assert _closed_by_peer(s)  # the held connection is dropped on heal
    s.close()
    with _dial(proxy) as s2:  # and new ones go through again
        assert _echoes(s2)
    assert proxy.stats("a->b").blackholed == 1


def test_stall_holds_bytes_and_heal_delivers_them(proxy):
    s = _dial(proxy)
    assert _echoes(s)
    proxy.stall("a->b")
    time.sleep(0.05)
    s.settimeout(0.5)
    s.sendall(b"held")
    with pytest.raises(socket.timeout):
        s.recv(4)
    proxy.heal("a->b")
    s.settimeout(2)
    assert s.recv(4) == b"held"  # nothing lost: the same connection carries on
    assert _echoes(s)
    s.close()


def test_heal_after_cut_forwards_again(proxy):
    proxy.cut("a->b")
    proxy.heal("a->b")
    with _dial(proxy) as s:
        assert _echoes(s)
    assert proxy.state("a->b") == "open"


def test_target_down_is_a_refusal():
    with socket.socket() as spare:  # a port nothing listens on
        spare.bind(("127.0.0.1", 0))
        dead = spare.getsockname()
    with Proxy() as p:
        port = p.add_link("x", dead)
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=2)
        except ConnectionResetError:
            return  # refused so fast that the reset beat connect()'s return: a refusal too
        with s:
            s.settimeout(2)
            assert _closed_by_peer(s)
