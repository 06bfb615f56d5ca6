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
import struct
import threading
import time

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from pamqp import commands as C
from pamqp import frame as pframe

from compat_tests.support.launcher import Broker

from .probes import MiB, Canary, open_fds, rss_bytes, tracebacks

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "4000"))
_HEADER = b"AMQP\x00\x00\x09\x01"
_SHARED_QUEUES = ("fz.a", "fz.b")  # declared by the test with a length limit: bounded state
_QUEUE_ARGS = {"x-max-length": 20}


def _handshake(channel_max: int = 16, frame_max: int = 131072, heartbeat: int = 0) -> bytes:
    """start-ok, tune-ok, open: sent ahead, without waiting for the server's frames (the
    protocol layer buffers what comes while a login or open is being answered)."""
    return (pframe.marshal(C.Connection.StartOk(
                client_properties={"product": "fuzz", "capabilities": {
                    "connection.blocked": True, "authentication_failure_close": True}},
                mechanism="PLAIN", response="\0guest\0guest"), 0) +
            pframe.marshal(C.Connection.TuneOk(channel_max, frame_max, heartbeat), 0) +
            pframe.marshal(C.Connection.Open("/"), 0))


def _raw(ftype: int, channel: int, payload: bytes, end: int = 0xCE) -> bytes:
    return struct.pack(">BHI", ftype, channel, len(payload)) + payload + bytes([end])


channels = st.sampled_from([0, 1, 1, 1, 2, 3, 65535])
queue_names = st.sampled_from(["", *_SHARED_QUEUES, "fz.missing", "amq.bad"])
tags = st.integers(0, 20) | st.integers(0, 2**63 - 1)
shortstrs = st.text(max_size=10)


def _declare(q: str, passive: bool):
    return C.Queue.Declare(queue=q, exclusive=q == "", passive=passive,
                           arguments=_QUEUE_ARGS if q in _SHARED_QUEUES else {})


routing_keys = st.sampled_from(["", "fz.a", "fz.b", "x.y"])
methods = st.one_of(
    st.just(C.Channel.Open()),
    st.just(C.Channel.Close(200, "bye", 0, 0)),
    st.just(C.Channel.CloseOk()),
    st.builds(C.Channel.Flow, active=st.booleans()),
    st.builds(C.Basic.Qos, prefetch_count=st.integers(0, 5), global_=st.booleans()),
    st.builds(C.Basic.Consume, queue=queue_names,
              consumer_tag=st.sampled_from(["", "c1", "c2"]), no_ack=st.booleans(),
              exclusive=st.booleans()),
    st.builds(C.Basic.Cancel, consumer_tag=st.sampled_from(["c1", "c2", "nope"])),
    st.builds(_declare, queue_names, st.booleans()),
    st.builds(C.Queue.Declare, queue=st.just(""), exclusive=st.just(True),
              arguments=st.dictionaries(
                  st.sampled_from(["x-max-length", "x-message-ttl", "x-expires", "x-bogus"]),
                  st.integers(-5, 100) | shortstrs, max_size=2)),
    st.builds(C.Queue.Bind, queue=queue_names,
              exchange=st.sampled_from(["amq.topic", "fz.x", "nope"]), routing_key=routing_keys),
    st.builds(C.Queue.Purge, queue=queue_names),
    st.builds(C.Queue.Delete, queue=st.sampled_from(["", "fz.missing"])),
    st.builds(C.Exchange.Declare, exchange=st.just("fz.x"), auto_delete=st.just(True),
              exchange_type=st.sampled_from(["topic", "direct", "fanout", "headers"])),
    st.builds(C.Exchange.Delete, exchange=st.sampled_from(["fz.x", "amq.direct", "nope"])),
    st.builds(C.Basic.Get, queue=queue_names, no_ack=st.booleans()),
    st.builds(C.Basic.Ack, delivery_tag=tags, multiple=st.booleans()),
    st.builds(C.Basic.Nack, delivery_tag=tags, multiple=st.booleans(), requeue=st.booleans()),
    st.builds(C.Basic.Reject, delivery_tag=tags, requeue=st.booleans()),
    st.builds(C.Basic.Recover, requeue=st.booleans()),
    st.sampled_from([C.Confirm.Select(), C.Tx.Select(), C.Tx.Commit(), C.Tx.Rollback(),
                     C.Connection.Close(200, "bye", 0, 0)]),
)


@st.composite
def method_frames(draw) -> bytes:
    return pframe.marshal(draw(methods), draw(channels))


@st.composite
def publishes(draw) -> bytes:
    """basic.publish, a content header (properties mostly valid, the size mostly honest) and
    body frames: each part may be missing, lie or come on another channel."""
    ch = draw(channels)
    props = draw(st.sampled_from([
        C.Basic.Properties(),
        C.Basic.Properties(delivery_mode=2, headers={"CC": ["fz.b"], "n": 1}),
        C.Basic.Properties(expiration=draw(st.sampled_from(["0", "10", "-1", "x"]))),
        C.Basic.Properties(user_id=draw(st.sampled_from(["guest", "other"])), priority=3),
    ])).marshal()
    body = draw(st.binary(max_size=300))
    declared = draw(st.sampled_from([len(body)] * 4 + [0, len(body) + 5, 1 << 62]))
    out = pframe.marshal(C.Basic.Publish(
        exchange=draw(st.sampled_from(["", "amq.topic", "fz.x", "nope"])),
        routing_key=draw(st.sampled_from(["fz.a", "fz.b", "x.y", "fz.missing"])),
        mandatory=draw(st.booleans()), immediate=draw(st.booleans()) and draw(st.booleans())),
        ch)
    if draw(st.integers(0, 9)):
        out += _raw(2, draw(st.sampled_from([ch, ch, ch, 2])),
                    struct.pack(">HHQ", draw(st.sampled_from([60, 60, 60, 50])), 0, declared) +
                    props)
    if body and draw(st.integers(0, 9)):
        cut = draw(st.integers(0, len(body)))
        out += _raw(3, ch, body[:cut]) + (_raw(3, ch, body[cut:]) if cut < len(body) else b"")
    return out


@st.composite
def random_frames(draw) -> bytes:
    return _raw(draw(st.sampled_from([1, 2, 3, 8, 0, 4, 9, 206])), draw(channels),
                draw(st.binary(max_size=40)), draw(st.sampled_from([0xCE] * 6 + [0, 0xFF])))


@st.composite
def mutated(draw) -> bytes:
    data = bytearray(draw(method_frames() | publishes()))
    if draw(st.booleans()):
        i = draw(st.integers(0, len(data) - 1))
        data[i] = draw(st.integers(0, 255))
    else:
        data = data[:draw(st.integers(0, len(data)))]
    return bytes(data)


@st.composite
def sessions(draw) -> bytes:
    start = draw(st.sampled_from(["ok"] * 8 + ["no-open", "bad-login", "bad-tune", "garbage"]))
    if start == "ok":
        prefix = _HEADER + _handshake() + pframe.marshal(C.Channel.Open(), 1)
    elif start == "no-open":
        prefix = _HEADER
    elif start == "bad-login":
        prefix = _HEADER + pframe.marshal(C.Connection.StartOk(
            client_properties={}, mechanism="PLAIN", response="\0guest\0wrong"), 0)
    elif start == "bad-tune":
        prefix = _HEADER + _handshake(channel_max=0, frame_max=1000)
    else:
        prefix = draw(st.binary(min_size=1, max_size=12))
    parts = draw(st.lists(method_frames() | publishes() | random_frames() | mutated(),
                          max_size=12))
    return prefix + b"".join(parts)


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
        for q in _SHARED_QUEUES:
            ch.queue_declare(q, arguments=_QUEUE_ARGS)
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
