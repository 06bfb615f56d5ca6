"""Prometheus /metrics: text format and RabbitMQ's metric names for what the broker counts."""

from __future__ import annotations

import re

import httpx
import pika

from amqp_broker.mgmt import render_metrics

_SAMPLE = re.compile(r'^([a-z_]+)(\{[^}]*\})? (-?[0-9.e+]+)$')


def _samples(text: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or not line:
            continue
        m = _SAMPLE.match(line)
        assert m, f"not a Prometheus sample line: {line!r}"
        out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out


def test_metrics_endpoint(api, node, amqp, name):
    api.put(f"/queues/%2F/{name}", json={})
    for _ in range(3):
        api.post("/exchanges/%2F/amq.default/publish", json={
            "properties": {}, "routing_key": name, "payload": "x", "payload_encoding": "string"})
    conn = amqp()
    ch = conn.channel()
    ch.basic_consume(name, lambda *a: None)
    conn.process_data_events(0.2)
    r = httpx.get(node.metrics_url + "/metrics/per-object")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    s = _samples(r.text)
    label = f'{{vhost="/",queue="{name}"}}'
    assert s["rabbitmq_queue_messages_ready" + label] == 0
    assert s["rabbitmq_queue_messages_unacked" + label] == 3
    assert s["rabbitmq_queue_messages" + label] == 3
    assert s["rabbitmq_queue_consumers" + label] == 1
    assert s["rabbitmq_connections"] == 1 and s["rabbitmq_channels"] == 1
    assert "# TYPE rabbitmq_queue_messages_ready gauge" in r.text
    # /metrics: the same families summed over the node, without labels
    agg = _samples(httpx.get(node.metrics_url + "/metrics").text)
    assert agg["rabbitmq_queue_messages_unacked"] == sum(
        v for k, v in s.items() if k.startswith("rabbitmq_queue_messages_unacked{"))
    assert not any(k.startswith("rabbitmq_queue_messages_ready{") for k in agg)


def test_counters_exported_only_when_the_broker_keeps_them(node):
    broker = node.admin.broker
    kept, kept_dl = broker.counters, broker.dead_lettered
    try:
        node.call(setattr, broker, "counters", None)
        node.call(setattr, broker, "dead_lettered", None)
        text = node.call(render_metrics, node.admin)
        assert "rabbitmq_global_messages_received_total" not in text
        node.call(setattr, broker, "counters", {"messages_received": 7, "dead_lettered_expired": 2})
        s = _samples(node.call(render_metrics, node.admin))
        assert s["rabbitmq_global_messages_received_total"] == 7
        # without labelled counts, what the broker counted is classic at-most-once
        assert s['rabbitmq_global_messages_dead_lettered_expired_total'
                 '{queue_type="rabbit_classic_queue",dead_letter_strategy="at_most_once"}'] == 2
    finally:
        node.call(setattr, broker, "counters", kept)
        node.call(setattr, broker, "dead_lettered", kept_dl)


def test_dead_letter_counters_labelled_by_queue_type_and_strategy(node):
    broker = node.admin.broker
    kept = broker.dead_lettered
    try:
        node.call(setattr, broker, "dead_lettered", {})
        node.call(broker.count_dead_lettered, "rejected", "rabbit_quorum_queue", "at_least_once", 3)
        node.call(broker.count_dead_lettered, "rejected", "rabbit_classic_queue", "at_most_once")
        s = _samples(node.call(render_metrics, node.admin))
        name = "rabbitmq_global_messages_dead_lettered_rejected_total"

        def count(kind: str, strategy: str) -> float:
            return s[f'{name}{{queue_type="{kind}",dead_letter_strategy="{strategy}"}}']

        assert count("rabbit_quorum_queue", "at_least_once") == 3
        assert count("rabbit_classic_queue", "at_most_once") == 1
        assert count("rabbit_quorum_queue", "at_most_once") == 0
    finally:
        node.call(setattr, broker, "dead_lettered", kept)


_DL = '{queue_type="rabbit_classic_queue",dead_letter_strategy="at_most_once"}'


def test_message_counters_after_pika_publish_and_consume(node, amqp, api, name):
    def now():
        return _samples(httpx.get(node.metrics_url + "/metrics").text)

    before = now()
    ch = amqp().channel()
    ch.queue_declare(name)
    ch.queue_declare(name + ".dlq")
    ch.queue_declare(name + ".src", arguments={"x-dead-letter-exchange": "",
                                               "x-dead-letter-routing-key": name + ".dlq"})
    ch.confirm_delivery()
    for i in range(4):
        ch.basic_publish("", name, b"m%d" % i)
    ch.basic_publish("", name + ".nowhere", b"dropped")
    try:
        ch.basic_publish("", name + ".nowhere", b"returned", mandatory=True)
    except pika.exceptions.UnroutableError:
        pass
    ch.basic_publish("", name + ".src", b"dead")
    got = [ch.basic_get(name) for _ in range(2)]
    ch.basic_ack(got[1][0].delivery_tag, multiple=True)  # acks both
    ch.basic_nack(ch.basic_get(name)[0].delivery_tag, requeue=True)
    redelivered = ch.basic_get(name)[0]
    assert redelivered.redelivered
    ch.basic_ack(redelivered.delivery_tag)
    ch.basic_reject(ch.basic_get(name + ".src")[0].delivery_tag, requeue=False)
    while ch.queue_declare(name + ".dlq", passive=True).method.message_count == 0:
        ch.connection.sleep(0.02)  # dead letters are routed at the end of the batch
    ch.basic_get(name + ".dlq", auto_ack=True)
    after = now()

    def delta(key):
        return after.get(key, 0) - before.get(key, 0)

    assert delta("rabbitmq_global_messages_received_total") == 7
    assert delta("rabbitmq_global_messages_routed_total") == 5
    assert delta("rabbitmq_global_messages_unroutable_dropped_total") == 1
    assert delta("rabbitmq_global_messages_unroutable_returned_total") == 1
    assert delta("rabbitmq_global_messages_confirmed_total") == 7
    assert delta("rabbitmq_global_messages_delivered_total") == 6
    assert delta("rabbitmq_global_messages_redelivered_total") == 1
    assert delta("rabbitmq_global_messages_acknowledged_total") == 3
    assert delta("rabbitmq_global_messages_dead_lettered_rejected_total" + _DL) == 1
    assert after["rabbitmq_global_messages_dead_lettered_expired_total" + _DL] >= 0
    stats = api.get("/overview").json()["message_stats"]
    assert stats["publish"] == after["rabbitmq_global_messages_received_total"]
    assert stats["ack"] == after["rabbitmq_global_messages_acknowledged_total"]


def test_label_values_are_escaped(api, node):
    api.put('/queues/%2F/we%22ird%5Cname', json={})
    text = node.call(render_metrics, node.admin, per_object=True)
    assert 'queue="we\\"ird\\\\name"' in text
    api.delete('/queues/%2F/we%22ird%5Cname')
