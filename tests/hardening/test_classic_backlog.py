"""A classic queue backlog on a real broker pages out of memory and comes back in order.

N x 16 KiB messages go to a durable classic queue (persistent, with confirms) and to a
non-durable one (transient). The broker's RSS grows by a small fraction of a body per queued
message (the default 8 MiB budget per queue; the rest is in `<data_dir>/spill`, or, for the
persistent ones, only in the journal), the management API shows them paged out, and everything is
consumed back whole and in order. Then, with the durable backlog in place, kill -9 and a
restart: every persistent message is back, in order, flagged redelivered only if it had been
delivered; the restarted broker pages the recovered backlog out again instead of holding it.

N: CLASSIC_BACKLOG_N (default 6000, i.e. ~94 MiB per queue).
"""

from __future__ import annotations

import os

import httpx
import pika

from compat_tests.support.launcher import Broker

from .probes import MiB, consume_numbered, numbered, rss_bytes, settle_rss

N = int(os.environ.get("CLASSIC_BACKLOG_N", "6000"))
SIZE = 16 * 1024


def _body(i: int) -> bytes:
    return numbered(i, SIZE)


def _publish(url: str, name: str, n: int, *, durable: bool) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare(name, durable=durable)
        props = pika.BasicProperties(delivery_mode=2 if durable else 1)
        for i in range(n):
            ch.basic_publish("", name, _body(i), props)
    finally:
        conn.close()


def _consume(url: str, name: str, n: int, *, durable: bool, ack: bool = True
             ) -> list[tuple[int, bool]]:
    """The first `n` of the queue's N messages as (number, redelivered)."""
    return consume_numbered(url, name, n, SIZE, total=N, durable=durable, ack=ack)


def _spill_bytes(data_dir) -> int:
    return sum(os.path.getsize(os.path.join(root, f))
               for root, _, files in os.walk(os.path.join(data_dir, "spill")) for f in files)


def _queue_info(b: Broker, name: str) -> dict:
    r = httpx.get(f"{b.mgmt_url}/api/queues/%2F/{name}", auth=("guest", "guest"), timeout=30)
    r.raise_for_status()
    return r.json()


def test_a_classic_backlog_pages_out_and_comes_back_in_order(tmp_path):
    b = Broker(tmp_path / "b").start()
    try:
        _publish(b.url, "warm", N, durable=True)
        _consume(b.url, "warm", N, durable=True)
        base = rss_bytes(b.proc.pid)
        _publish(b.url, "durable", N, durable=True)
        _publish(b.url, "transient", N, durable=False)
        after = settle_rss(b.proc.pid, base + 2 * N * SIZE // 8, timeout=10.0)
        per_message = (after - base) / (2 * N)
        print(f"\nclassic backlog of 2 x {N} x 16 KiB: RSS {base / MiB:.0f} -> "
              f"{after / MiB:.0f} MiB ({per_message:.0f} B per queued message), spill "
              f"{_spill_bytes(b.data_dir) / MiB:.0f} MiB")
        assert per_message < SIZE / 4, f"{per_message:.0f} B per 16 KiB message: bodies held"
        # the transient queue's overflow is in the spill store; the durable queue's persistent
        # messages are paged out through the journal, which has them anyway: no second copy
        spill = _spill_bytes(b.data_dir)
        assert N * SIZE - 16 * MiB < spill < N * SIZE + 16 * MiB
        info = _queue_info(b, "durable")
        assert info["messages"] == N and info["messages_paged_out"] > N // 2
        assert info["message_bytes_paged_out"] == info["messages_paged_out"] * SIZE
        assert _consume(b.url, "transient", N, durable=False) == [(i, False) for i in range(N)]
        # the durable one: a first half delivered and not acked, then kill -9
        assert [i for i, _ in _consume(b.url, "durable", N // 2, durable=True, ack=False)] == \
            list(range(N // 2))
        b.kill()
        b.start(timeout=120)
        restarted = rss_bytes(b.proc.pid)
        assert _queue_info(b, "durable")["messages_paged_out"] > N // 2
        back = _consume(b.url, "durable", N, durable=True)
        assert [i for i, _ in back] == list(range(N))
        assert [r for _, r in back] == [True] * (N // 2) + [False] * (N - N // 2)
        print(f"after kill -9: RSS {restarted / MiB:.0f} MiB with the backlog recovered")
        assert restarted < base + N * SIZE // 4
        assert _spill_bytes(b.data_dir) < 64 * MiB   # read back: only segments being written
    finally:
        b.stop()
