"""Per-connection rate limits (`connection_limits.channel_opens_per_second`,
`connection_limits.queue_declares_per_second`) against an `amqp-broker` process: a client going
faster is slowed down, not refused: the connection shows state "flow" while the broker waits
before reading more of its input, every request is still answered, and other connections are
served meanwhile. And `disk_free_limit.relative`, the disk limit as a multiple of RAM."""

from __future__ import annotations

import os
import time

import httpx
import pika
from pamqp import commands as C
from pamqp import frame

from compat_tests.support.launcher import Broker
from compat_tests.support.pika_util import pika_connections
from compat_tests.support.raw import RawClient

RATE = 20  # a second; a burst of RATE passes at once


def _states(b: Broker) -> list[str]:
    rows = httpx.get(b.mgmt_url + "/api/connections", auth=("guest", "guest"), timeout=10).json()
    return [r["state"] for r in rows]


def _wait(predicate, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def _read_methods(raw: RawClient, kind, count: int) -> int:
    seen = 0
    while seen < count:
        if isinstance(raw.read_method(), kind):
            seen += 1
    return seen


def test_fast_channel_opens_are_slowed_not_refused_and_others_are_served(tmp_path):
    config = f"connection_limits.channel_opens_per_second = {RATE}\n"
    with Broker(tmp_path, config=config) as b:
        pairs = 5 * RATE  # a burst and four seconds' worth beyond it
        with RawClient(b.url, timeout=30) as raw:
            raw.handshake()
            raw.send_raw((frame.marshal(C.Channel.Open(), 1) +
                          frame.marshal(C.Channel.Close(200, "", 0, 0), 1)) * pairs)
            assert _wait(lambda: "flow" in _states(b)), "the fast client was never slowed"
            # Another connection is not held back by the first one's debt.
            with pika_connections() as connect:
                other = connect(b.url)
                channels = [other.channel() for _ in range(RATE)]
                assert all(c.is_open for c in channels)
                assert "flow" in _states(b)  # the first one still waits out its debt
            assert _read_methods(raw, C.Channel.CloseOk, pairs) == pairs  # all answered
            raw.open_channel(1)  # and it is served normally afterwards
        assert _wait(lambda: _states(b) == [])


def test_fast_queue_declares_are_slowed_not_refused(tmp_path):
    config = f"connection_limits.queue_declares_per_second = {RATE}\n"
    with Broker(tmp_path, config=config) as b:
        count = 3 * RATE
        with RawClient(b.url, timeout=30) as raw:
            raw.handshake()
            raw.open_channel(1)
            raw.send_raw(b"".join(frame.marshal(C.Queue.Declare(queue=f"rl.{i}"), 1)
                                  for i in range(count)))
            assert _wait(lambda: "flow" in _states(b)), "the fast client was never slowed"
            assert _read_methods(raw, C.Queue.DeclareOk, count) == count
        queues = httpx.get(b.mgmt_url + "/api/queues", auth=("guest", "guest"), timeout=10).json()
        assert sorted(q["name"] for q in queues) == sorted(f"rl.{i}" for i in range(count))


def test_disk_free_limit_relative_is_a_multiple_of_physical_memory(tmp_path):
    # 4096 times the RAM: more free space than any disk has, so the alarm is on.
    with Broker(tmp_path, config="disk_free_limit.relative = 4096\n") as b:
        ram = _physical_memory()

        def node():
            return httpx.get(b.mgmt_url + "/api/nodes", auth=("guest", "guest"), timeout=10).json()[0]
        assert _wait(lambda: node()["disk_free_alarm"])
        assert node()["disk_free_limit"] == ram * 4096
        with pika_connections() as connect:
            conn = connect(b.url)
            ok = conn.channel().queue_declare("rl.disk")  # consumers and declares still served
            assert ok.method.queue == "rl.disk"


def _physical_memory() -> int:
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
