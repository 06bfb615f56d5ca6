"""Prometheus /metrics: text format and RabbitMQ's metric names for what the broker counts."""

from __future__ import annotations

import time

import httpx
import pika

from amqp_broker.mgmt import render_metrics
from compat_tests.support.metrics import samples, scrape


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
    s = samples(r.text)
    label = f'{{vhost="/",queue="{name}"}}'
    assert s["rabbitmq_queue_messages_ready" + label] == 0
    assert s["rabbitmq_queue_messages_unacked" + label] == 3
    assert s["rabbitmq_queue_messages" + label] == 3
    assert s["rabbitmq_queue_consumers" + label] == 1
    assert s["rabbitmq_connections"] == 1 and s["rabbitmq_channels"] == 1
    assert "# TYPE rabbitmq_queue_messages_ready gauge" in r.text
    # /metrics: the same families summed over the node, without labels
    agg = scrape(node.metrics_url)
    assert agg["rabbitmq_queue_messages_unacked"] == sum(
        v for k, v in s.items() if k.startswith("rabbitmq_queue_messages_unacked{"))
    assert not any(k.startswith("rabbitmq_queue_messages_ready{") for k in agg)


def test_counters_exported_only_when_the_broker_keeps_them():
    """render_metrics over broker objects without a node process: a running `amqp-broker`
    always keeps counters (the process-level check is
    test_message_counters_after_pika_publish_and_consume), so the branches for a broker without
    them, or with only unlabelled dead-letter counts, are reachable only this way."""
    from amqp_broker.mgmt import Admin
    from amqp_broker.server import Broker
    from amqp_broker.settings import Settings

    broker = Broker(Settings(), None)
    admin = Admin(broker)
    broker.counter_totals = lambda: None
    broker.dead_lettered = None
    assert "rabbitmq_global_messages_received_total" not in render_metrics(admin)
    broker.counter_totals = lambda: {"messages_received": 7, "dead_lettered_expired": 2}
    s = samples(render_metrics(admin))
    assert s["rabbitmq_global_messages_received_total"] == 7
    # without labelled counts, what the broker counted is classic at-most-once
    assert s['rabbitmq_global_messages_dead_lettered_expired_total'
             '{queue_type="rabbit_classic_queue",dead_letter_strategy="at_most_once"}'] == 2


def test_dead_letter_counters_labelled_by_queue_type_and_strategy(node, amqp, name):
    """3 rejects from an at-least-once quorum queue and 1 from a classic queue, both
    dead-lettering to a queue of their own; /metrics counts them per type and strategy."""
    metric = "rabbitmq_global_messages_dead_lettered_rejected_total"

    def count(samples, kind: str, strategy: str) -> float:
        return samples[f'{metric}{{queue_type="{kind}",dead_letter_strategy="{strategy}"}}']

    def now():
        return scrape(node.metrics_url)

    kinds = [("rabbit_quorum_queue", "at_least_once"), ("rabbit_classic_queue", "at_most_once"),
             ("rabbit_quorum_queue", "at_most_once")]
    before = now()
    ch = amqp().channel()
    ch.confirm_delivery()
    dlx = {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": name + ".dlq"}
    ch.queue_declare(name + ".dlq", durable=True)
    ch.queue_declare(name + ".qq", durable=True, arguments={
        **dlx, "x-queue-type": "quorum", "x-dead-letter-strategy": "at-least-once",
        "x-overflow": "reject-publish"})
    ch.queue_declare(name + ".cq", arguments=dlx)
    for queue, n in ((name + ".qq", 3), (name + ".cq", 1)):
        for i in range(n):
            ch.basic_publish("", queue, b"m%d" % i)
        for _ in range(n):
            method, _props, _body = ch.basic_get(queue)
            ch.basic_reject(method.delivery_tag, requeue=False)
    want = [3, 1, 0]
    deadline = time.monotonic() + 15
    while True:
        after = now()
        got = [count(after, *k) - count(before, *k) for k in kinds]
        if got == want or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert got == want
    while ch.queue_declare(name + ".dlq", passive=True).method.message_count < 4:
        assert time.monotonic() < deadline + 15, "dead letters did not reach their queue"
        ch.connection.sleep(0.05)


_DL = '{queue_type="rabbit_classic_queue",dead_letter_strategy="at_most_once"}'


def test_message_counters_after_pika_publish_and_consume(node, amqp, api, name):
    def now():
        return scrape(node.metrics_url)

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
    # the overview shows the totals as of the rate sampler's last sample (every 200 ms here)
    deadline = time.monotonic() + 10
    while True:
        stats = api.get("/overview").json()["message_stats"]
        # a sample taken after the publishes but before the acks matches on publish only
        if (stats.get("publish") == after["rabbitmq_global_messages_received_total"]
                and stats.get("ack") == after["rabbitmq_global_messages_acknowledged_total"]) \
                or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert stats["publish"] == after["rabbitmq_global_messages_received_total"]
    assert stats["ack"] == after["rabbitmq_global_messages_acknowledged_total"]


def test_label_values_are_escaped(api, node):
    api.put('/queues/%2F/we%22ird%5Cname', json={})
    text = httpx.get(node.metrics_url + "/metrics/per-object").text
    assert 'queue="we\\"ird\\\\name"' in text
    api.delete('/queues/%2F/we%22ird%5Cname')


def test_counts_of_closed_channels_and_connections_stay_in_the_totals(node, amqp, api, name):
    """Each channel counts its own messages; closing it folds them into the node's and the
    vhost's totals (server/counters.py), so neither /metrics nor message_stats go backwards."""
    before = scrape(node.metrics_url)["rabbitmq_global_messages_received_total"]
    conn = amqp()
    ch = conn.channel()
    ch.queue_declare(name)
    for _ in range(3):
        ch.basic_publish("", name, b"x")
    ch.close()
    ch = conn.channel()
    ch.basic_publish("", name, b"y")
    conn.close()
    after = scrape(node.metrics_url)["rabbitmq_global_messages_received_total"]
    assert after - before == 4
    deadline = time.monotonic() + 10
    while True:  # the sampler runs every 200 ms
        q = api.get(f"/queues/%2F/{name}").json().get("message_stats", {})
        overview = api.get("/overview").json()["message_stats"]
        if q.get("publish") == 4 and overview.get("publish", 0) >= after or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert q["publish"] == 4
    assert overview["publish"] >= after
    api.delete(f"/queues/%2F/{name}")
