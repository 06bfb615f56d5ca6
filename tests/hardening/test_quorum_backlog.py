"""A quorum queue backlog on a real broker: the bodies live in the Raft log, not in memory.

The same backlog of N messages is published with confirms to a durable quorum queue twice, on
two brokers: 16 B bodies, then 64 KiB bodies. The process's RSS growth per queued message
(VmRSS from /proc, before and after the backlog) must not follow the body size: with 64 KiB
bodies it stays a small fraction of 64 KiB per message (what is held in memory is bounded: the
WAL's memory tables, the Raft node's recent entries, a small read cache). Then kill -9 and a
restart with the backlog in place: every message comes back, in publish order, whole.

N: QUORUM_BACKLOG_N (default 4000, i.e. 250 MiB of 64 KiB bodies on disk).
"""

from __future__ import annotations

import os
import time

import pika

from compat_tests.support.launcher import Broker
from quorum.log.snapshot import parse_checkpoint_name

from .probes import MiB, consume_numbered, numbered, rss_bytes, settle_rss

N = int(os.environ.get("QUORUM_BACKLOG_N", "4000"))
BIG = 64 * 1024
_body = numbered


def _declare(ch, name: str) -> None:
    ch.queue_declare(name, durable=True, arguments={"x-queue-type": "quorum"})


def _publish(url: str, name: str, n: int, size: int) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        _declare(ch, name)
        props = pika.BasicProperties(delivery_mode=2)
        for i in range(n):  # each publish returns once confirmed
            ch.basic_publish("", name, _body(i, size), props)
    finally:
        conn.close()


def _growth_per_message(tmp_path, size: int) -> tuple[float, Broker]:
    """(RSS growth per queued message in bytes, the broker still holding the backlog)."""
    b = Broker(tmp_path / f"b{size}", management=False).start()
    try:
        _publish(b.url, "warm", 200, size)  # the paths of publish and log warmed up
        base = rss_bytes(b.proc.pid)
        _publish(b.url, "backlog", N, size)
        # a WAL rollover may be under way (a frozen memory table beside the new one) and
        # the C heap is trimmed every couple of seconds: give the process a moment to settle
        after = settle_rss(b.proc.pid, base + N * size // 8, timeout=10.0)
    except BaseException:
        b.kill()
        raise
    return (after - base) / N, b


def _consume_all(url: str, name: str, n: int, size: int) -> list[int]:
    return [i for i, _ in consume_numbered(url, name, n, size)]


def test_backlog_memory_does_not_follow_body_size_and_survives_kill_9(tmp_path):
    small, b_small = _growth_per_message(tmp_path, 16)
    b_small.stop()
    big, b = _growth_per_message(tmp_path, BIG)
    try:
        print(f"\nquorum backlog of {N}: RSS growth per queued message "
              f"{small:.0f} B with 16 B bodies, {big:.0f} B with 64 KiB bodies")
        # The bodies are not held: well under a body per message. At this N the growth is mostly
        # the fixed, bounded part (up to two 32 MiB memory tables while the WAL rolls over, ~8
        # MiB of Raft entries, a 4 MiB read cache, the C heap), not a per-message cost: with the
        # bodies held it would be 250 MiB and more.
        assert big < BIG / 2, f"{big:.0f} B per 64 KiB message: bodies are held in memory"
        assert big * N < 128 * MiB
        b.kill()
        b.start(timeout=120)
        assert _consume_all(b.url, "backlog", N, BIG) == list(range(N))
    finally:
        b.stop()


def test_a_restarted_node_counts_a_recovered_backlog_whole_from_its_first_connection(tmp_path):
    """The node opens its AMQP port only once its quorum queues have replayed their logs (as
    RabbitMQ recovers queues before it starts networking): the first passive declare after a
    kill -9 counts the whole backlog, not the part replayed so far."""
    n = 300_000
    b = Broker(tmp_path / "replay", management=False).start()
    try:
        _fill_fast(b.url, "replayed", n)
        b.kill()
        b.start(timeout=120)
        conn = pika.BlockingConnection(pika.URLParameters(b.url))
        count = conn.channel().queue_declare("replayed", passive=True).method.message_count
        conn.close()
        assert count == n + 1
    finally:
        b.stop()


def test_a_backlog_restarts_from_its_checkpoint_whole_and_in_order(tmp_path):
    """A backlog the log cannot compact is checkpointed (a snapshot kept beside the log): a
    kill -9 and restart restores the newest checkpoint and applies only the entries after it,
    and every message comes back once, in publish order, whole."""
    n = 80_000  # past the first checkpoints (QuorumMachine.CHECKPOINT_EVERY entries apart)
    b = Broker(tmp_path / "checkpoint", management=False).start()
    try:
        _fill_fast(b.url, "deep", n - 1)
        deadline = time.monotonic() + 30
        while not _checkpoints(b.data_dir) and time.monotonic() < deadline:
            time.sleep(0.1)  # written in the background
        assert _checkpoints(b.data_dir), "no checkpoint of a backlog of 80,000 messages"
        b.kill()
        b.start(timeout=120)
        assert _consume_all(b.url, "deep", n, 16) == list(range(n))
    finally:
        b.stop()


def _fill_fast(url: str, name: str, n: int, size: int = 16) -> None:
    """Numbered messages 0..n of `size` bytes into quorum queue `name`: n without confirms
    (fast), then one confirmed publish, so that every entry before it is committed, so
    durable."""
    conn = pika.BlockingConnection(pika.URLParameters(url))
    try:
        ch = conn.channel()
        _declare(ch, name)
        props = pika.BasicProperties(delivery_mode=2)
        for i in range(n):
            ch.basic_publish("", name, _body(i, size), props)
        ch.confirm_delivery()
        ch.basic_publish("", name, _body(n, size), props)
    finally:
        conn.close()


def _checkpoints(data_dir) -> list[str]:
    return [os.path.join(root, name) for root, _, files in os.walk(data_dir)
            for name in files if parse_checkpoint_name(name) is not None]


def test_a_draining_backlog_gives_its_log_back_before_it_is_empty(tmp_path):
    """The checkpoints a growing backlog took become compaction points as its consumer
    passes them (ra's several release cursors): with a quarter of the backlog still queued,
    less than half of its log is left on disk, where before the whole log stayed until the
    queue was nearly empty. The rest then comes back, whole."""
    n = 200_000  # 1 KiB: ~200 MB of log, checkpoints at about 32768, 65536, 131072 entries
    b = Broker(tmp_path / "drain", management=False).start()
    try:
        _fill_fast(b.url, "deep", n - 1, size=1024)
        deadline = time.monotonic() + 30
        while len(_checkpoints(b.data_dir)) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        full = _log_bytes(b.data_dir)
        first = consume_numbered(b.url, "deep", 150_000, 1024, total=n)
        assert [i for i, _ in first] == list(range(150_000))
        deadline = time.monotonic() + 30
        while (left := _log_bytes(b.data_dir)) > full / 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        print(f"\nquorum log: {full / MiB:.0f} MiB with 200,000 queued, "
              f"{left / MiB:.0f} MiB with 50,000 left")
        assert left <= full / 2, f"{left} of {full} bytes still on disk"
        rest = consume_numbered(b.url, "deep", n - 150_000, 1024)
        # the first consumer's prefetch window went back when it left, and messages returned
        # to a quorum queue without a delivery limit are requeued at its back
        assert sorted(i for i, _ in rest) == list(range(150_000, n))
    finally:
        b.stop()


def test_segments_of_settled_messages_are_deleted(tmp_path):
    """Once a backlog is consumed, its log goes (release cursor, then the WAL rollovers that
    delete the segments it no longer needs)."""
    b = Broker(tmp_path / "seg", management=False).start()
    try:
        before = _fill_and_drain(b, "drain", 3000)
        for _ in range(3):  # more traffic through the drained queue: the WAL rolls over
            _publish(b.url, "drain", 300, BIG)
            assert _consume_all(b.url, "drain", 300, BIG) == list(range(300))
        after = _log_bytes(b.data_dir)
        print(f"\nquorum log on disk: {before / MiB:.0f} MiB with the backlog, "
              f"{after / MiB:.0f} MiB after it drained")
        assert after < before / 2, f"log still {after} bytes after the backlog drained"
    finally:
        b.stop()


def test_a_drained_backlog_gives_its_log_back_without_more_traffic(tmp_path):
    """Once the last message of a backlog is settled its segments go at once: their size
    makes a WAL rollover due (the point where dropped segments may be deleted), instead of
    waiting for a rollover's worth of new traffic that may never come."""
    b = Broker(tmp_path / "idle", management=False).start()
    try:
        before = _fill_and_drain(b, "drain", 3000)
        deadline = time.monotonic() + 30
        while (after := _log_bytes(b.data_dir)) >= before / 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert after < before / 2, f"log still {after} of {before} bytes, 30 s after the drain"
    finally:
        b.stop()


def _fill_and_drain(b: Broker, queue: str, n: int) -> int:
    """Publish a backlog of `n` 64 KiB messages, consume it all in order; returns the bytes the
    quorum log held with the backlog in place."""
    _publish(b.url, queue, n, BIG)
    before = _log_bytes(b.data_dir)
    assert before > n * BIG // 2  # the bodies are on disk
    assert _consume_all(b.url, queue, n, BIG) == list(range(n))
    return before


def _log_bytes(data_dir) -> int:
    total = 0
    for root, _, files in os.walk(data_dir):
        if "quorum" not in root:
            continue
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    return total


def test_memory_returns_after_queues_are_drained_or_deleted(tmp_path):
    """RSS goes back near where it started once backlogs are consumed or their queues deleted:
    nothing keeps settled messages or deleted queues alive, and the C heap is trimmed."""
    b = Broker(tmp_path / "mem", management=False).start()
    try:
        _publish(b.url, "warm", 200, BIG)
        _consume_all(b.url, "warm", 200, BIG)
        base = rss_bytes(b.proc.pid)
        for i in range(4):
            _publish(b.url, f"gone{i}", 400, BIG)
            _publish(b.url, f"drained{i}", 400, 1024)
        conn = pika.BlockingConnection(pika.URLParameters(b.url))
        ch = conn.channel()
        classic = "classic.gone"
        ch.queue_declare(classic, durable=True)
        ch.confirm_delivery()
        for i in range(400):
            ch.basic_publish("", classic, _body(i, BIG), pika.BasicProperties(delivery_mode=2))
        peak = rss_bytes(b.proc.pid)
        for i in range(4):
            ch.queue_delete(f"gone{i}")
        ch.queue_delete(classic)
        conn.close()
        for i in range(4):
            assert _consume_all(b.url, f"drained{i}", 400, 1024) == list(range(400))
        end = settle_rss(b.proc.pid, base + 24 * MiB, timeout=15.0)
        print(f"\nRSS {base / MiB:.0f} MiB before, {peak / MiB:.0f} MiB with the backlogs, "
              f"{end / MiB:.0f} MiB after they were deleted or drained")
        assert end < base + 24 * MiB
    finally:
        b.stop()
