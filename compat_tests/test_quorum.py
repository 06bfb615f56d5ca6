"""Quorum queues (single node) as clients see them: declare rules (406 invalid property / arg),
equivalence against classic declarations (strict unless the node opts in to relaxed checks), x-delivery-count,
delivery-limit, global QoS refusal, max-length, single active consumer."""

import pika
import pytest

from compat_tests.support import channel_closed, connection_closed, consume_n, get_n, wait_until
from compat_tests.support.raw import RawClient

QQ = {"x-queue-type": "quorum"}


def _declare(ch, q, **args):
    return ch.queue_declare(q, durable=True, arguments={**QQ, **args})


def test_declare_quorum_queue(confirm_ch, names):
    q = names.queue()
    ok = _declare(confirm_ch, q).method
    assert (ok.queue, ok.message_count, ok.consumer_count) == (q, 0, 0)
    _declare(confirm_ch, q)  # an identical redeclare is fine
    confirm_ch.queue_declare(q, passive=True)


@pytest.mark.parametrize("flags,prop", [
    ({"durable": False}, "non-durable"),
    ({"durable": True, "exclusive": True}, "exclusive-owner"),
    ({"durable": True, "auto_delete": True}, "auto-delete"),
])
def test_quorum_queue_invalid_properties_are_406(conn, names, flags, prop):
    q = names.queue()
    with channel_closed(406, f"PRECONDITION_FAILED - invalid property '{prop}' for queue '{q}' in vhost '/'"):
        conn.channel().queue_declare(q, arguments=QQ, **flags)


def test_unknown_queue_type_is_406(conn, names):
    with channel_closed(406, "PRECONDITION_FAILED - invalid arg 'x-queue-type'"):
        conn.channel().queue_declare(names.queue(), durable=True, arguments={"x-queue-type": "bogus"})


def test_quorum_queue_max_priority_is_406(conn, names):
    # x-max-priority is a classic queue argument in 3.10 and 4.2 alike (rabbit_quorum_queue's
    # queue_arguments lack it); 4.x quorum queues prioritise without it.
    q = names.queue()
    with channel_closed(406) as closed:
        conn.channel().queue_declare(q, durable=True, arguments={**QQ, "x-max-priority": 5})
    assert closed.reply_text == (f"PRECONDITION_FAILED - invalid arg 'x-max-priority' for queue "
                                 f"'{q}' in vhost '/' of queue type rabbit_quorum_queue")


def test_redeclare_quorum_as_implicit_classic_is_406(conn, confirm_ch, names):
    # Strict by default in 3.10 and 4.x alike; quorum_queue.property_equivalence.
    # relaxed_checks_on_redeclaration (3.11.16+, opt-in) relaxes it (tests/integration).
    q = names.queue()
    _declare(confirm_ch, q)
    with channel_closed(406, f"PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue '{q}'"):
        conn.channel().queue_declare(q, durable=True)


def test_redeclare_classic_as_quorum_is_406(conn, confirm_ch, names):
    q = names.queue()
    confirm_ch.queue_declare(q, durable=True)
    with channel_closed(406, f"PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue '{q}'"):
        _declare(conn.channel(), q)


def test_first_delivery_has_no_delivery_count(confirm_ch, names):
    q = names.queue()
    _declare(confirm_ch, q)
    confirm_ch.basic_publish("", q, b"x", pika.BasicProperties(headers={"app": "h"}))
    _, got = consume_n(confirm_ch, q, 1)
    method, props, _ = got[0]
    assert method.redelivered is False
    assert "x-delivery-count" not in (props.headers or {})
    assert props.headers["app"] == "h"


def test_requeue_increments_delivery_count(confirm_ch, names):
    q = names.queue()
    _declare(confirm_ch, q)
    confirm_ch.basic_publish("", q, b"x")
    counts = []
    for _ in range(3):
        (m, p, _), = get_n(confirm_ch, q, 1, auto_ack=False)
        counts.append((m.redelivered, (p.headers or {}).get("x-delivery-count")))
        confirm_ch.basic_nack(m.delivery_tag, requeue=True)
    assert counts[1:] == [(True, 1), (True, 2)]


def test_basic_get_first_delivery_count_rabbitmq3_quirk(confirm_ch, names, server_info):
    if not server_info.is_rabbitmq3:
        pytest.skip("RabbitMQ 3.10 quirk: basic.get carries x-delivery-count 0 on first delivery")
    q = names.queue()
    _declare(confirm_ch, q)
    confirm_ch.basic_publish("", q, b"x")
    (m, p, _), = get_n(confirm_ch, q, 1)
    assert (m.redelivered, p.headers) == (False, {"x-delivery-count": 0})


@pytest.mark.rabbitmq4
def test_basic_get_first_delivery_has_no_delivery_count_rabbitmq4(confirm_ch, names):
    q = names.queue()
    _declare(confirm_ch, q)
    confirm_ch.basic_publish("", q, b"x")
    (m, p, _), = get_n(confirm_ch, q, 1)
    assert m.redelivered is False and "x-delivery-count" not in (p.headers or {})


def test_channel_close_requeues_with_delivery_count(conn, confirm_ch, names):
    q = names.queue()
    _declare(confirm_ch, q)
    confirm_ch.basic_publish("", q, b"x")
    consume_n(confirm_ch, q, 1)
    confirm_ch.close()
    (m, p, body), = get_n(conn.channel(), q, 1)
    assert (m.redelivered, p.headers["x-delivery-count"], body) == (True, 1, b"x")


def test_delivery_limit_dead_letters(confirm_ch, names):
    q, dlq = names.queue(), names.queue()
    confirm_ch.queue_declare(dlq)
    _declare(confirm_ch, q, **{"x-delivery-limit": 1, "x-dead-letter-exchange": "",
                               "x-dead-letter-routing-key": dlq})
    confirm_ch.basic_publish("", q, b"poison")
    for _ in range(2):
        (m, _, _), = get_n(confirm_ch, q, 1, auto_ack=False)
        confirm_ch.basic_nack(m.delivery_tag, requeue=True)
    (m, p, body), = get_n(confirm_ch, dlq, 1)
    assert body == b"poison"
    death, = p.headers["x-death"]
    assert (death["reason"], death["queue"], death["count"]) == ("delivery_limit", q, 1)
    assert p.headers["x-first-death-reason"] == "delivery_limit"
    assert confirm_ch.queue_declare(q, passive=True).method.message_count == 0


def test_global_qos_consume_is_540(conn, confirm_ch, names):
    q = names.queue()
    _declare(confirm_ch, q)
    consumer_ch = conn.channel()
    consumer_ch.basic_qos(prefetch_count=1, global_qos=True)
    with connection_closed(540, f"NOT_IMPLEMENTED - queue '{q}' in vhost '/' does not support global qos"):
        consumer_ch.basic_consume(q, lambda *a: None)


def test_per_consumer_prefetch(conn, confirm_ch, names):
    q = names.queue()
    _declare(confirm_ch, q)
    for i in range(4):
        confirm_ch.basic_publish("", q, b"%d" % i)
    cch = conn.channel()
    cch.basic_qos(prefetch_count=1)
    _, got = consume_n(cch, q, 1)
    assert wait_until(conn, lambda: confirm_ch.queue_declare(q, passive=True).method.message_count == 3)
    assert len(got) == 1


def test_max_length_drop_head(confirm_ch, names):
    q = names.queue()
    _declare(confirm_ch, q, **{"x-max-length": 1})
    confirm_ch.basic_publish("", q, b"1")
    confirm_ch.basic_publish("", q, b"2")
    assert wait_until(confirm_ch.connection,
                      lambda: confirm_ch.queue_declare(q, passive=True).method.message_count == 1)
    assert [b for _, _, b in get_n(confirm_ch, q, 1)] == [b"2"]


def test_single_active_consumer(conn, confirm_ch, names):
    q = names.queue()
    _declare(confirm_ch, q, **{"x-single-active-consumer": True})
    a, b = [], []
    cch = conn.channel()
    tag_a = cch.basic_consume(q, lambda c, m, p, body: a.append(body), auto_ack=True)
    cch.basic_consume(q, lambda c, m, p, body: b.append(body), auto_ack=True)
    for i in range(3):
        confirm_ch.basic_publish("", q, b"%d" % i)
    assert wait_until(conn, lambda: len(a) == 3)
    cch.basic_cancel(tag_a)
    confirm_ch.basic_publish("", q, b"next")
    assert wait_until(conn, lambda: b == [b"next"])
    assert a == [b"0", b"1", b"2"]


def test_purge_and_delete_counts(confirm_ch, names):
    q = names.queue()
    _declare(confirm_ch, q)
    for i in range(3):
        confirm_ch.basic_publish("", q, b"%d" % i)
    assert confirm_ch.queue_purge(q).method.message_count == 3
    confirm_ch.basic_publish("", q, b"x")
    assert confirm_ch.queue_delete(q).method.message_count == 1


def test_reject_without_requeue_drops_without_dlx(conn, confirm_ch, names):
    q = names.queue()
    _declare(confirm_ch, q)
    confirm_ch.basic_publish("", q, b"x")
    (m, _, _), = get_n(confirm_ch, q, 1, auto_ack=False)
    confirm_ch.basic_reject(m.delivery_tag, requeue=False)
    confirm_ch.close()  # nothing unacked is left to requeue
    assert get_n(conn.channel(), q, 1, timeout=0.5) == []



def test_a_burst_publisher_that_also_consumes_gets_everything_in_order(broker_url, names):
    """20,000 publishes in one write, faster than the queue takes them (this broker then
    stops reading the connection until its Raft log has caught up, as RabbitMQ's flow
    control does), then consumed on the same connection: all, in order, none left."""
    from pamqp import body, commands, frame, header

    q = names.queue()
    n = 20000
    with RawClient(broker_url, timeout=60) as raw:
        raw.handshake()
        raw.open_channel(1)
        raw.send(1, commands.Queue.Declare(queue=q, durable=True, arguments=QQ))
        raw.read_method(commands.Queue.DeclareOk)
        props = commands.Basic.Properties()
        raw.send_raw(b"".join(
            frame.marshal(commands.Basic.Publish(routing_key=q), 1)
            + frame.marshal(header.ContentHeader(0, len(b"%d" % i), props), 1)
            + frame.marshal(body.ContentBody(b"%d" % i), 1) for i in range(n)))
        raw.send(1, commands.Basic.Consume(queue=q, no_ack=True))
        raw.read_method(commands.Basic.ConsumeOk)
        got = []
        while len(got) < n:
            raw.read_method(commands.Basic.Deliver)
            raw.read_frame()  # content header
            got.append(int(raw.read_frame()[1].value))
        assert got == list(range(n))
        raw.send(1, commands.Queue.Declare(queue=q, passive=True))
        assert raw.read_method(commands.Queue.DeclareOk).message_count == 0
