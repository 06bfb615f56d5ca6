"""kombu (py-amqp transport), as Celery uses it: producer/consumer round trip, SimpleQueue, and
the QoS-semantics probe that decides whether Celery sends basic.qos(global=True).

kombu's `Connection.qos_semantics_matches_spec` (kombu/transport/pyamqp.py, kombu 5.7) reads the
connection.start server-properties: product "RabbitMQ" with version in [3.3, 4.0) -> False
(RabbitMQ's per-consumer prefetch, so Celery uses global QoS); RabbitMQ < 3.3 or >= 4.0, or any
other product -> True.  Our broker's advertised product/version therefore decides what Celery does.
"""

import kombu
import pytest
from kombu.utils.text import version_string_as_tuple


def _expected_spec_semantics(props) -> bool:
    if props.get("product") != "RabbitMQ" or not props.get("version"):
        return True
    version = version_string_as_tuple(props["version"])
    return version < (3, 3) or version >= (4, 0)


def test_qos_semantics_matches_spec_follows_server_properties(kombu_conn, server_info):
    kombu_conn.connect()
    props = kombu_conn.connection.server_properties
    assert props.get("product") == server_info.product
    assert kombu_conn.qos_semantics_matches_spec is _expected_spec_semantics(props)
    if server_info.is_rabbitmq3:
        assert kombu_conn.qos_semantics_matches_spec is False  # RabbitMQ 3.10: Celery uses global QoS


def test_producer_consumer_round_trip(kombu_conn, names):
    exchange = kombu.Exchange(names.exchange(), type="direct", durable=False)
    queue = kombu.Queue(names.queue(), exchange, routing_key="task", durable=False)
    received = []

    def on_message(body, message):
        received.append((body, message.content_type, message.headers.get("h")))
        message.ack()

    with kombu_conn.channel() as channel:
        producer = kombu.Producer(channel, exchange=exchange, serializer="json")
        producer.publish({"n": 1}, routing_key="task", declare=[queue], headers={"h": "v"})
        with kombu.Consumer(channel, queues=[queue], callbacks=[on_message], accept=["json"]):
            kombu_conn.drain_events(timeout=10)
    assert received == [({"n": 1}, "application/json", "v")]


def test_simple_queue(kombu_conn, names):
    q = names.track_exchange(names.queue())  # SimpleQueue declares an exchange named like the queue
    sq = kombu_conn.SimpleQueue(q)
    try:
        sq.put({"hello": "world"})
        sq.put("second")
        first = sq.get(block=True, timeout=10)
        assert first.payload == {"hello": "world"}
        first.ack()
        second = sq.get(block=True, timeout=10)
        assert second.payload == "second"
        second.ack()
        with pytest.raises(sq.Empty):
            sq.get_nowait()
    finally:
        sq.close()


def test_simple_queue_requeue_redelivers(kombu_conn, names):
    sq = kombu_conn.SimpleQueue(names.track_exchange(names.queue()))
    try:
        sq.put("again")
        msg = sq.get(block=True, timeout=10)
        assert msg.delivery_info["redelivered"] is False
        msg.requeue()
        msg2 = sq.get(block=True, timeout=10)
        assert (msg2.payload, msg2.delivery_info["redelivered"]) == ("again", True)
        msg2.ack()
    finally:
        sq.close()


def test_kombu_channel_error_on_passive_declare(kombu_conn, names):
    import amqp.exceptions

    queue = kombu.Queue(names.queue())
    with kombu_conn.channel() as channel:
        with pytest.raises(amqp.exceptions.NotFound) as info:
            queue(channel).queue_declare(passive=True)
    assert info.value.reply_code == 404


def test_kombu_basic_qos_non_global(kombu_conn, names):
    q = names.queue()
    with kombu_conn.channel() as channel:
        queue = kombu.Queue(q, durable=False)(channel)
        queue.declare()
        producer = kombu.Producer(channel)
        for i in range(3):
            producer.publish(i, routing_key=q, serializer="json")
        consumer = kombu.Consumer(channel, queues=[queue], accept=["json"])
        got = []
        consumer.register_callback(lambda body, message: got.append(message))
        consumer.qos(prefetch_count=1)
        consumer.consume()
        kombu_conn.drain_events(timeout=10)
        assert len(got) == 1
        # Two remain ready while one is unacked.
        _, ready, _ = channel.queue_declare(q, passive=True)
        assert ready == 2
