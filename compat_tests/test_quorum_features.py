"""Quorum queue behaviours beyond declaration (issue 4), as clients see them: message TTL and
per-message expiration (dead-lettered with reason expired), x-max-length-bytes, reject-publish
nacks, consumer priorities, x-expires, connection loss returning unacked messages, an aio-pika
round trip; 4.x-only: priorities, the default delivery-limit of 20, reject-publish-dlx."""

import aio_pika
import pika
import pytest
from pika.exceptions import NackError

from compat_tests.support import consume_n, get_n, wait_until

QQ = {"x-queue-type": "quorum"}


def _declare(ch, q, **args):
    return ch.queue_declare(q, durable=True, arguments={**QQ, **args})


def _count(ch, q) -> int:
    return ch.queue_declare(q, passive=True).method.message_count


def _dlx_pair(ch, names, **args):
    q, dlq = names.queue(), names.queue()
    ch.queue_declare(dlq)
    _declare(ch, q, **{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq, **args})
    return q, dlq


def test_message_ttl_dead_letters_expired(confirm_ch, names):
    q, dlq = _dlx_pair(confirm_ch, names, **{"x-message-ttl": 50})
    confirm_ch.basic_publish("", q, b"old")
    (_, p, body), = get_n(confirm_ch, dlq, 1)
    assert body == b"old"
    death, = p.headers["x-death"]
    assert (death["reason"], death["queue"]) == ("expired", q)
    assert _count(confirm_ch, q) == 0


def test_per_message_expiration_dead_letters_expired(confirm_ch, names):
    q, dlq = _dlx_pair(confirm_ch, names)
    confirm_ch.basic_publish("", q, b"short", pika.BasicProperties(expiration="30"))
    (_, p, body), = get_n(confirm_ch, dlq, 1)
    assert body == b"short" and p.headers["x-death"][0]["reason"] == "expired"
    assert p.expiration is None  # not expired a second time in the dead-letter queue


def test_max_length_bytes_drop_head_dead_letters_maxlen(confirm_ch, names):
    q, dlq = _dlx_pair(confirm_ch, names, **{"x-max-length-bytes": 10})
    confirm_ch.basic_publish("", q, b"aaaaaa")
    confirm_ch.basic_publish("", q, b"bbbbbb")
    (_, p, body), = get_n(confirm_ch, dlq, 1)
    assert body == b"aaaaaa" and p.headers["x-death"][0]["reason"] == "maxlen"
    assert [b for _, _, b in get_n(confirm_ch, q, 1)] == [b"bbbbbb"]


def test_reject_publish_nacks_once_over_the_limit(confirm_ch, names):
    q = names.queue()
    _declare(confirm_ch, q, **{"x-max-length": 2, "x-overflow": "reject-publish"})
    accepted = 0
    with pytest.raises(NackError):
        for i in range(6):
            confirm_ch.basic_publish("", q, b"%d" % i)
            accepted += 1
    assert 2 <= accepted <= 3  # the limit may be overshot by one (seed 000)
    assert _count(confirm_ch, q) == accepted


def test_consumer_priorities(conn, confirm_ch, names):
    q = names.queue()
    _declare(confirm_ch, q)
    cch = conn.channel()
    low, high = [], []
    cch.basic_consume(q, lambda c, m, p, b: low.append(b), auto_ack=True,
                      arguments={"x-priority": 1})
    cch.basic_consume(q, lambda c, m, p, b: high.append(b), auto_ack=True,
                      arguments={"x-priority": 5})
    for i in range(4):
        confirm_ch.basic_publish("", q, b"%d" % i)
    assert wait_until(conn, lambda: len(low) + len(high) == 4)
    assert high == [b"0", b"1", b"2", b"3"] and low == []


def test_queue_expires_when_unused(conn, confirm_ch, names):
    q = names.queue()
    _declare(confirm_ch, q, **{"x-expires": 100})

    def gone() -> bool:
        try:
            conn.channel().queue_declare(q, passive=True)
            return False
        except pika.exceptions.ChannelClosedByBroker as err:
            return err.reply_code == 404

    assert wait_until(conn, gone)


def test_connection_loss_returns_unacked_with_delivery_count(pika_connect, confirm_ch, names):
    q = names.queue()
    _declare(confirm_ch, q)
    confirm_ch.basic_publish("", q, b"held")
    other = pika_connect()
    _, got = consume_n(other.channel(), q, 1)
    assert [b for _, _, b in got] == [b"held"]
    other.close()
    (m, p, body), = get_n(confirm_ch, q, 1)
    assert (body, m.redelivered, p.headers["x-delivery-count"]) == (b"held", True, 1)


def test_aio_pika_confirms_nack_requeue_and_ack(aio, names):
    q = names.queue()

    async def body(conn):
        chan = await conn.channel(publisher_confirms=True)
        queue = await chan.declare_queue(q, durable=True, arguments=QQ)
        for i in range(3):
            await chan.default_exchange.publish(aio_pika.Message(b"%d" % i), routing_key=q)
        first = await queue.get(fail=True)
        await first.nack(requeue=True)
        seen = []
        for _ in range(3):
            msg = await queue.get(fail=True)
            seen.append((msg.body, msg.redelivered, (msg.headers or {}).get("x-delivery-count")))
            await msg.ack()
        return seen

    seen = aio(body)
    assert sorted(b for b, _, _ in seen) == [b"0", b"1", b"2"]
    assert (b"0", True, 1) in seen


@pytest.mark.rabbitmq4
def test_priorities_high_first(confirm_ch, names):
    q = names.queue()
    _declare(confirm_ch, q)
    confirm_ch.basic_publish("", q, b"normal", pika.BasicProperties(priority=1))
    confirm_ch.basic_publish("", q, b"high", pika.BasicProperties(priority=8))
    assert [b for _, _, b in get_n(confirm_ch, q, 2)] == [b"high", b"normal"]


@pytest.mark.rabbitmq4
def test_default_delivery_limit_is_20(confirm_ch, names):
    q = names.queue()
    _declare(confirm_ch, q)
    confirm_ch.basic_publish("", q, b"poison")
    returns = 0
    for _ in range(30):
        got = get_n(confirm_ch, q, 1, auto_ack=False, timeout=1)
        if not got:
            break
        confirm_ch.basic_nack(got[0][0].delivery_tag, requeue=True)
        returns += 1
    assert 20 <= returns <= 21 and _count(confirm_ch, q) == 0


@pytest.mark.rabbitmq4
def test_reject_publish_dlx_behaves_as_drop_head(confirm_ch, names):
    q = names.queue()
    _declare(confirm_ch, q, **{"x-max-length": 1, "x-overflow": "reject-publish-dlx"})
    confirm_ch.basic_publish("", q, b"1")
    confirm_ch.basic_publish("", q, b"2")  # confirmed, not nacked
    assert wait_until(confirm_ch.connection, lambda: _count(confirm_ch, q) == 1)
    assert [b for _, _, b in get_n(confirm_ch, q, 1)] == [b"2"]
