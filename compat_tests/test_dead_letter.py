"""Dead lettering as consumers of the dead-letter queue see it: which exchange and routing key
the message arrives with, the x-death entry (reason, queue, exchange, routing-keys, count, time,
original-expiration) and x-first-death-* headers, for reject, nack, TTL expiry and max-length,
plus repeated deaths, classic and quorum (at-least-once) sources."""

import datetime

import pika
import pytest

from compat_tests.support import get_n


def _dlx_setup(ch, names, **source_args):
    """A fanout DLX with one queue behind it, and a source queue dead-lettering into it."""
    dlx, dlq, src = names.exchange(), names.queue(), names.queue()
    ch.exchange_declare(dlx, "fanout")
    ch.queue_declare(dlq)
    ch.queue_bind(dlq, dlx)
    ch.queue_declare(src, arguments={"x-dead-letter-exchange": dlx, **source_args})
    return dlx, dlq, src


def _reject_one(ch, q, *, nack=False):
    (m, _, _), = get_n(ch, q, 1, auto_ack=False)
    if nack:
        ch.basic_nack(m.delivery_tag, requeue=False)
    else:
        ch.basic_reject(m.delivery_tag, requeue=False)


def test_rejected_message_x_death(confirm_ch, names):
    dlx, dlq, src = _dlx_setup(confirm_ch, names)
    confirm_ch.basic_publish("", src, b"r",
                             pika.BasicProperties(headers={"app": 1}, content_type="text/plain"))
    _reject_one(confirm_ch, src)
    (m, p, body), = get_n(confirm_ch, dlq, 1)
    assert (body, m.exchange, m.routing_key, m.redelivered) == (b"r", dlx, src, False)
    assert p.content_type == "text/plain" and p.headers["app"] == 1
    death, = p.headers["x-death"]
    assert {k: death[k] for k in ("count", "reason", "queue", "exchange", "routing-keys")} == {
        "count": 1, "reason": "rejected", "queue": src, "exchange": "", "routing-keys": [src]}
    assert isinstance(death["time"], datetime.datetime)
    assert (p.headers["x-first-death-reason"], p.headers["x-first-death-queue"],
            p.headers["x-first-death-exchange"]) == ("rejected", src, "")


def test_nack_without_requeue_is_reason_rejected(confirm_ch, names):
    _, dlq, src = _dlx_setup(confirm_ch, names)
    confirm_ch.basic_publish("", src, b"n")
    _reject_one(confirm_ch, src, nack=True)
    (_, p, _), = get_n(confirm_ch, dlq, 1)
    assert p.headers["x-death"][0]["reason"] == "rejected"


def test_requeue_does_not_dead_letter(confirm_ch, names):
    _, dlq, src = _dlx_setup(confirm_ch, names)
    confirm_ch.basic_publish("", src, b"back")
    (m, _, _), = get_n(confirm_ch, src, 1, auto_ack=False)
    confirm_ch.basic_reject(m.delivery_tag, requeue=True)
    (m2, _, _), = get_n(confirm_ch, src, 1)
    assert m2.redelivered is True
    assert confirm_ch.queue_declare(dlq, passive=True).method.message_count == 0


def test_expiration_moves_to_original_expiration(confirm_ch, names):
    _, dlq, src = _dlx_setup(confirm_ch, names)
    confirm_ch.basic_publish("", src, b"e", pika.BasicProperties(expiration="600000"))
    _reject_one(confirm_ch, src)
    (_, p, _), = get_n(confirm_ch, dlq, 1)
    assert p.expiration is None
    assert p.headers["x-death"][0]["original-expiration"] == "600000"


def test_expired_message_x_death(confirm_ch, names):
    dlx, dlq, src = _dlx_setup(confirm_ch, names, **{"x-message-ttl": 10})
    confirm_ch.basic_publish("amq.direct", "unbound", b"")  # warm-up, routed nowhere
    confirm_ch.basic_publish("", src, b"late")
    (m, p, body), = get_n(confirm_ch, dlq, 1)
    assert (body, m.exchange, m.routing_key) == (b"late", dlx, src)
    death, = p.headers["x-death"]
    assert (death["reason"], death["queue"], death["count"]) == ("expired", src, 1)


def test_per_message_ttl_expiry_dead_letters(confirm_ch, names):
    _, dlq, src = _dlx_setup(confirm_ch, names)
    confirm_ch.basic_publish("", src, b"m", pika.BasicProperties(expiration="10"))
    (_, p, _), = get_n(confirm_ch, dlq, 1)
    death, = p.headers["x-death"]
    assert (death["reason"], death["original-expiration"]) == ("expired", "10")


def test_max_length_dead_letters_the_head(confirm_ch, names):
    _, dlq, src = _dlx_setup(confirm_ch, names, **{"x-max-length": 1})
    confirm_ch.basic_publish("", src, b"old")
    confirm_ch.basic_publish("", src, b"new")
    (_, p, body), = get_n(confirm_ch, dlq, 1)
    assert body == b"old" and p.headers["x-death"][0]["reason"] == "maxlen"
    assert [b for _, _, b in get_n(confirm_ch, src, 1)] == [b"new"]


def test_dead_letter_routing_key_override(confirm_ch, names):
    dlx, dlq = names.exchange(), names.queue()
    confirm_ch.exchange_declare(dlx, "direct")
    confirm_ch.queue_declare(dlq)
    confirm_ch.queue_bind(dlq, dlx, "dead")
    src = names.queue()
    confirm_ch.queue_declare(src, arguments={"x-dead-letter-exchange": dlx,
                                             "x-dead-letter-routing-key": "dead"})
    confirm_ch.basic_publish("", src, b"k")
    _reject_one(confirm_ch, src)
    (m, p, _), = get_n(confirm_ch, dlq, 1)
    assert (m.exchange, m.routing_key) == (dlx, "dead")
    assert p.headers["x-death"][0]["routing-keys"] == [src]  # the original key is kept


def test_original_exchange_and_cc_keys_recorded(confirm_ch, names):
    x = names.exchange()
    confirm_ch.exchange_declare(x, "direct")
    _, dlq, src = _dlx_setup(confirm_ch, names)
    confirm_ch.queue_bind(src, x, "main")
    confirm_ch.basic_publish(x, "main", b"cc", pika.BasicProperties(headers={"CC": ["other"]}))
    _reject_one(confirm_ch, src)
    (_, p, _), = get_n(confirm_ch, dlq, 1)
    death, = p.headers["x-death"]
    assert (death["exchange"], death["routing-keys"]) == (x, ["main", "other"])


def test_dead_lettered_twice_from_same_queue_counts(confirm_ch, names):
    # The queue dead-letters into itself via the default exchange; rejections may cycle.
    q = names.queue()
    confirm_ch.queue_declare(q, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": q})
    confirm_ch.basic_publish("", q, b"loop")
    _reject_one(confirm_ch, q)
    _reject_one(confirm_ch, q)
    (_, p, _), = get_n(confirm_ch, q, 1)
    death, = p.headers["x-death"]
    assert (death["reason"], death["queue"], death["count"]) == ("rejected", q, 2)


def test_first_death_headers_survive_a_second_death(confirm_ch, names):
    q1, q2, q3 = names.queue(), names.queue(), names.queue()
    confirm_ch.queue_declare(q3)
    confirm_ch.queue_declare(q2, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": q3,
                                            "x-message-ttl": 10})
    confirm_ch.queue_declare(q1, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": q2})
    confirm_ch.basic_publish("", q1, b"twice")
    _reject_one(confirm_ch, q1)
    (_, p, _), = get_n(confirm_ch, q3, 1)
    deaths = p.headers["x-death"]
    # Most recent death first.
    assert [(d["reason"], d["queue"]) for d in deaths] == [("expired", q2), ("rejected", q1)]
    assert (p.headers["x-first-death-reason"], p.headers["x-first-death-queue"]) == ("rejected", q1)


@pytest.mark.rabbitmq4
def test_last_death_headers(confirm_ch, names):
    _, dlq, src = _dlx_setup(confirm_ch, names)
    confirm_ch.basic_publish("", src, b"x")
    _reject_one(confirm_ch, src)
    (_, p, _), = get_n(confirm_ch, dlq, 1)
    assert (p.headers["x-last-death-reason"], p.headers["x-last-death-queue"],
            p.headers["x-last-death-exchange"]) == ("rejected", src, "")


def test_missing_dead_letter_exchange_drops_silently(conn, confirm_ch, names):
    src = names.queue()
    confirm_ch.queue_declare(src, arguments={"x-dead-letter-exchange": names.exchange()})
    confirm_ch.basic_publish("", src, b"lost")
    _reject_one(confirm_ch, src)
    confirm_ch.basic_publish("", src, b"still-works")
    assert [b for _, _, b in get_n(confirm_ch, src, 1)] == [b"still-works"]
    assert conn.is_open and confirm_ch.is_open


def test_quorum_at_least_once_dead_lettering(confirm_ch, names):
    dlq, src = names.queue(), names.queue()
    confirm_ch.queue_declare(dlq, durable=True)
    confirm_ch.queue_declare(src, durable=True, arguments={
        "x-queue-type": "quorum", "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq,
        "x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish"})
    confirm_ch.basic_publish("", src, b"alo")
    _reject_one(confirm_ch, src)
    (m, p, body), = get_n(confirm_ch, dlq, 1)
    assert (body, m.routing_key) == (b"alo", dlq)
    death, = p.headers["x-death"]
    assert (death["reason"], death["queue"], death["count"]) == ("rejected", src, 1)


def test_quorum_at_most_once_dead_lettering(confirm_ch, names):
    dlq, src = names.queue(), names.queue()
    confirm_ch.queue_declare(dlq, durable=True)
    confirm_ch.queue_declare(src, durable=True, arguments={
        "x-queue-type": "quorum", "x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
    confirm_ch.basic_publish("", src, b"amo")
    _reject_one(confirm_ch, src)
    (_, p, body), = get_n(confirm_ch, dlq, 1)
    assert body == b"amo" and p.headers["x-death"][0]["reason"] == "rejected"
