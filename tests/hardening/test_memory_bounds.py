"""Broker memory under hostile or slow clients, measured on a real `amqp-broker` process: its RSS
stays within a stated bound above the baseline, whatever the amount of data, and a canary
connection (publish with confirms, consume) stays healthy throughout.

Amounts are small enough for CI; the issue's full sizes by hand:
  SLOW_CONSUMER_MB=1024   a consumer that never reads its socket while 1 GB is published
  HUGE_BODY_MB=200        body frames streamed after a header that declares 2**62 bytes
(default 200 MB for both; numbers go to the report with -s).
"""

from __future__ import annotations

import os
import struct
import time
import urllib.parse

import httpx
import pika
import pytest
from pamqp import commands as C
from pamqp import header

from compat_tests.support.launcher import Broker
from compat_tests.support.raw import RawClient

from .probes import MiB, Canary, PeakRss, rss_bytes, tracebacks

#: RSS growth over the baseline the tests allow: tens of MB, not the data's size.
RSS_BOUND = 64 * MiB
_CHUNK = 64 * 1024


def _report(name: str, **numbers) -> None:
    shown = ", ".join(f"{k}={v / MiB:.1f} MiB" if isinstance(v, int) and v > 4096 else f"{k}={v}"
                      for k, v in numbers.items())
    print(f"\n[{name}] {shown}")


def _queue(b: Broker, name: str) -> dict:
    r = httpx.get(f"{b.mgmt_url}/api/queues/%2F/{urllib.parse.quote(name, safe='')}",
                  auth=("guest", "guest"), timeout=10)
    r.raise_for_status()
    return r.json()


@pytest.fixture
def broker(tmp_path):
    b = Broker(tmp_path).start()
    yield b
    b.stop()


def _baseline(pid: int) -> int:
    time.sleep(1.0)  # the canary and the management API have started
    return rss_bytes(pid)


def test_consumer_that_never_reads_its_socket(broker):
    """No-ack consumer on a raw socket that is never read while SLOW_CONSUMER_MB are published:
    deliveries stop at the connection's output bound and the queue keeps the messages (its
    depth shows them; x-max-length-bytes caps what it keeps), instead of an outgoing buffer
    growing with the data."""
    total = int(os.environ.get("SLOW_CONSUMER_MB", "200")) * MiB
    pid = broker.proc.pid
    canary = Canary(broker.url).start()
    base = _baseline(pid)
    with RawClient(broker.url) as stuck:
        stuck.handshake()
        stuck.open_channel(1)
        stuck.send(1, C.Queue.Declare(queue="slow.q", arguments={"x-max-length-bytes": 16 * MiB}))
        stuck.read_method(C.Queue.DeclareOk)
        stuck.send(1, C.Basic.Consume(queue="slow.q", no_ack=True))
        stuck.read_method(C.Basic.ConsumeOk)
        # From here on the consumer never reads its socket again.
        conn = pika.BlockingConnection(pika.URLParameters(broker.url))
        ch = conn.channel()
        ch.confirm_delivery()
        body = b"m" * _CHUNK
        with PeakRss(pid) as peak:
            for _ in range(total // _CHUNK):
                ch.basic_publish("", "slow.q", body)
        conn.close()
        q = _queue(broker, "slow.q")
        _report("slow consumer", published=total, baseline=base, peak=peak.peak,
                growth=peak.peak - base, queue_messages=q["messages"])
        assert q["messages"] > 0, "the queue should hold what the consumer cannot take"
        assert peak.peak - base < RSS_BOUND
    canary.stop()
    assert canary.errors == [] and canary.lost == set()
    assert tracebacks(broker.log_path) == []


def test_huge_declared_body_is_refused_at_the_header_and_streamed_body_discarded(broker):
    """A content header declaring 2**62 bytes, then HUGE_BODY_MB of body frames: the channel is
    closed (406) when the header arrives, the frames are discarded as they arrive."""
    total = int(os.environ.get("HUGE_BODY_MB", "200")) * MiB
    pid = broker.proc.pid
    canary = Canary(broker.url).start()
    base = _baseline(pid)
    with RawClient(broker.url, timeout=30) as raw:
        raw.handshake()
        raw.open_channel(1)
        raw.send(1, C.Basic.Publish(exchange="", routing_key="nowhere"))
        raw.send(1, header.ContentHeader(0, 1 << 62, C.Basic.Properties()))
        close = raw.read_method()
        assert isinstance(close, C.Channel.Close) and close.reply_code == 406
        chunk = struct.pack(">BHI", 3, 1, 131064) + b"x" * 131064 + b"\xce"
        with PeakRss(pid) as peak:
            for _ in range(total // 131064):
                raw.send_raw(chunk)
        raw.send(1, C.Channel.CloseOk())
        raw.send(1, C.Channel.Open())  # the channel number is free again
        assert isinstance(raw.read_method(), C.Channel.OpenOk)
    _report("2**62 declared body", streamed=total, baseline=base, peak=peak.peak,
            growth=peak.peak - base)
    assert peak.peak - base < RSS_BOUND
    canary.stop()
    assert canary.errors == [] and canary.lost == set()
    assert tracebacks(broker.log_path) == []
