"""basic.consume / cancel / get as clients see them: consumer tags, delivery fields, exclusive
consumers, cancel notifications on queue deletion, and requeue-on-close."""

import pika
from pamqp import commands

from compat_tests.support import channel_closed, consume_n, get_n, wait_until
from compat_tests.support.raw import RawClient


def _fill(ch, q, n, prefix=b"m"):
    for i in range(n):
        ch.basic_publish("", q, prefix + b"%d" % i)


def test_server_generated_consumer_tag(broker_url):
    # pika and aiormq invent their own tags, so an empty tag is sent over a raw socket.
    with RawClient(broker_url) as raw:
        raw.handshake()
        raw.open_channel(1)
        raw.send(1, commands.Queue.Declare(queue="", exclusive=True))
        q = raw.read_method(commands.Queue.DeclareOk).queue
        raw.send(1, commands.Basic.Consume(queue=q, consumer_tag=""))
        tag = raw.read_method(commands.Basic.ConsumeOk).consumer_tag
        assert tag.startswith("amq.ctag-") and len(tag) > len("amq.ctag-")


def test_client_chosen_consumer_tag_is_kept(ch, names):
    q = names.queue()
    ch.queue_declare(q)
    ch.basic_publish("", q, b"x")
    tag, got = consume_n(ch, q, 1, consumer_tag="my-tag")
    assert tag == "my-tag" and got[0][0].consumer_tag == "my-tag"


def test_delivery_fields(ch, names):
    q = names.queue()
    ch.queue_declare(q)
    ch.basic_publish("", q, b"hello", pika.BasicProperties(content_type="text/plain"))
    tag, got = consume_n(ch, q, 1)
    method, props, body = got[0]
    assert (method.consumer_tag, method.delivery_tag, method.redelivered) == (tag, 1, False)
    assert (method.exchange, method.routing_key) == ("", q)
    assert (props.content_type, body) == ("text/plain", b"hello")


def test_delivery_tags_count_from_one_per_channel(conn, names):
    q1, q2 = names.queue(), names.queue()
    ch1, ch2 = conn.channel(), conn.channel()
    for ch, q in ((ch1, q1), (ch2, q2)):
        ch.queue_declare(q)
        _fill(ch, q, 3)
    _, got1 = consume_n(ch1, q1, 3)
    _, got2 = consume_n(ch2, q2, 3)
    assert [m.delivery_tag for m, _, _ in got1] == [1, 2, 3]
    assert [m.delivery_tag for m, _, _ in got2] == [1, 2, 3]


def test_delivery_tags_shared_by_get_and_consume(ch, names):
    q = names.queue()
    ch.queue_declare(q)
    _fill(ch, q, 2)
    (m1, _, _), = get_n(ch, q, 1, auto_ack=False)
    _, got = consume_n(ch, q, 1)
    assert (m1.delivery_tag, got[0][0].delivery_tag) == (1, 2)


def test_cancel_stops_deliveries(ch, names):
    q = names.queue()
    ch.queue_declare(q)
    tag, got = consume_n(ch, q, 0)
    ch.basic_cancel(tag)
    ch.basic_publish("", q, b"after-cancel")
    assert wait_until(ch.connection, lambda: ch.queue_declare(q, passive=True).method.message_count == 1)
    assert got == []


def test_basic_get_and_get_empty(ch, names):
    q = names.queue()
    ch.queue_declare(q)
    assert ch.basic_get(q) == (None, None, None)  # basic.get-empty
    _fill(ch, q, 2)
    (method, props, body), = get_n(ch, q, 1, auto_ack=False)
    assert method.NAME == "Basic.GetOk"
    assert (method.delivery_tag, method.redelivered, method.message_count) == (1, False, 1)
    assert (method.exchange, method.routing_key, body) == ("", q, b"m0")


def test_get_from_missing_queue_is_404(conn, names):
    with channel_closed(404, "NOT_FOUND - no queue"):
        conn.channel().basic_get(names.queue())


def test_consume_from_missing_queue_is_404(conn, names):
    with channel_closed(404, "NOT_FOUND - no queue"):
        conn.channel().basic_consume(names.queue(), lambda *a: None)


def test_duplicate_consumer_tag_on_channel_is_530_connection_close(broker_url, names):
    # pika refuses a duplicate tag itself, so this goes over a raw socket.
    q = names.queue()
    with RawClient(broker_url) as raw:
        raw.handshake()
        raw.open_channel(1)
        raw.send(1, commands.Queue.Declare(queue=q))
        raw.read_method(commands.Queue.DeclareOk)
        for _ in range(2):
            raw.send(1, commands.Basic.Consume(queue=q, consumer_tag="dup"))
        raw.read_method(commands.Basic.ConsumeOk)
        reply = raw.read_method()
        assert reply.name == "Connection.Close"
        assert (reply.reply_code, reply.class_id, reply.method_id) == (530, 60, 20)
        assert reply.reply_text == "NOT_ALLOWED - attempt to reuse consumer tag 'dup'"


def test_same_consumer_tag_on_two_channels_is_fine(conn, names):
    q = names.queue()
    conn.channel().queue_declare(q)
    conn.channel().basic_consume(q, lambda *a: None, consumer_tag="same")
    conn.channel().basic_consume(q, lambda *a: None, consumer_tag="same")


def test_cancel_unknown_tag_is_plain_cancel_ok(broker_url):
    with RawClient(broker_url) as raw:
        raw.handshake()
        raw.open_channel(1)
        raw.send(1, commands.Basic.Cancel(consumer_tag="never-consumed"))
        reply = raw.read_method()
        assert reply.name == "Basic.CancelOk" and reply.consumer_tag == "never-consumed"


def test_exclusive_consume_with_existing_consumer_is_403(conn, names):
    q = names.queue()
    ch = conn.channel()
    ch.queue_declare(q)
    ch.basic_consume(q, lambda *a: None)
    with channel_closed(403, f"ACCESS_REFUSED - queue '{q}' in vhost '/' in exclusive use"):
        conn.channel().basic_consume(q, lambda *a: None, exclusive=True)


def test_consume_while_exclusive_consumer_is_403(conn, names):
    q = names.queue()
    ch = conn.channel()
    ch.queue_declare(q)
    ch.basic_consume(q, lambda *a: None, exclusive=True)
    with channel_closed(403, f"ACCESS_REFUSED - queue '{q}' in vhost '/' in exclusive use"):
        conn.channel().basic_consume(q, lambda *a: None)


def test_consumers_share_round_robin(conn, names):
    q = names.queue()
    ch = conn.channel()
    ch.queue_declare(q)
    a, b = [], []
    ch.basic_consume(q, lambda c, m, p, body: a.append(body), auto_ack=True)
    ch.basic_consume(q, lambda c, m, p, body: b.append(body), auto_ack=True)
    _fill(ch, q, 4)
    assert wait_until(conn, lambda: len(a) + len(b) == 4)
    assert (len(a), len(b)) == (2, 2)


def test_cancel_notification_when_queue_deleted(conn, names):
    q = names.queue()
    ch = conn.channel()
    ch.queue_declare(q)
    cancelled = []
    ch.add_on_cancel_callback(lambda method: cancelled.append(method.method.consumer_tag))
    tag = ch.basic_consume(q, lambda *a: None)
    conn.channel().queue_delete(q)
    assert wait_until(conn, lambda: cancelled == [tag])
    assert ch.is_open


def test_closing_channel_requeues_unacked_as_redelivered(conn, names):
    q = names.queue()
    ch = conn.channel()
    ch.queue_declare(q)
    _fill(ch, q, 2)
    _, got = consume_n(ch, q, 2)
    assert [m.redelivered for m, _, _ in got] == [False, False]
    ch.close()
    ch2 = conn.channel()
    again = get_n(ch2, q, 2)
    assert [(m.redelivered, body) for m, _, body in again] == [(True, b"m0"), (True, b"m1")]


def test_closing_connection_requeues_unacked(pika_connect, names):
    q = names.queue()
    c1, c2 = pika_connect(), pika_connect()
    ch = c1.channel()
    ch.queue_declare(q)
    _fill(ch, q, 1)
    consume_n(ch, q, 1)
    c1.close()
    (method, _, body), = get_n(c2.channel(), q, 1)
    assert (method.redelivered, body) == (True, b"m0")


def test_auto_ack_consumer_removes_messages(ch, names):
    q = names.queue()
    ch.queue_declare(q)
    _fill(ch, q, 3)
    _, got = consume_n(ch, q, 3, auto_ack=True)
    assert len(got) == 3
    assert ch.queue_declare(q, passive=True).method.message_count == 0


def test_many_messages_keep_order_with_prefetch_and_multiple_acks(conn, names):
    q = names.queue()
    ch = conn.channel()
    ch.queue_declare(q)
    total = 1000
    for i in range(total):
        ch.basic_publish("", q, b"%d" % i)
    ch.basic_qos(prefetch_count=50)
    got = []

    def on(c, method, props, body):
        got.append((method.delivery_tag, body))
        if len(got) % 25 == 0:
            c.basic_ack(method.delivery_tag, multiple=True)

    ch.basic_consume(q, on)
    assert wait_until(conn, lambda: len(got) == total, timeout=30)
    assert [t for t, _ in got] == list(range(1, total + 1))
    assert [b for _, b in got] == [b"%d" % i for i in range(total)]


def test_no_local_is_ignored(broker_url, names):
    # RabbitMQ does not implement no-local: a consumer receives its own connection's messages.
    q = names.queue()
    with RawClient(broker_url) as raw:
        raw.handshake()
        raw.open_channel(1)
        raw.send(1, commands.Queue.Declare(queue=q))
        raw.read_method(commands.Queue.DeclareOk)
        raw.send(1, commands.Basic.Consume(queue=q, consumer_tag="self", no_local=True, no_ack=True))
        raw.read_method(commands.Basic.ConsumeOk)
        raw.publish(1, "", q, b"mine")
        deliver = raw.read_method(commands.Basic.Deliver)
        assert deliver.consumer_tag == "self"


def test_nowait_declare_and_consume_send_no_reply(broker_url, names):
    q = names.queue()
    with RawClient(broker_url) as raw:
        raw.handshake()
        raw.open_channel(1)
        raw.send(1, commands.Queue.Declare(queue=q, nowait=True))
        raw.send(1, commands.Basic.Consume(queue=q, consumer_tag="nw", no_ack=True, nowait=True))
        raw.publish(1, "", q, b"first reply is a delivery")
        # No declare-ok or consume-ok: the first frame back is the delivery.
        deliver = raw.read_method()
        assert deliver.name == "Basic.Deliver" and deliver.consumer_tag == "nw"
