"""Every dead-letter trigger and header rule, for classic and quorum source queues (pika).

Triggers: reject / nack without requeue (rejected), per-queue and per-message TTL (expired),
max-length drop-head (maxlen), quorum delivery-limit (delivery_limit); queue expiry does not
dead-letter. Headers: x-death order and counts through several queues and back, x-first-death-*,
CC kept / BCC removed, the dead-letter routing key replacing the keys (CC removed), cycles
dropped. At-least-once: held dead letters count against the source's max-length.
"""

import time

import pika
import pika.exceptions
import pytest

from compat_tests.support import get_n

KINDS = ["classic", "quorum"]


def _declare(ch, name, kind, **args):
    if kind == "quorum":
        args["x-queue-type"] = "quorum"
    ch.queue_declare(name, durable=True, arguments=args)


def _setup(ch, names, kind, **source_args):
    dlx, dlq, src = names.exchange(), names.queue(), names.queue()
    ch.exchange_declare(dlx, "fanout")
    ch.queue_declare(dlq, durable=True)
    ch.queue_bind(dlq, dlx)
    _declare(ch, src, kind, **{"x-dead-letter-exchange": dlx, **source_args})
    return dlx, dlq, src


def _get_one(ch, q):
    (m, _, _), = get_n(ch, q, 1, auto_ack=False)
    return m


def _one_death(ch, dlq):
    got = get_n(ch, dlq, 1)
    assert len(got) == 1
    m, p, body = got[0]
    return m, p, body, p.headers["x-death"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("how", ["reject", "nack"])
def test_reject_and_nack_dead_letter(confirm_ch, names, kind, how):
    dlx, dlq, src = _setup(confirm_ch, names, kind)
    confirm_ch.basic_publish("", src, b"r")
    m = _get_one(confirm_ch, src)
    if how == "reject":
        confirm_ch.basic_reject(m.delivery_tag, requeue=False)
    else:
        confirm_ch.basic_nack(m.delivery_tag, multiple=False, requeue=False)
    m, p, body, deaths = _one_death(confirm_ch, dlq)
    assert (body, m.exchange, m.routing_key) == (b"r", dlx, src)
    assert [(d["queue"], d["reason"], d["count"]) for d in deaths] == [(src, "rejected", 1)]


@pytest.mark.parametrize("kind", KINDS)
def test_queue_ttl_dead_letters_without_original_expiration(confirm_ch, names, kind):
    _, dlq, src = _setup(confirm_ch, names, kind, **{"x-message-ttl": 20})
    confirm_ch.basic_publish("", src, b"t")
    _, p, _, deaths = _one_death(confirm_ch, dlq)
    assert deaths[0]["reason"] == "expired" and "original-expiration" not in deaths[0]
    assert p.expiration is None


@pytest.mark.parametrize("kind", KINDS)
def test_message_ttl_dead_letters_with_original_expiration(confirm_ch, names, kind):
    _, dlq, src = _setup(confirm_ch, names, kind)
    confirm_ch.basic_publish("", src, b"t", pika.BasicProperties(expiration="20"))
    _, p, _, deaths = _one_death(confirm_ch, dlq)
    assert (deaths[0]["reason"], deaths[0]["original-expiration"]) == ("expired", "20")
    assert p.expiration is None


@pytest.mark.parametrize("kind", KINDS)
def test_max_length_drop_head_dead_letters(confirm_ch, names, kind):
    _, dlq, src = _setup(confirm_ch, names, kind, **{"x-max-length": 2})
    for b in (b"a", b"b", b"c"):
        confirm_ch.basic_publish("", src, b)
    _, _, body, deaths = _one_death(confirm_ch, dlq)
    assert body == b"a" and deaths[0]["reason"] == "maxlen"
    assert [b for _, _, b in get_n(confirm_ch, src, 2)] == [b"b", b"c"]


def test_quorum_delivery_limit_dead_letters(confirm_ch, names):
    _, dlq, src = _setup(confirm_ch, names, "quorum", **{"x-delivery-limit": 1})
    confirm_ch.basic_publish("", src, b"d")
    for _ in range(2):
        m = _get_one(confirm_ch, src)
        confirm_ch.basic_reject(m.delivery_tag, requeue=True)
    _, _, body, deaths = _one_death(confirm_ch, dlq)
    assert body == b"d" and deaths[0]["reason"] == "delivery_limit"
    assert deaths[0]["queue"] == src


@pytest.mark.parametrize("kind", KINDS)
def test_queue_expiry_does_not_dead_letter(conn, confirm_ch, names, kind):
    _, dlq, src = _setup(confirm_ch, names, kind, **{"x-expires": 200})
    confirm_ch.basic_publish("", src, b"gone-with-the-queue")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        conn.sleep(1.0)  # a passive declare renews a classic queue's lease in RabbitMQ
        c = conn.channel()
        try:
            c.queue_declare(src, passive=True)
            c.close()
        except pika.exceptions.ChannelClosedByBroker as e:
            assert e.reply_code == 404
            break
    else:
        pytest.fail("queue did not expire")
    assert confirm_ch.queue_declare(dlq, passive=True).method.message_count == 0


@pytest.mark.parametrize("kind", KINDS)
def test_cc_kept_bcc_removed(confirm_ch, names, kind):
    x = names.exchange()
    confirm_ch.exchange_declare(x, "direct")
    dlx, dlq, src = _setup(confirm_ch, names, kind)
    confirm_ch.queue_bind(src, x, "main")
    confirm_ch.basic_publish(x, "main", b"c",
                             pika.BasicProperties(headers={"CC": ["cc1"], "BCC": ["bcc1"]}))
    m = _get_one(confirm_ch, src)
    confirm_ch.basic_reject(m.delivery_tag, requeue=False)
    _, p, _, deaths = _one_death(confirm_ch, dlq)
    assert p.headers["CC"] == ["cc1"] and "BCC" not in p.headers
    assert deaths[0]["routing-keys"] == ["main", "cc1"] and deaths[0]["exchange"] == x


@pytest.mark.parametrize("kind", KINDS)
def test_dead_letter_routing_key_replaces_keys_and_drops_cc(confirm_ch, names, kind):
    x, dlx = names.exchange(), names.exchange()
    confirm_ch.exchange_declare(x, "direct")
    confirm_ch.exchange_declare(dlx, "direct")
    dead, cc_q = names.queue(), names.queue()
    confirm_ch.queue_declare(dead, durable=True)
    confirm_ch.queue_declare(cc_q, durable=True)
    confirm_ch.queue_bind(dead, dlx, "dead")
    confirm_ch.queue_bind(cc_q, dlx, "cc1")  # would match the CC key if it were still used
    src = names.queue()
    _declare(confirm_ch, src, kind, **{"x-dead-letter-exchange": dlx, "x-dead-letter-routing-key": "dead"})
    confirm_ch.queue_bind(src, x, "main")
    confirm_ch.basic_publish(x, "main", b"k", pika.BasicProperties(headers={"CC": ["cc1"]}))
    m = _get_one(confirm_ch, src)
    confirm_ch.basic_reject(m.delivery_tag, requeue=False)
    m, p, _, deaths = _one_death(confirm_ch, dead)
    assert m.routing_key == "dead" and "CC" not in p.headers
    assert deaths[0]["routing-keys"] == ["main", "cc1"]
    assert confirm_ch.queue_declare(cc_q, passive=True).method.message_count == 0


@pytest.mark.parametrize("kind", KINDS)
def test_x_death_order_and_counts_through_two_queues_and_back(confirm_ch, names, kind):
    q1, q2 = names.queue(), names.queue()
    _declare(confirm_ch, q1, kind, **{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": q2})
    _declare(confirm_ch, q2, kind, **{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": q1})
    confirm_ch.basic_publish("", q1, b"pingpong")
    for q in (q1, q2, q1, q2):
        m = _get_one(confirm_ch, q)
        confirm_ch.basic_reject(m.delivery_tag, requeue=False)
    (_, p, _), = get_n(confirm_ch, q1, 1)
    deaths = p.headers["x-death"]
    assert [(d["queue"], d["reason"], d["count"]) for d in deaths] == [
        (q2, "rejected", 2), (q1, "rejected", 2)]
    assert (p.headers["x-first-death-queue"], p.headers["x-first-death-reason"],
            p.headers["x-first-death-exchange"]) == (q1, "rejected", "")


@pytest.mark.parametrize("kind", KINDS)
def test_expiry_cycle_is_dropped_other_targets_kept(confirm_ch, names, kind):
    """q1 expires into q2, q2 expires into a fanout bound to q1 and a witness: no rejection in
    the loop, so the copy for q1 is dropped and only the witness gets one."""
    fan, q1, q2, witness = names.exchange(), names.queue(), names.queue(), names.queue()
    confirm_ch.exchange_declare(fan, "fanout")
    confirm_ch.queue_declare(witness, durable=True)
    _declare(confirm_ch, q1, kind, **{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": q2,
                                      "x-message-ttl": 20})
    _declare(confirm_ch, q2, kind, **{"x-dead-letter-exchange": fan, "x-message-ttl": 20})
    confirm_ch.queue_bind(q1, fan)
    confirm_ch.queue_bind(witness, fan)
    confirm_ch.basic_publish("", q1, b"loop")
    (_, p, _), = get_n(confirm_ch, witness, 1)
    assert [(d["queue"], d["reason"]) for d in p.headers["x-death"]] == [
        (q2, "expired"), (q1, "expired")]
    time.sleep(0.3)
    assert confirm_ch.queue_declare(q1, passive=True).method.message_count == 0
    assert confirm_ch.queue_declare(q2, passive=True).method.message_count == 0
    assert get_n(confirm_ch, witness, 1, timeout=0.5) == []


def test_at_least_once_held_messages_count_against_max_length(confirm_ch, names):
    src = names.queue()
    _declare(confirm_ch, src, "quorum", **{"x-dead-letter-exchange": names.exchange(),  # never declared
                                           "x-dead-letter-strategy": "at-least-once",
                                           "x-overflow": "reject-publish", "x-max-length": 2})
    for b in (b"1", b"2"):
        confirm_ch.basic_publish("", src, b)
    for _ in range(2):
        m = _get_one(confirm_ch, src)
        confirm_ch.basic_reject(m.delivery_tag, requeue=False)
    confirm_ch.basic_publish("", src, b"3")   # 2 held: not over the limit yet ("already over" rule)
    with pytest.raises(pika.exceptions.NackError):
        confirm_ch.basic_publish("", src, b"4")
    assert confirm_ch.queue_declare(src, passive=True).method.message_count == 1


@pytest.mark.ours_only
def test_at_least_once_delivers_once_the_dlx_exists(confirm_ch, names):
    """RabbitMQ retries only on its 3-minute timer; this broker retries within a second."""
    dlx, dlq, src = names.exchange(), names.queue(), names.queue()
    _declare(confirm_ch, src, "quorum", **{"x-dead-letter-exchange": dlx,
                                           "x-dead-letter-strategy": "at-least-once",
                                           "x-overflow": "reject-publish", "x-max-length": 2})
    for b in (b"1", b"2"):
        confirm_ch.basic_publish("", src, b)
    for _ in range(2):
        m = _get_one(confirm_ch, src)
        confirm_ch.basic_reject(m.delivery_tag, requeue=False)
    confirm_ch.exchange_declare(dlx, "fanout")
    confirm_ch.queue_declare(dlq, durable=True)
    confirm_ch.queue_bind(dlq, dlx)
    assert sorted(b for _, _, b in get_n(confirm_ch, dlq, 2)) == [b"1", b"2"]
    time.sleep(0.3)  # settled: the source has room again
    for b in (b"3", b"4", b"5"):
        confirm_ch.basic_publish("", src, b)
