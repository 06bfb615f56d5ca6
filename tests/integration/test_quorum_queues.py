"""Quorum queues end to end on one broker process, with pika (blocking) and aio-pika.

Each test declares its own x-queue-type=quorum queue and checks one behaviour of issue 4:
confirms, FIFO consume with prefetch, requeue with x-delivery-count, poison messages and the
delivery limit, dead lettering (rejected, expired, maxlen), TTL, max-length with drop-head and
reject-publish (nacks), priorities, single active consumer, consumer priorities, purge,
delete, x-expires, basic.get, channel close returning unacked messages.
"""

from __future__ import annotations

import asyncio
import itertools
import time

import aio_pika
import pika
import pytest
from pika.exceptions import NackError

_ids = itertools.count()


def _name(tag: str) -> str:
    return f"it.qq.{tag}.{next(_ids)}"


def _declare(ch, tag: str, **args) -> str:
    name = _name(tag)
    ch.queue_declare(name, durable=True, arguments={"x-queue-type": "quorum", **args})
    return name


def _publish(ch, queue: str, bodies, **props) -> None:
    for b in bodies:
        ch.basic_publish("", queue, b if isinstance(b, bytes) else str(b).encode(),
                         pika.BasicProperties(delivery_mode=2, **props))


def _consume(ch, queue: str, n: int, ack: bool = True, timeout: float = 5):
    got = []
    for method, props, body in ch.consume(queue, inactivity_timeout=timeout):
        if method is None:
            break
        got.append((method, props, body))
        if ack:
            ch.basic_ack(method.delivery_tag)
        if len(got) == n:
            break
    ch.cancel()
    return got


def _count(ch, queue: str) -> int:
    return ch.queue_declare(queue, passive=True).method.message_count


def _wait_count(ch, queue: str, want: int, timeout: float = 5) -> int:
    deadline = time.monotonic() + timeout
    n = _count(ch, queue)
    while n != want and time.monotonic() < deadline:
        time.sleep(0.05)
        n = _count(ch, queue)
    return n


def _pump(conn, done, timeout: float = 5.0) -> None:
    """Process events until done() (pika returns from process_data_events early)."""
    deadline = time.monotonic() + timeout
    while not done() and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.1)


def test_confirmed_publish_then_fifo_consume(ch):
    ch.confirm_delivery()
    q = _declare(ch, "fifo")
    _publish(ch, q, range(100))
    assert _count(ch, q) == 100
    ch.basic_qos(prefetch_count=7)
    got = _consume(ch, q, 100)
    assert [b for _, _, b in got] == [str(i).encode() for i in range(100)]
    assert not any(m.redelivered for m, _, _ in got)
    assert all(p.headers is None or "x-delivery-count" not in p.headers for _, p, _ in got)
    assert _count(ch, q) == 0


def test_prefetch_limits_unacked(connect):
    conn = connect()
    ch = conn.channel()
    q = _declare(ch, "prefetch")
    _publish(ch, q, range(10))
    ch.basic_qos(prefetch_count=3)
    got = []
    ch.basic_consume(q, lambda c, m, p, b: got.append(m))
    _pump(conn, lambda: len(got) >= 3)
    conn.process_data_events(time_limit=0.3)
    assert len(got) == 3
    ch.basic_ack(got[-1].delivery_tag, multiple=True)
    _pump(conn, lambda: len(got) >= 6)
    conn.process_data_events(time_limit=0.3)
    assert len(got) == 6


def test_nack_requeue_sets_delivery_count_and_redelivered(ch):
    q = _declare(ch, "requeue")
    _publish(ch, q, [b"a"])
    for expected in (1, 2):
        m, _, _ = _consume(ch, q, 1, ack=False)[0]
        ch.basic_nack(m.delivery_tag, requeue=True)
    m, props, body = _consume(ch, q, 1, ack=False)[0]
    assert body == b"a" and m.redelivered
    assert props.headers["x-delivery-count"] == 2
    ch.basic_ack(m.delivery_tag)


def test_channel_close_returns_unacked(connect):
    conn = connect()
    ch = conn.channel()
    q = _declare(ch, "close")
    _publish(ch, q, [b"x", b"y"])
    ch2 = conn.channel()
    got = _consume(ch2, q, 2, ack=False)
    assert len(got) == 2
    ch2.close()
    assert _wait_count(ch, q, 2) == 2
    again = _consume(ch, q, 2)
    assert [b for _, _, b in again] == [b"x", b"y"]
    assert all(m.redelivered for m, _, _ in again)
    assert again[0][1].headers["x-delivery-count"] == 1


def test_basic_get_ack_and_empty(ch):
    q = _declare(ch, "get")
    _publish(ch, q, [b"1", b"2"])
    m, _, body = ch.basic_get(q)
    assert body == b"1" and m.message_count == 1
    ch.basic_ack(m.delivery_tag)
    m, _, body = ch.basic_get(q, auto_ack=True)
    assert body == b"2"
    assert ch.basic_get(q) == (None, None, None)


def test_delivery_limit_dead_letters_poison_message(ch):
    dlq = _declare(ch, "dlq")
    q = _declare(ch, "poison", **{"x-delivery-limit": 2, "x-dead-letter-exchange": "",
                                  "x-dead-letter-routing-key": dlq})
    _publish(ch, q, [b"poison"])
    for _ in range(3):
        got = _consume(ch, q, 1, ack=False, timeout=2)
        if not got:
            break
        ch.basic_nack(got[0][0].delivery_tag, requeue=True)
    assert _wait_count(ch, dlq, 1) == 1
    _, props, body = _consume(ch, dlq, 1)[0]
    assert body == b"poison"
    assert props.headers["x-death"][0]["reason"] == "delivery_limit"
    assert _count(ch, q) == 0


def test_reject_without_requeue_dead_letters(ch):
    dlq = _declare(ch, "dlq-rej")
    q = _declare(ch, "rej", **{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
    _publish(ch, q, [b"r"])
    m, _, _ = _consume(ch, q, 1, ack=False)[0]
    ch.basic_reject(m.delivery_tag, requeue=False)
    assert _wait_count(ch, dlq, 1) == 1
    _, props, _ = _consume(ch, dlq, 1)[0]
    assert props.headers["x-death"][0]["reason"] == "rejected"
    assert props.headers["x-death"][0]["queue"] == q


def test_message_ttl_expires_and_dead_letters(ch):
    dlq = _declare(ch, "dlq-ttl")
    q = _declare(ch, "ttl", **{"x-message-ttl": 100, "x-dead-letter-exchange": "",
                               "x-dead-letter-routing-key": dlq})
    _publish(ch, q, [b"old"])
    _publish(ch, q, [b"per-msg"], expiration="50")
    assert _wait_count(ch, dlq, 2) == 2
    got = _consume(ch, dlq, 2)
    assert {p.headers["x-death"][0]["reason"] for _, p, _ in got} == {"expired"}
    assert _count(ch, q) == 0


def test_max_length_drop_head(ch):
    ch.confirm_delivery()
    q = _declare(ch, "droph", **{"x-max-length": 2})
    _publish(ch, q, [b"1", b"2", b"3"])
    assert [b for _, _, b in _consume(ch, q, 2)] == [b"2", b"3"]


def test_max_length_reject_publish_nacks(ch):
    ch.confirm_delivery()
    q = _declare(ch, "rejpub", **{"x-max-length": 1, "x-overflow": "reject-publish"})
    accepted = 0
    with pytest.raises(NackError):
        for i in range(5):
            _publish(ch, q, [str(i).encode()])
            accepted += 1
    # like RabbitMQ the check is "already over the limit": one message may overshoot
    assert 1 <= accepted <= 2
    assert _count(ch, q) == accepted


def test_priorities_high_first(ch):
    ch.confirm_delivery()
    q = _declare(ch, "prio")
    _publish(ch, q, [b"low1"], priority=1)
    _publish(ch, q, [b"high"], priority=9)
    _publish(ch, q, [b"low2"])
    assert [b for _, _, b in _consume(ch, q, 3)] == [b"high", b"low1", b"low2"]


def test_single_active_consumer(connect):
    conn = connect()
    ch = conn.channel()
    q = _declare(ch, "sac", **{"x-single-active-consumer": True})
    got: dict[str, list] = {"a": [], "b": []}
    ch.basic_consume(q, lambda c, m, p, b: (got["a"].append(b), c.basic_ack(m.delivery_tag)),
                     consumer_tag="a")
    ch.basic_consume(q, lambda c, m, p, b: (got["b"].append(b), c.basic_ack(m.delivery_tag)),
                     consumer_tag="b")
    _publish(ch, q, range(5))
    _pump(conn, lambda: len(got["a"]) + len(got["b"]) >= 5)
    assert len(got["a"]) == 5 and got["b"] == []
    ch.basic_cancel("a")
    _publish(ch, q, range(3))
    _pump(conn, lambda: len(got["b"]) >= 3)
    assert len(got["b"]) == 3 and len(got["a"]) == 5


def test_consumer_priority(connect):
    conn = connect()
    ch = conn.channel()
    q = _declare(ch, "cprio")
    got: dict[str, list] = {"lo": [], "hi": []}
    ch.basic_consume(q, lambda c, m, p, b: got["lo"].append(b), consumer_tag="lo",
                     arguments={"x-priority": 1})
    ch.basic_consume(q, lambda c, m, p, b: got["hi"].append(b), consumer_tag="hi",
                     arguments={"x-priority": 10})
    _publish(ch, q, range(5))
    _pump(conn, lambda: len(got["hi"]) + len(got["lo"]) >= 5)
    assert len(got["hi"]) == 5 and got["lo"] == []


def test_purge_and_delete_counts(ch):
    ch.confirm_delivery()
    q = _declare(ch, "purge")
    _publish(ch, q, range(4))
    assert ch.queue_purge(q).method.message_count == 4
    assert _count(ch, q) == 0
    _publish(ch, q, range(2))
    assert ch.queue_delete(q).method.message_count == 2
    ch.queue_declare(q, durable=True, arguments={"x-queue-type": "quorum"})
    assert _count(ch, q) == 0  # a new incarnation, not the old log


def test_queue_expires_when_unused(connect):
    ch = connect().channel()
    q = _declare(ch, "expires", **{"x-expires": 200})
    deadline = time.monotonic() + 5
    gone = False
    while time.monotonic() < deadline and not gone:
        time.sleep(0.1)
        try:
            connect().channel().queue_declare(q, passive=True)
        except pika.exceptions.ChannelClosedByBroker as err:
            gone = err.reply_code == 404
    assert gone


def test_aio_pika_confirms_and_consume(broker):
    async def main():
        conn = await aio_pika.connect_robust(broker.url)
        async with conn:
            ch = await conn.channel(publisher_confirms=True)
            q = await ch.declare_queue("it.qq.aio", durable=True,
                                       arguments={"x-queue-type": "quorum"})
            for i in range(50):
                await ch.default_exchange.publish(
                    aio_pika.Message(str(i).encode(),
                                     delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                    routing_key="it.qq.aio")
            await ch.set_qos(prefetch_count=10)
            bodies = []
            async with q.iterator() as it:
                async for msg in it:
                    async with msg.process():
                        bodies.append(msg.body)
                    if len(bodies) == 50:
                        break
            return bodies

    assert asyncio.run(asyncio.wait_for(main(), 30)) == [str(i).encode() for i in range(50)]


def test_auto_ack_consumer_beyond_default_credit(connect):
    # no-ack consumers get the capped "unlimited" credit (2000); settling their deliveries
    # must hand it back, or delivery would stop after 2000 messages
    conn = connect()
    ch = conn.channel()
    q = _declare(ch, "noack")
    for i in range(3000):
        ch.basic_publish("", q, b"%d" % i)
    got = []
    ch.basic_consume(q, lambda c, m, p, b: got.append(b), auto_ack=True)
    _pump(conn, lambda: len(got) >= 3000, timeout=20)
    assert len(got) == 3000 and got[:3] == [b"0", b"1", b"2"]
    assert _wait_count(ch, q, 0) == 0
