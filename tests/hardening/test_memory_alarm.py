"""The memory alarm end to end (PROTOCOL-ERRORS.md row 31): with a low
`vm_memory_high_watermark.absolute`, a publisher that pushes the broker's RSS over it gets
`connection.blocked` and is no longer read, a consumer-only connection is still served and
drains the queue, and when the RSS is back under the watermark the publisher gets
`connection.unblocked` and publishes again."""

from __future__ import annotations

import time

import pika
import pytest
from pamqp import commands as C

from compat_tests.support.launcher import Broker
from compat_tests.support.raw import RawClient

from .probes import MiB, rss_bytes, tracebacks

_WATERMARK = 110 * MiB  # a fresh broker sits at 40-50 MiB
_BODY = b"a" * (256 * 1024)


@pytest.fixture
def broker(tmp_path):
    b = Broker(tmp_path, management=False,
               config=f"vm_memory_high_watermark.absolute = {_WATERMARK}\n").start()
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


def test_memory_alarm_blocks_a_publisher_serves_consumers_and_unblocks(broker):
    pid = broker.proc.pid
    assert rss_bytes(pid) < _WATERMARK - 30 * MiB, "the broker starts too big for this test"
    events: list[str] = []
    pub = _connect(broker.url)
    pub.add_on_connection_blocked_callback(lambda _c, frame: events.append(frame.method.reason))
    pub.add_on_connection_unblocked_callback(lambda _c, _f: events.append("unblocked"))
    pch = pub.channel()
    pch.queue_declare("alarm.q")
    published = 0
    while not events and published < 2000:  # 500 MB at most; the alarm comes long before
        pch.basic_publish("", "alarm.q", _BODY)
        published += 1
        pub.process_data_events(time_limit=0)
    assert _wait(pub, lambda: events, 10), f"no connection.blocked after {published} messages"
    assert events == ["low on memory"]
    peak = rss_bytes(pid)
    print(f"\n[memory alarm] watermark={_WATERMARK / MiB:.0f} MiB, blocked after "
          f"{published} x 256 KiB, broker RSS {peak / MiB:.1f} MiB")

    # A consumer-only connection is still served, and drains the queue.
    cons = _connect(broker.url)
    cch = cons.channel()
    depth = cch.queue_declare("alarm.q", passive=True).method.message_count
    assert depth > 0
    got = 0
    for _method, _props, _body in cch.consume("alarm.q", auto_ack=True, inactivity_timeout=5):
        if _method is None:
            break
        got += 1
    cch.cancel()
    assert got >= depth

    assert _wait(pub, lambda: "unblocked" in events, 30), (
        f"no connection.unblocked; broker RSS {rss_bytes(pid) / MiB:.1f} MiB")
    pch.basic_publish("", "alarm.q", b"after")  # the publisher is read again
    pch.confirm_delivery()
    pch.basic_publish("", "alarm.q", b"confirmed")
    cons.close()
    pub.close()
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
