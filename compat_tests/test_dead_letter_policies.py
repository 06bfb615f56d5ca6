"""Dead-letter settings from policies: dead-letter-exchange, dead-letter-routing-key and
dead-letter-strategy, the queue argument winning over the policy, and policy changes reaching
existing queues without a redeclare (including switching strategy at runtime).

Policies are set over the management HTTP API with the `api` / `policy` fixtures of
`conftest.py` (which says how the API is found; without one the tests are skipped).
"""


import pika
import pika.exceptions
import pytest

from compat_tests.support import channel_closed, get_n


def _dlx(ch, names, kind="fanout", key=""):
    x, q = names.exchange(), names.queue()
    ch.exchange_declare(x, kind)
    ch.queue_declare(q, durable=True)
    ch.queue_bind(q, x, key)
    return x, q


def _reject(ch, q, body=b"m"):
    ch.basic_publish("", q, body)
    (m, _, _), = get_n(ch, q, 1, auto_ack=False)
    ch.basic_reject(m.delivery_tag, requeue=False)


def _count(ch, q):
    return ch.queue_declare(q, passive=True).method.message_count


def test_policy_dead_letter_exchange_and_routing_key(confirm_ch, names, policy):
    x, dlq = _dlx(confirm_ch, names, "direct", "via-policy")
    src = names.queue()
    confirm_ch.queue_declare(src, durable=True)
    policy({"dead-letter-exchange": x, "dead-letter-routing-key": "via-policy"}, src)
    _reject(confirm_ch, src)
    (m, p, _), = get_n(confirm_ch, dlq, 1)
    assert (m.exchange, m.routing_key) == (x, "via-policy")
    assert p.headers["x-death"][0]["queue"] == src


@pytest.mark.parametrize("kind", ["classic", "quorum"])
def test_argument_wins_over_policy(confirm_ch, names, policy, kind):
    xa, qa = _dlx(confirm_ch, names, "direct", "arg-key")
    xp, qp = _dlx(confirm_ch, names, "direct", "pol-key")
    confirm_ch.queue_bind(qa, xa, "pol-key")  # the argument's exchange with the policy's key
    src = names.queue()
    args = {"x-dead-letter-exchange": xa, "x-dead-letter-routing-key": "arg-key"}
    if kind == "quorum":
        args["x-queue-type"] = "quorum"
    confirm_ch.queue_declare(src, durable=True, arguments=args)
    policy({"dead-letter-exchange": xp, "dead-letter-routing-key": "pol-key"}, src)
    _reject(confirm_ch, src)
    (m, _, _), = get_n(confirm_ch, qa, 1)
    assert (m.exchange, m.routing_key) == (xa, "arg-key")
    assert _count(confirm_ch, qp) == 0


@pytest.mark.parametrize("kind", ["classic", "quorum"])
def test_policy_change_reaches_existing_queue(confirm_ch, names, policy, kind):
    x1, q1 = _dlx(confirm_ch, names)
    x2, q2 = _dlx(confirm_ch, names)
    src = names.queue()
    confirm_ch.queue_declare(src, durable=True,
                             arguments={"x-queue-type": kind} if kind == "quorum" else {})
    policy({"dead-letter-exchange": x1}, src)
    _reject(confirm_ch, src, b"first")
    assert [b for _, _, b in get_n(confirm_ch, q1, 1)] == [b"first"]
    policy({"dead-letter-exchange": x2}, src)   # no redeclare
    _reject(confirm_ch, src, b"second")
    assert [b for _, _, b in get_n(confirm_ch, q2, 1)] == [b"second"]
    assert _count(confirm_ch, q1) == 0


def _held_source(ch, names, **args):
    """A quorum queue with reject-publish max-length 2 and a DLX that does not exist."""
    src = names.queue()
    ch.queue_declare(src, durable=True, arguments={
        "x-queue-type": "quorum", "x-overflow": "reject-publish", "x-max-length": 2,
        "x-dead-letter-exchange": names.exchange(), **args})
    return src


def _fill_and_reject_two(ch, src):
    for b in (b"1", b"2"):
        ch.basic_publish("", src, b)
    for _ in range(2):
        (m, _, _), = get_n(ch, src, 1, auto_ack=False)
        ch.basic_reject(m.delivery_tag, requeue=False)


def test_policy_strategy_at_least_once_keeps_messages(confirm_ch, names, policy):
    src = _held_source(confirm_ch, names)
    policy({"dead-letter-strategy": "at-least-once"}, src)
    _fill_and_reject_two(confirm_ch, src)
    confirm_ch.basic_publish("", src, b"3")
    with pytest.raises(pika.exceptions.NackError):  # the two held ones still count
        confirm_ch.basic_publish("", src, b"4")


def test_strategy_argument_wins_over_policy(confirm_ch, names, policy):
    src = _held_source(confirm_ch, names, **{"x-dead-letter-strategy": "at-most-once"})
    policy({"dead-letter-strategy": "at-least-once"}, src)
    _fill_and_reject_two(confirm_ch, src)
    for b in (b"3", b"4"):  # dropped, not held: room for both
        confirm_ch.basic_publish("", src, b)
    assert _count(confirm_ch, src) == 2


def test_switching_to_at_most_once_drops_held_messages(confirm_ch, names, policy):
    src = _held_source(confirm_ch, names)
    policy({"dead-letter-strategy": "at-least-once"}, src)
    _fill_and_reject_two(confirm_ch, src)
    policy({"dead-letter-strategy": "at-most-once"}, src)   # documented: held ones are dropped
    for b in (b"3", b"4"):
        confirm_ch.basic_publish("", src, b)
    assert _count(confirm_ch, src) == 2


@pytest.mark.rabbitmq4
def test_switching_overflow_to_drop_head_drops_held_messages(confirm_ch, names, policy):
    """Leaving at-least-once indirectly (overflow drop-head) drops the held messages too, as the
    quorum-queue document says. RabbitMQ 3.10 keeps rejecting publishes after this policy
    change (seen with a 3 s settle time), so the test is skipped there."""
    src = names.queue()
    confirm_ch.queue_declare(src, durable=True, arguments={
        "x-queue-type": "quorum", "x-max-length": 2, "x-dead-letter-exchange": names.exchange()})
    alo = {"dead-letter-strategy": "at-least-once", "overflow": "reject-publish"}
    policy(alo, src)
    _fill_and_reject_two(confirm_ch, src)
    confirm_ch.basic_publish("", src, b"3")
    with pytest.raises(pika.exceptions.NackError):
        confirm_ch.basic_publish("", src, b"4")
    policy({**alo, "overflow": "drop-head"}, src)
    for b in (b"5", b"6"):  # 3 is dropped from the head; the held two are gone
        confirm_ch.basic_publish("", src, b)
    assert [b for _, _, b in get_n(confirm_ch, src, 2)] == [b"5", b"6"]


def test_declare_with_dlx_needs_write_on_the_exchange(restricted_conn, names):
    """Seed 002: besides configure on the queue, read on it and write on the DLX."""
    prefix = names.queue() + "."
    user, conn = restricted_conn(prefix)
    ok, refused = names.track_queue(prefix + "ok"), names.track_queue(prefix + "refused")
    conn.channel().queue_declare(ok, arguments={"x-dead-letter-exchange": prefix + "x"})
    with channel_closed(403, "ACCESS_REFUSED - access to exchange 'other.x' in vhost '/' "
                             f"refused for user '{user}'"):
        conn.channel().queue_declare(refused, arguments={"x-dead-letter-exchange": "other.x"})
