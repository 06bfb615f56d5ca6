"""The memory alarm end to end (PROTOCOL-ERRORS.md row 31): with a low
`vm_memory_high_watermark.absolute`, a publisher that pushes the broker's RSS over it gets
`connection.blocked` and is no longer read, a consumer-only connection is still served and
drains the queue, and when the RSS is back under the watermark the publisher gets
`connection.unblocked` and publishes again."""

from __future__ import annotations

import threading
import time

import pika
import pytest
from pamqp import body, frame, header
from pamqp import commands as C

from compat_tests.support.launcher import Broker
from compat_tests.support.raw import RawClient

from .probes import MiB, rss_bytes, tracebacks

_WATERMARK = 110 * MiB  # a fresh broker sits at 40-50 MiB
_BODY = b"a" * (256 * 1024)


@pytest.fixture
def broker(tmp_path):
    # the queue keeps its messages in memory (no paging out), so that publishing raises RSS
    b = Broker(tmp_path, management=False,
               config=f"vm_memory_high_watermark.absolute = {_WATERMARK}\n"
                      "classic_queue.memory_budget_bytes = 1GiB\n").start()
    yield b
    b.stop()


def _connect(url: str) -> pika.BlockingConnection:
    params = pika.URLParameters(url)
    params.blocked_connection_timeout = 120
    return pika.BlockingConnection(params)


def _wait(conn: pika.BlockingConnection, cond, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not cond() and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.1)
    return cond()


def _publisher(raw: RawClient, stop: threading.Event, sent: list) -> None:
    """Publish 256 KiB messages on channel 1 until stopped or the broker stops reading (a
    raw socket: pika's publish would wait for its write buffer to drain, which a blocked
    connection's never does)."""
    message = (frame.marshal(C.Basic.Publish(exchange="", routing_key="alarm.q"), 1) +
               frame.marshal(header.ContentHeader(0, len(_BODY), C.Basic.Properties()), 1) +
               b"".join(frame.marshal(body.ContentBody(_BODY[i:i + 131064]), 1)
                        for i in range(0, len(_BODY), 131064)))  # frame_max 131072
    try:
        while not stop.is_set():
            raw.sock.sendall(message)
            sent.append(1)
    except OSError:  # socket.timeout: the broker stopped reading
        pass


def _next_method(raw: RawClient, kind, timeout: float):
    """The next method of type `kind` (others skipped), or None within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            got = raw.read_method()
        except OSError:  # socket.timeout: nothing yet
            continue
        if got is None or isinstance(got, kind):
            return got
    return None


def test_memory_alarm_blocks_a_publisher_serves_consumers_and_unblocks(broker):
    pid = broker.proc.pid
    assert rss_bytes(pid) < _WATERMARK - 30 * MiB, "the broker starts too big for this test"
    with RawClient(broker.url, timeout=2) as raw:
        raw.handshake(capabilities={"connection.blocked": True})
        raw.open_channel(1)
        raw.send(1, C.Queue.Declare(queue="alarm.q"))
        raw.read_method(C.Queue.DeclareOk)
        stop, sent = threading.Event(), []
        publisher = threading.Thread(target=_publisher, args=(raw, stop, sent), daemon=True)
        publisher.start()
        blocked = _next_method(raw, C.Connection.Blocked, 30)
        stop.set()
        publisher.join(10)
        assert blocked is not None, f"no connection.blocked after {len(sent)} messages"
        assert blocked.reason == "low on memory"
        print(f"\n[memory alarm] watermark={_WATERMARK / MiB:.0f} MiB, blocked after "
              f"{len(sent)} x 256 KiB sent, broker RSS {rss_bytes(pid) / MiB:.1f} MiB")

        # A consumer-only connection is still served, and drains the queue.
        cons = _connect(broker.url)
        cch = cons.channel()
        depth = cch.queue_declare("alarm.q", passive=True).method.message_count
        assert depth > 0
        got = 0
        for _method, _props, _body in cch.consume("alarm.q", auto_ack=True,
                                                  inactivity_timeout=5):
            if _method is None:
                break
            got += 1
        cch.cancel()
        cons.close()
        assert got >= depth

        unblocked = _next_method(raw, C.Connection.Unblocked, 30)
        assert unblocked is not None, (
            f"no connection.unblocked; broker RSS {rss_bytes(pid) / MiB:.1f} MiB")
        # The publisher is read again: what it sent while blocked arrives, and a confirm comes.
        raw.sock.settimeout(30)
        raw.send(1, C.Confirm.Select())
        assert _next_method(raw, C.Confirm.SelectOk, 30) is not None
        raw.publish(1, "", "alarm.q", b"after")
        assert _next_method(raw, C.Basic.Ack, 30) is not None
    assert tracebacks(broker.log_path) == []


def test_disk_alarm_blocks_publishers_and_serves_consumers(tmp_path):
    # More free space asked for than any disk has: the disk alarm is set from the start.
    with Broker(tmp_path, management=False,
                config="disk_free_limit.absolute = 1000000GB\n") as b:
        with RawClient(b.url) as raw:
            raw.handshake(capabilities={"connection.blocked": True})
            raw.open_channel(1)
            raw.send(1, C.Queue.Declare(queue="disk.q"))  # not yet a publisher: served
            raw.read_method(C.Queue.DeclareOk)
            raw.publish(1, "", "disk.q", b"one")
            blocked = raw.read_method()
            assert isinstance(blocked, C.Connection.Blocked)
            assert blocked.reason == "low on disk space"
            cons = _connect(b.url)
            ok = cons.channel().queue_declare("disk.q", passive=True)
            assert ok.method.message_count == 1  # published before the reader stopped
            cons.close()
            # (a blocked connection is not read, so its close would not be either: the
            # socket is just dropped, as a client would after blocked_connection_timeout)
