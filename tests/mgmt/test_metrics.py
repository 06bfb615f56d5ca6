"""Prometheus /metrics: text format and RabbitMQ's metric names for what the broker counts."""

from __future__ import annotations

import re

import httpx

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
    text = node.call(render_metrics, node.admin)
    assert "rabbitmq_global_messages_received_total" not in text

    broker = node.admin.broker
    try:
        node.call(setattr, broker, "counters", {"messages_received": 7, "dead_lettered_expired": 2})
        s = _samples(node.call(render_metrics, node.admin))
        assert s["rabbitmq_global_messages_received_total"] == 7
        assert s['rabbitmq_global_messages_dead_lettered_expired_total'
                 '{queue_type="rabbit_classic_queue",dead_letter_strategy="at_most_once"}'] == 2
    finally:
        node.call(delattr, broker, "counters")


def test_label_values_are_escaped(api, node):
    api.put('/queues/%2F/we%22ird%5Cname', json={})
    text = node.call(render_metrics, node.admin, per_object=True)
    assert 'queue="we\\"ird\\\\name"' in text
    api.delete('/queues/%2F/we%22ird%5Cname')
