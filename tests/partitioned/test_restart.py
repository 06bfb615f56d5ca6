"""A partitioned queue survives a restart of its node (clean stop, and kill -9): the
confirmed messages, their partitions and their order per key come back, and a consumer that
was holding messages when the node went down gets them again redelivered."""
from __future__ import annotations

import time
import zlib

import pika
import pytest

from compat_tests.support.launcher import Broker

from .workload import KEYS, declare


@pytest.mark.parametrize("how", ["stop", "kill"])
def test_confirmed_keyed_messages_survive_a_restart(tmp_path, how):
    b = Broker(tmp_path, management=False).start()
    try:
        conn = pika.BlockingConnection(pika.URLParameters(b.url))
        ch = conn.channel()
        declare(ch, "pq-restart", 8, 1000)
        ch.confirm_delivery()
        for seq in range(5):
            for key in KEYS:
                ch.basic_publish("", "pq-restart", f"{key}:{seq}".encode(),
                                 pika.BasicProperties(delivery_mode=2,
                                                      headers={"x-partition-key": key}))
        # a consumer holds some unacked when the node goes down
        ch.basic_qos(prefetch_count=7)
        held = []
        ch.basic_consume("pq-restart", lambda c, m, p, body: held.append(body))
        while len(held) < 7:
            conn.process_data_events(0.05)
        if how == "stop":
            b.stop()
        else:
            b.kill()
        b.start()
        conn = pika.BlockingConnection(pika.URLParameters(b.url))
        ch = conn.channel()
        ch.basic_qos(prefetch_count=50)
        got = []
        ch.basic_consume("pq-restart", lambda c, m, p, body: (
            got.append((body.decode(), p.headers["x-partition"], m.redelivered)),
            c.basic_ack(m.delivery_tag)))
        deadline = time.monotonic() + 30
        while len(got) < 5 * len(KEYS) and time.monotonic() < deadline:
            conn.process_data_events(0.05)
        conn.close()
        assert len(got) == 5 * len(KEYS)
        per_key: dict[str, list[int]] = {}
        for body, part, _redelivered in got:
            key, seq = body.rsplit(":", 1)
            assert part == zlib.crc32(key.encode()) % 8
            per_key.setdefault(key, []).append(int(seq))
        assert all(seqs == list(range(5)) for seqs in per_key.values())
        assert {body for body, _, r in got if r} >= {h.decode() for h in held}
    finally:
        b.kill()
