"""At-least-once dead lettering of quorum queues through a broker process, with pika.

The source queue keeps what it dead-letters until every target confirmed it (dlx/worker.py):
a full reject-publish target, a missing dead-letter exchange and a kill -9 lose nothing.
"""

from __future__ import annotations

import time

import pika

from compat_tests.support.launcher import Broker

ALO = {"x-queue-type": "quorum", "x-dead-letter-strategy": "at-least-once",
       "x-overflow": "reject-publish"}


def _publish(ch, queue: str, n: int, **props) -> None:
    ch.confirm_delivery()
    for i in range(n):
        ch.basic_publish("", queue, f"m{i}".encode(),
                         pika.BasicProperties(delivery_mode=2, **props))


def _drain(ch, queue: str, want: int, timeout: float = 20.0) -> list:
    """Consume (ack) until `want` distinct bodies arrived or timeout; (bodies, last props)."""
    seen: dict[bytes, pika.BasicProperties] = {}
    deadline = time.monotonic() + timeout
    while len(seen) < want and time.monotonic() < deadline:
        method, props, body = ch.basic_get(queue, auto_ack=True)
        if method is None:
            ch.connection.sleep(0.05)
            continue
        seen[body] = props
    return seen


def _reject_all(ch, queue: str, n: int) -> None:
    got = 0
    deadline = time.monotonic() + 20
    while got < n and time.monotonic() < deadline:
        method, _, _ = ch.basic_get(queue)
        if method is None:
            ch.connection.sleep(0.05)
            continue
        ch.basic_reject(method.delivery_tag, requeue=False)
        got += 1
    assert got == n


def test_full_target_then_drained_loses_nothing(ch):
    ch.exchange_declare("alo.full.dlx", "fanout")
    ch.queue_declare("alo.full.tgt", durable=True,
                     arguments={"x-queue-type": "quorum", "x-max-length": 3,
                                "x-overflow": "reject-publish"})
    ch.queue_bind("alo.full.tgt", "alo.full.dlx")
    ch.queue_declare("alo.full.src", durable=True,
                     arguments={**ALO, "x-dead-letter-exchange": "alo.full.dlx"})
    _publish(ch, "alo.full.src", 12)
    _reject_all(ch, "alo.full.src", 12)
    ch.connection.sleep(0.5)
    assert ch.queue_declare("alo.full.tgt", passive=True).method.message_count == 4  # quorum: 3 + 1
    got = _drain(ch, "alo.full.tgt", 12)
    assert set(got) == {f"m{i}".encode() for i in range(12)}
    death = got[b"m0"].headers["x-death"][0]
    assert (death["queue"], death["reason"], death["count"]) == ("alo.full.src", "rejected", 1)


def test_missing_dlx_then_declared_delivers(ch):
    ch.queue_declare("alo.late.src", durable=True,
                     arguments={**ALO, "x-dead-letter-exchange": "alo.late.dlx",
                                "x-dead-letter-routing-key": "dead"})
    _publish(ch, "alo.late.src", 5, expiration="10")
    ch.connection.sleep(1.0)  # expired and held: the exchange does not exist yet
    ch.exchange_declare("alo.late.dlx", "direct")
    ch.queue_declare("alo.late.tgt")
    ch.queue_bind("alo.late.tgt", "alo.late.dlx", "dead")
    got = _drain(ch, "alo.late.tgt", 5)
    assert set(got) == {f"m{i}".encode() for i in range(5)}
    props = got[b"m1"]
    assert props.expiration is None
    death = props.headers["x-death"][0]
    assert death["reason"] == "expired" and death["original-expiration"] == "10"
    assert death["routing-keys"] == ["alo.late.src"]
    assert props.headers["x-first-death-queue"] == "alo.late.src"


def test_missing_binding_then_bound_delivers(ch):
    ch.exchange_declare("alo.nb.dlx", "direct")
    ch.queue_declare("alo.nb.tgt")
    ch.queue_declare("alo.nb.src", durable=True,
                     arguments={**ALO, "x-dead-letter-exchange": "alo.nb.dlx", "x-message-ttl": 10})
    _publish(ch, "alo.nb.src", 4)
    ch.connection.sleep(1.0)  # expired, routed to no queue: kept
    ch.queue_bind("alo.nb.tgt", "alo.nb.dlx", "alo.nb.src")
    got = _drain(ch, "alo.nb.tgt", 4)
    assert len(got) == 4


def test_at_most_once_without_reject_publish_drops_when_full(ch):
    """The documented fallback: at-least-once with drop-head behaves as at-most-once."""
    ch.exchange_declare("amo.dlx", "fanout")
    ch.queue_declare("amo.tgt", arguments={"x-max-length": 2, "x-overflow": "reject-publish"})
    ch.queue_bind("amo.tgt", "amo.dlx")
    ch.queue_declare("amo.src", durable=True,
                     arguments={"x-queue-type": "quorum", "x-dead-letter-strategy": "at-least-once",
                                "x-dead-letter-exchange": "amo.dlx"})
    _publish(ch, "amo.src", 5)
    _reject_all(ch, "amo.src", 5)
    ch.connection.sleep(0.5)
    got = _drain(ch, "amo.tgt", 5, timeout=2.0)
    assert len(got) == 2


def _channel(b):
    conn = pika.BlockingConnection(pika.URLParameters(b.url))
    return conn, conn.channel()


def test_kill_9_mid_way_loses_none(fresh_broker):
    b = fresh_broker.start()
    conn, ch = _channel(b)
    ch.exchange_declare("k9.dlx", "fanout", durable=True)
    ch.queue_declare("k9.tgt", durable=True,
                     arguments={"x-queue-type": "quorum", "x-max-length": 4,
                                "x-overflow": "reject-publish"})
    ch.queue_bind("k9.tgt", "k9.dlx")
    ch.queue_declare("k9.src", durable=True,
                     arguments={**ALO, "x-dead-letter-exchange": "k9.dlx", "x-message-ttl": 20})
    _publish(ch, "k9.src", 15)
    ch.connection.sleep(1.0)  # all expired: 5 in the target (quorum: limit + 1), 10 held
    assert ch.queue_declare("k9.tgt", passive=True).method.message_count == 5
    b.kill()
    b.start()
    conn, ch = _channel(b)
    got = _drain(ch, "k9.tgt", 15)
    conn.close()
    assert set(got) == {f"m{i}".encode() for i in range(15)}


def test_prefetch_one_two_targets_one_full(tmp_path):
    """dead_letter_worker_consumer_prefetch = 1 from the config; a fanout DLX with a free and a
    full target: the full one gets every message once drained, the free one each exactly once
    (a target that confirmed is never sent the message again)."""
    b = Broker(tmp_path, management=False,
               config="dead_letter_worker_consumer_prefetch = 1\n").start()
    try:
        conn, ch = _channel(b)
        ch.exchange_declare("p1.dlx", "fanout")
        ch.queue_declare("p1.free", durable=True)
        ch.queue_declare("p1.full", durable=True,
                         arguments={"x-max-length": 2, "x-overflow": "reject-publish"})
        ch.queue_bind("p1.free", "p1.dlx")
        ch.queue_bind("p1.full", "p1.dlx")
        ch.queue_declare("p1.src", durable=True,
                         arguments={**ALO, "x-dead-letter-exchange": "p1.dlx", "x-message-ttl": 10})
        _publish(ch, "p1.src", 8)
        ch.connection.sleep(1.0)
        full = _drain(ch, "p1.full", 8)
        assert set(full) == {f"m{i}".encode() for i in range(8)}
        ch.connection.sleep(0.5)
        free = []
        while True:
            method, _, body = ch.basic_get("p1.free", auto_ack=True)
            if method is None:
                break
            free.append(body)
        assert sorted(free) == sorted(f"m{i}".encode() for i in range(8))
        conn.close()
    finally:
        b.kill()


def test_kill_9_while_the_worker_is_busy_loses_none(fresh_broker):
    """Whenever the kill lands (expiring, republishing, settling), every confirmed message ends
    up in the durable target after the restart (duplicates allowed)."""
    b = fresh_broker.start()
    conn, ch = _channel(b)
    ch.exchange_declare("kb.dlx", "fanout", durable=True)
    ch.queue_declare("kb.tgt", durable=True, arguments={"x-queue-type": "quorum"})
    ch.queue_declare("kb.ctgt", durable=True)  # classic durable target too
    ch.queue_bind("kb.tgt", "kb.dlx")
    ch.queue_bind("kb.ctgt", "kb.dlx")
    ch.queue_declare("kb.src", durable=True,
                     arguments={**ALO, "x-dead-letter-exchange": "kb.dlx", "x-message-ttl": 5})
    n = 300
    _publish(ch, "kb.src", n)
    b.kill()  # right after the last confirm: the worker is somewhere in the middle
    b.start()
    conn, ch = _channel(b)
    want = {f"m{i}".encode() for i in range(n)}
    assert set(_drain(ch, "kb.tgt", n)) == want
    assert set(_drain(ch, "kb.ctgt", n)) == want
    conn.close()


def test_many_to_a_transient_classic_target(ch):
    """Confirms of a transient classic target come at once: more than prefetch (32) messages
    must still all move."""
    ch.queue_declare("alo.tr.tgt")  # not durable: confirms are immediate
    ch.queue_declare("alo.tr.src", durable=True,
                     arguments={**ALO, "x-dead-letter-exchange": "",
                                "x-dead-letter-routing-key": "alo.tr.tgt", "x-message-ttl": 5})
    ch.confirm_delivery()
    for i in range(200):
        ch.basic_publish("", "alo.tr.src", f"m{i}".encode(), pika.BasicProperties(delivery_mode=1))
    got = _drain(ch, "alo.tr.tgt", 200)
    assert set(got) == {f"m{i}".encode() for i in range(200)}
