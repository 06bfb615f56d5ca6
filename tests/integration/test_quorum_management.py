"""Quorum queue counts as the management API lists them (type, ready, unacknowledged,
consumers), from a broker process with the HTTP API on a free port."""

from __future__ import annotations

import time

import httpx
import pika
import pytest

from compat_tests.support.launcher import Broker


@pytest.fixture
def mgmt_broker(tmp_path):
    b = Broker(tmp_path).start()
    yield b
    b.stop()


def _row(b, name: str) -> dict:
    r = httpx.get(f"{b.mgmt_url}/api/queues/%2F/{name}", auth=("guest", "guest"), timeout=10)
    r.raise_for_status()
    return r.json()


def test_listing_counts_ready_and_unacked(mgmt_broker):
    conn = pika.BlockingConnection(pika.URLParameters(mgmt_broker.url))
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("mq", durable=True, arguments={"x-queue-type": "quorum"})
    for i in range(5):
        ch.basic_publish("", "mq", b"%d" % i)
    ch.basic_qos(prefetch_count=2)
    got = []
    ch.basic_consume("mq", lambda c, m, p, body: got.append(body))
    deadline = time.monotonic() + 5
    while len(got) < 2 and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.1)
    row = _row(mgmt_broker, "mq")
    assert row["type"] == "quorum" and row["durable"] is True
    assert (row["messages_ready"], row["messages_unacknowledged"], row["messages"]) == (3, 2, 5)
    assert row["consumers"] == 1
    conn.close()


def test_policy_delivery_limit_applies_to_existing_queue(mgmt_broker):
    conn = pika.BlockingConnection(pika.URLParameters(mgmt_broker.url))
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("pol.dlq", durable=True)
    ch.queue_declare("pol.q", durable=True, arguments={"x-queue-type": "quorum"})
    r = httpx.put(f"{mgmt_broker.mgmt_url}/api/policies/%2F/lim", auth=("guest", "guest"),
                  json={"pattern": "^pol\\.q$", "apply-to": "quorum_queues",
                        "definition": {"delivery-limit": 1, "dead-letter-exchange": "",
                                       "dead-letter-routing-key": "pol.dlq"}}, timeout=10)
    assert r.status_code in (201, 204)
    ch.basic_publish("", "pol.q", b"poison")
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        m, _, _ = ch.basic_get("pol.q")
        if m is None:
            break
        ch.basic_nack(m.delivery_tag, requeue=True)
    got = None
    while got is None and time.monotonic() < deadline:
        got = ch.basic_get("pol.dlq", auto_ack=True)[2]
    assert got == b"poison"
    conn.close()


def _get(b, name: str, ackmode: str, count: int) -> list[dict]:
    r = httpx.post(f"{b.mgmt_url}/api/queues/%2F/{name}/get", auth=("guest", "guest"),
                   json={"count": count, "ackmode": ackmode, "encoding": "auto"}, timeout=10)
    r.raise_for_status()
    return r.json()


def _ready_becomes(b, name: str, n: int) -> int:
    deadline = time.monotonic() + 5
    while True:
        ready = _row(b, name)["messages_ready"]
        if ready == n or time.monotonic() > deadline:
            return ready
        time.sleep(0.05)


def test_management_get_reads_quorum_messages(mgmt_broker):
    conn = pika.BlockingConnection(pika.URLParameters(mgmt_broker.url))
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("mg.dlq", durable=True)
    ch.queue_declare("mg.q", durable=True, arguments={
        "x-queue-type": "quorum", "x-dead-letter-exchange": "",
        "x-dead-letter-routing-key": "mg.dlq"})
    for i in range(4):
        ch.basic_publish("", "mg.q", b"m%d" % i)
    # requeue: only looked at, in order, still there afterwards
    got = _get(mgmt_broker, "mg.q", "ack_requeue_true", 3)
    assert [m["payload"] for m in got] == ["m0", "m1", "m2"]
    assert [m["message_count"] for m in got] == [3, 2, 1]
    assert _get(mgmt_broker, "mg.q", "ack_requeue_true", 1)[0]["payload"] == "m0"
    assert _row(mgmt_broker, "mg.q")["messages_ready"] == 4
    # ack: taken off the head
    assert [m["payload"] for m in _get(mgmt_broker, "mg.q", "ack_requeue_false", 2)] == ["m0", "m1"]
    assert _ready_becomes(mgmt_broker, "mg.q", 2) == 2
    assert _get(mgmt_broker, "mg.q", "ack_requeue_true", 5)[0]["payload"] == "m2"
    # reject without requeue: dead-lettered
    assert [m["payload"] for m in _get(mgmt_broker, "mg.q", "reject_requeue_false", 1)] == ["m2"]
    assert _ready_becomes(mgmt_broker, "mg.q", 1) == 1
    deadline = time.monotonic() + 5
    body = None
    while body is None and time.monotonic() < deadline:
        body = ch.basic_get("mg.dlq", auto_ack=True)[2]
    assert body == b"m2"
    assert ch.basic_get("mg.q", auto_ack=True)[2] == b"m3"
    conn.close()


def test_single_queue_row_carries_this_replicas_raft_status(mgmt_broker):
    """GET /api/queues/VHOST/NAME of a quorum queue adds "raft" (our extension, read by
    `amqp-broker-queues quorum_status`); listings do not carry it."""
    conn = pika.BlockingConnection(pika.URLParameters(mgmt_broker.url))
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare("rq", durable=True, arguments={"x-queue-type": "quorum"})
    ch.queue_declare("cq")
    for i in range(3):
        ch.basic_publish("", "rq", b"%d" % i)
    conn.close()
    raft = _row(mgmt_broker, "rq")["raft"]
    node = raft["node"]
    assert (raft["state"], raft["leader"], raft["membership"]) == ("leader", node, "voter")
    assert raft["voters"] == [node] and raft["learners"] == []
    # three confirmed enqueues are committed and applied here, after the leader's first entry
    assert raft["last_index"] >= 4 and raft["term"] >= 1
    assert raft["commit_index"] == raft["applied_index"] == raft["last_index"]
    assert list(raft["replicas"]) == [node]  # the leader's view of every replica: itself
    assert raft["replicas"][node]["match_index"] == raft["last_index"]
    assert "raft" not in _row(mgmt_broker, "cq")
    listing = httpx.get(f"{mgmt_broker.mgmt_url}/api/queues", auth=("guest", "guest"),
                        timeout=10).json()
    assert all("raft" not in q for q in listing)
