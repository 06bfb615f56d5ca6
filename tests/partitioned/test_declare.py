"""Declaring, routing into and watching a partitioned queue on one node: arguments and their
406s, policies, the documented partition hash, headers, prefetch across partitions, basic.get,
the management API, `amqp-brokerctl list_partitions` and the Prometheus counters."""
from __future__ import annotations

import io
import time
import zlib

import pika
import pytest
import requests

from amqp_broker.cli import ctl
from compat_tests.support.metrics import scrape

from .workload import declare

AUTH = ("guest", "guest")


def _args(**kw):
    return {"x-queue-type": "partitioned", **kw}


BAD = [
    # arguments, the argument the 406 names, what the text says
    (_args(), "x-partitions", "required"),
    (_args(**{"x-partitions": 0}), "x-partitions", "{value_zero,0}"),
    (_args(**{"x-partitions": 1025}), "x-partitions", "{value_too_large,1025,1024}"),
    (_args(**{"x-partitions": "8"}), "x-partitions", "expected integer"),
    (_args(**{"x-partitions": 4, "x-partition-handoff-timeout": -1}),
     "x-partition-handoff-timeout", "{value_negative,-1}"),
    (_args(**{"x-partitions": 4, "x-partition-rebalance-delay": "soon"}),
     "x-partition-rebalance-delay", "expected integer"),
    (_args(**{"x-partitions": 4, "x-message-ttl": 10}), "x-message-ttl", "of queue type"),
    (_args(**{"x-partitions": 4, "x-single-active-consumer": True}),
     "x-single-active-consumer", "of queue type"),
    (_args(**{"x-partitions": 4, "x-max-length": -2}), "x-max-length", "{value_negative,-2}"),
]


@pytest.mark.parametrize("arguments,arg,text", BAD)
def test_bad_arguments_are_406_naming_the_argument(ch, arguments, arg, text):
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as e:
        ch.queue_declare("pq-bad", durable=True, arguments=arguments)
    assert e.value.reply_code == 406
    assert f"'{arg}'" in e.value.reply_text and text in e.value.reply_text


@pytest.mark.parametrize("flags,prop", [({"durable": False}, "non-durable"),
                                        ({"exclusive": True}, "exclusive-owner"),
                                        ({"auto_delete": True}, "auto-delete")])
def test_durable_only(ch, flags, prop):
    kw = {"durable": True, **flags}
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as e:
        ch.queue_declare("pq-flags", arguments=_args(**{"x-partitions": 2}), **kw)
    assert e.value.reply_code == 406 and prop in e.value.reply_text


def test_redeclare_with_another_partition_count_is_refused(broker, ch):
    declare(ch, "pq-redeclare", 4, 1000)
    declare(ch, "pq-redeclare", 4, 2000)  # the times may differ (as for a policy)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as e:
        declare(ch, "pq-redeclare", 8, 1000)
    assert e.value.reply_code == 406 and "'x-partitions'" in e.value.reply_text


def _consume_all(ch, queue, n, prefetch=100):
    ch.basic_qos(prefetch_count=prefetch)
    got = []
    tag = ch.basic_consume(queue, lambda c, m, p, b: (got.append((m, p, b)),
                                                      c.basic_ack(m.delivery_tag)))
    deadline = time.monotonic() + 20
    while len(got) < n and time.monotonic() < deadline:
        ch.connection.process_data_events(0.05)
    ch.basic_cancel(tag)
    return got


def test_partition_is_the_documented_crc32_of_the_key(broker, ch):
    """docs/PARTITIONED-QUEUES.md: crc32(utf-8 key) mod N, key = x-partition-key header,
    else the routing key; through an exchange binding as any queue."""
    declare(ch, "pq-hash", 7, 1000)
    ch.exchange_declare("pq-x", "direct")
    keys = [f"order-{i}" for i in range(20)] + ["ключ", ""]
    for k in keys:
        ch.queue_bind("pq-hash", "pq-x", routing_key=k)
    for k in keys:   # by routing key, through the exchange
        ch.basic_publish("pq-x", k, k.encode())
    for k in keys:   # by header, on the default exchange
        ch.basic_publish("", "pq-hash", k.encode(),
                         pika.BasicProperties(headers={"x-partition-key": k}))
    got = _consume_all(ch, "pq-hash", 2 * len(keys))
    assert len(got) == 2 * len(keys)
    for _m, props, body in got:
        key = body.decode()
        assert props.headers["x-partition-key"] == key
        assert props.headers["x-partition"] == zlib.crc32(key.encode()) % 7


def _publish_keyed(ch, queue: str, n: int) -> None:
    for i in range(n):
        ch.basic_publish("", queue, b"x", pika.BasicProperties(
            headers={"x-partition-key": f"k{i}"}))


def test_prefetch_counts_across_partitions(broker, ch):
    declare(ch, "pq-prefetch", 8, 1000)
    _publish_keyed(ch, "pq-prefetch", 40)
    ch.basic_qos(prefetch_count=3)
    held = []
    ch.basic_consume("pq-prefetch", lambda c, m, p, b: held.append(p.headers["x-partition"]))
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        ch.connection.process_data_events(0.1)
    assert len(held) == 3                 # one window for all its partitions
    assert len(set(held)) == 3            # round robin over the partitions it owns


def test_basic_get_is_refused(ch):
    declare(ch, "pq-get", 2, 1000)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as e:
        ch.basic_get("pq-get")
    assert e.value.reply_code == 406 and "basic.get" in e.value.reply_text


def test_policy_sets_the_partition_times(broker, ch):
    declare(ch, "pq-policy", 2, 60_000)
    r = requests.put(f"{broker.mgmt_url}/api/policies/%2F/pq-times", auth=AUTH, json={
        "pattern": "^pq-policy$", "apply-to": "queues",
        "definition": {"partition-handoff-timeout": 0, "partition-rebalance-delay": 0}})
    assert r.status_code in (201, 204), r.text
    # handoff timeout 0 (the lower of argument and policy): a consumer holding messages
    # loses a partition to a newcomer at once; its messages of it go to the newcomer
    keys = {}
    for i in range(100):
        keys.setdefault(zlib.crc32(b"k%d" % i) % 2, "k%d" % i)
    for seq in range(2):
        for part in (0, 1):
            ch.basic_publish("", "pq-policy", f"{keys[part]}:{seq}".encode(),
                             pika.BasicProperties(headers={"x-partition-key": keys[part]}))
    ch.basic_qos(prefetch_count=10)
    first = []
    ch.basic_consume("pq-policy", lambda c, m, p, b: first.append(b), consumer_tag="first")
    while len(first) < 4:
        ch.connection.process_data_events(0.05)
    other = ch.connection.channel()
    second = []
    other.basic_consume("pq-policy", lambda c, m, p, b: second.append((b, m.redelivered)),
                        consumer_tag="second")
    deadline = time.monotonic() + 20
    while len(second) < 2 and time.monotonic() < deadline:
        ch.connection.process_data_events(0.05)
    moved = second[0][0].split(b":")[0].decode() if second else None
    assert second == [(f"{moved}:{seq}".encode(), True) for seq in range(2)]
    bad = requests.put(f"{broker.mgmt_url}/api/policies/%2F/pq-bad", auth=AUTH, json={
        "pattern": "x", "definition": {"partition-handoff-timeout": -5}})
    assert bad.status_code == 400


def test_management_cli_and_metrics_show_partitions(broker, ch):
    declare(ch, "pq-show", 4, 1000)
    _publish_keyed(ch, "pq-show", 8)
    ch.basic_qos(prefetch_count=1)
    ch.basic_consume("pq-show", lambda *a: None, consumer_tag="watcher")
    ch.connection.process_data_events(0.3)
    q = requests.get(f"{broker.mgmt_url}/api/queues/%2F/pq-show", auth=AUTH).json()
    parts = q["partitions"]
    assert [p["partition"] for p in parts] == [0, 1, 2, 3]
    assert all(p["state"] == "active" for p in parts)
    assert {p["owner"]["consumer_tag"] for p in parts} == {"watcher"}
    assert all(p["owner"]["channel"].endswith("(1)") for p in parts)
    assert sum(p["messages_ready"] + p["messages_unacknowledged"] for p in parts) == 8
    assert sum(p["messages_unacknowledged"] for p in parts) == 1
    out = io.StringIO()
    assert ctl.main(["--url", broker.mgmt_url, "list_partitions", "pq-show"], out=out) == 0
    lines = out.getvalue().splitlines()
    assert sum(1 for ln in lines if "\tactive\t" in ln and "watcher" in ln) == 4
    ch.queue_declare("pq-classic")
    assert ctl.main(["--url", broker.mgmt_url, "list_partitions", "pq-classic"],
                    out=io.StringIO()) != 0
    m = scrape(broker.metrics_url)
    for name in ("started", "graceful", "forced"):
        assert f"amqp_broker_partition_handoffs_{name}_total" in m
    per = scrape(broker.metrics_url, "/metrics/per-object")
    assert any(k.startswith("amqp_broker_partition_handoffs_started_total{") and "pq-show" in k
               for k in per)


def test_definitions_export_and_import_keep_a_partitioned_queue(broker, ch):
    declare(ch, "pq-defs", 6, 1000)
    doc = requests.get(f"{broker.mgmt_url}/api/definitions", auth=AUTH).json()
    assert any(q["name"] == "pq-defs" for q in doc["queues"])
    ch.queue_delete("pq-defs")
    r = requests.post(f"{broker.mgmt_url}/api/definitions", auth=AUTH, json=doc)
    assert r.status_code in (200, 201, 204), r.text
    q = requests.get(f"{broker.mgmt_url}/api/queues/%2F/pq-defs", auth=AUTH).json()
    assert q["type"] == "partitioned" and len(q["partitions"]) == 6
