"""Live fuzz: hypothesis generates frame sequences and sends each over a new TCP connection to a
real `amqp-broker` process, while a canary connection publishes with confirms and consumes.

Each example: the protocol header and a valid handshake (most of the time; else a broken one),
then a mix of well-formed methods (channel, queue, exchange, basic, confirm, tx), contents with
random sizes, frames of random type / channel / payload / end octet, and mutated frames (a byte
flipped, cut short). The reply is read until the broker goes quiet or closes, then the socket is
closed (`Drainer`, in a thread, so examples do not wait for replies). Afterwards: the broker
still runs, its log has no traceback, no reply ever said
INTERNAL_ERROR (an exception in a handler), the canary lost nothing, and RSS and open file
descriptors come back to near their baseline once the fuzz connections are gone.

Budget: FUZZ_EXAMPLES (default 4000, about 30 s on a shared 2-core machine); by hand e.g.
`FUZZ_EXAMPLES=50000 python3 -m pytest tests/hardening/test_fuzz_live.py -s`. FUZZ_SEED fixes
hypothesis' seed (the failing example is printed either way).
"""

from __future__ import annotations

import os
import queue
import selectors
import socket
import threading
import time

import pytest
from hypothesis import HealthCheck, given, seed, settings

from compat_tests.support.launcher import Broker
from tests.protocol.fuzz_frames import QUEUE_ARGS, SHARED_QUEUES, sessions

from .probes import MiB, Canary, open_fds, rss_bytes, tracebacks

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "4000"))


class Drainer:
    """Reads the broker's replies to the fuzz connections in a thread, so an example costs only
    its connect and send: each socket is read until the broker closes it or for `keep` seconds,
    then closed. A reply holding INTERNAL_ERROR (an exception in a handler) is kept with the
    input that caused it, in `bad`."""

    def __init__(self, keep: float = 1.0, window: int = 200) -> None:
        self.keep = keep
        self.window = window
        self.bad: list[tuple[bytes, bytes]] = []
        self._incoming: queue.SimpleQueue = queue.SimpleQueue()
        self._open = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def send(self, port: int, data: bytes) -> None:
        while self._open >= self.window:  # bound the sockets in flight
            time.sleep(0.002)
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        try:
            sock.sendall(data)
        except (ConnectionResetError, BrokenPipeError):
            pass  # the broker closed first (e.g. a bad protocol header); read what it said
        sock.setblocking(False)
        self._open += 1
        self._incoming.put((sock, data))

    def close(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while self._open and time.monotonic() < deadline:
            time.sleep(0.05)
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        sel = selectors.DefaultSelector()
        while not (self._stop.is_set() and not sel.get_map()):
            while True:
                try:
                    sock, data = self._incoming.get_nowait()
                except queue.Empty:
                    break
                sel.register(sock, selectors.EVENT_READ,
                             [data, bytearray(), time.monotonic() + self.keep])
            for key, _ in sel.select(0.01):
                data, got, _ = key.data
                try:
                    chunk = key.fileobj.recv(65536)
                except BlockingIOError:
                    continue
                except OSError:
                    chunk = b""
                if chunk and len(got) < 1 << 20:
                    got += chunk
                    continue
                self._finish(sel, key.fileobj, data, got)
            now = time.monotonic()
            for key in list(sel.get_map().values()):
                if key.data[2] < now:
                    self._finish(sel, key.fileobj, key.data[0], key.data[1])
        sel.close()

    def _finish(self, sel, sock, data: bytes, got: bytearray) -> None:
        sel.unregister(sock)
        sock.close()
        self._open -= 1
        if b"INTERNAL_ERROR" in got:
            self.bad.append((data, bytes(got[:400])))


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory):
    """A broker with its shared queues, a canary and the baseline; checked after every example
    in `test_live_fuzz` and as a whole by `test_broker_healthy_after_fuzz`."""
    b = Broker(tmp_path_factory.mktemp("fuzz"), management=False).start()
    try:
        import pika
        conn = pika.BlockingConnection(pika.URLParameters(b.url))
        ch = conn.channel()
        for q in SHARED_QUEUES:
            ch.queue_declare(q, arguments=QUEUE_ARGS)
        conn.close()
        canary = Canary(b.url).start()
        time.sleep(1.0)
        state = {"broker": b, "canary": canary, "rss": rss_bytes(b.proc.pid),
                 "fds": open_fds(b.proc.pid), "examples": 0, "internal_errors": []}
        yield state
    finally:
        b.stop()


_settings = settings(max_examples=EXAMPLES, deadline=None, database=None,
                     suppress_health_check=list(HealthCheck))


def _seeded(f):
    return seed(int(os.environ["FUZZ_SEED"]))(f) if os.environ.get("FUZZ_SEED") else f


@pytest.mark.timeout(120 + EXAMPLES // 25)  # about 100 connections a second, less when busy
def test_live_fuzz(fuzzed):
    b = fuzzed["broker"]
    drainer = Drainer()

    @_seeded
    @_settings
    @given(sessions())
    def one(data):
        drainer.send(b.port, data)
        fuzzed["examples"] += 1
        assert b.proc.poll() is None, "the broker died"

    started = time.monotonic()
    try:
        one()
    finally:
        drainer.close()
    print(f"\n[fuzz] {fuzzed['examples']} connections in {time.monotonic() - started:.1f} s")
    # (a failing input can be replayed by sending its bytes to a broker: they are printed here)
    assert drainer.bad == [], drainer.bad[:3]


def test_broker_healthy_after_fuzz(fuzzed):
    b = fuzzed["broker"]
    assert fuzzed["examples"] > 0, "run with test_live_fuzz"
    pid = b.proc.pid
    canary = fuzzed["canary"]
    # Fuzz connections end within the silent-close delay (3 s) or a client-close drain.
    deadline = time.monotonic() + 40
    while open_fds(pid) > fuzzed["fds"] + 2 and time.monotonic() < deadline:
        time.sleep(0.5)
    fds = open_fds(pid)
    rss = rss_bytes(pid)
    canary.stop()
    print(f"\n[fuzz] baseline RSS {fuzzed['rss'] / MiB:.1f} MiB, after {rss / MiB:.1f} MiB; "
          f"fds {fuzzed['fds']} -> {fds}; canary {len(canary.confirmed)} confirmed, "
          f"{len(canary.received)} received")
    assert b.proc.poll() is None
    assert tracebacks(b.log_path) == []
    assert canary.errors == [] and canary.lost == set()
    assert fds <= fuzzed["fds"] + 2
    assert rss - fuzzed["rss"] < 32 * MiB
