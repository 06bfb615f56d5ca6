"""A quorum queue consumer's prefetch as clients see it. This broker checks a consumer that is
alone on its queue out beyond its prefetch and holds the rest on its node
(amqp_broker/queues/lookahead.py); none of that may show: the client never has more than its
prefetch unacknowledged, counts show held messages as ready, a message the client never got
comes back first-time (no redelivered flag, no x-delivery-count) when the consumer goes, and a
second consumer gets everything the first one does not have."""

import pika

from compat_tests.support import consume_n, get_n, wait_until

QQ = {"x-queue-type": "quorum"}


def _fill(ch, q: str, n: int) -> None:
    ch.queue_declare(q, durable=True, arguments=QQ)
    for i in range(n):
        ch.basic_publish("", q, b"%d" % i, pika.BasicProperties(delivery_mode=2))


def _count_header(props) -> int:
    """x-delivery-count, 0 when absent (RabbitMQ 3.10's basic.get says 0 on a first delivery)."""
    return (props.headers or {}).get("x-delivery-count", 0)


def _count(ch, q: str) -> int:
    return ch.queue_declare(q, passive=True).method.message_count


def _consumer(conn, q: str, prefetch: int, first: int):
    """A new channel with `prefetch` consuming `q` without acking; (channel, tag, deliveries)
    once `first` deliveries are in."""
    ch = conn.channel()
    ch.basic_qos(prefetch_count=prefetch)
    tag, got = consume_n(ch, q, first)
    return ch, tag, got


def test_a_consumer_never_has_more_than_its_prefetch(conn, confirm_ch, names):
    q = names.queue()
    _fill(confirm_ch, q, 40)
    cch, _, got = _consumer(conn, q, 5, 5)
    conn.sleep(0.5)  # more would have arrived by now
    assert [b for _, _, b in got] == [b"%d" % i for i in range(5)]
    assert wait_until(conn, lambda: _count(confirm_ch, q) == 35)
    for round_ in range(1, 8):
        cch.basic_ack(got[-1][0].delivery_tag, multiple=True)
        assert wait_until(conn, lambda: len(got) == 5 * (round_ + 1))
        conn.sleep(0.2)
        assert len(got) == 5 * (round_ + 1)
        assert wait_until(conn, lambda: _count(confirm_ch, q) == 35 - 5 * round_)
    assert [b for _, _, b in got] == [b"%d" % i for i in range(40)]
    assert not any(m.redelivered for m, _, _ in got)


def test_messages_a_closed_channel_never_got_come_back_first_time_in_order(conn, confirm_ch,
                                                                           names):
    q = names.queue()
    _fill(confirm_ch, q, 20)
    cch, _, _ = _consumer(conn, q, 5, 5)
    cch.close()
    got = get_n(conn.channel(), q, 20)
    assert [b for _, _, b in got] == [b"%d" % i for i in range(20)]
    assert all(m.redelivered for m, _, _ in got[:5])
    for m, p, _ in got[5:]:
        assert m.redelivered is False and _count_header(p) == 0


def test_a_cancelled_consumer_keeps_only_what_it_was_sent(conn, confirm_ch, names):
    q = names.queue()
    _fill(confirm_ch, q, 20)
    cch, tag, got = _consumer(conn, q, 5, 5)
    cch.basic_cancel(tag)
    rest = get_n(conn.channel(), q, 15)
    assert [b for _, _, b in rest] == [b"%d" % i for i in range(5, 20)]
    for m, p, _ in rest:
        assert m.redelivered is False and _count_header(p) == 0
    cch.basic_ack(got[-1][0].delivery_tag, multiple=True)  # still its own to ack
    assert wait_until(conn, lambda: _count(confirm_ch, q) == 0)


def test_a_second_consumer_gets_all_that_a_stalled_one_was_not_sent(conn, confirm_ch, names):
    q = names.queue()
    _fill(confirm_ch, q, 30)
    _, _, held = _consumer(conn, q, 5, 5)  # never acked
    _, _, got = _consumer(conn, q, 100, 25)
    conn.sleep(0.3)
    assert len(held) == 5 and len(got) == 25
    # which consumer gets which message first is up to the broker; each message goes to one
    assert sorted(int(b) for _, _, b in held + got) == list(range(30))
    for m, p, _ in got:
        assert m.redelivered is False and _count_header(p) == 0


def test_a_single_active_consumer_hands_over_in_order(conn, confirm_ch, names):
    q = names.queue()
    confirm_ch.queue_declare(q, durable=True,
                             arguments={**QQ, "x-single-active-consumer": True})
    for i in range(20):
        confirm_ch.basic_publish("", q, b"%d" % i, pika.BasicProperties(delivery_mode=2))
    active, _, first = _consumer(conn, q, 5, 5)
    _, _, second = _consumer(conn, q, 100, 0)  # waits its turn
    conn.sleep(0.3)
    assert len(first) == 5 and second == []
    active.close()  # what it was sent comes back, redelivered; the rest never left
    assert wait_until(conn, lambda: len(second) == 20)
    again = [int(b) for m, _, b in second if m.redelivered]
    fresh = [(int(b), _count_header(p)) for m, p, b in second if not m.redelivered]
    assert again == list(range(5))
    assert fresh == [(i, 0) for i in range(5, 20)]
