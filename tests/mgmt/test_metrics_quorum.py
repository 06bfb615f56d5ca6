"""Quorum queues on /metrics and in the quorum log: a node started in-process from a
rabbitmq.conf with tiny raft.* limits (the WAL rolls into segment files), the ra_metrics
family per queue and aggregated, WAL and segment sizes, and x-delivery-count sent as a long.
"""

from __future__ import annotations

import dataclasses
import re

import pika
import pytest
import trio

from amqp_broker.config import HttpListener, load_settings
from amqp_broker.mgmt import Admin, render_metrics
from amqp_broker.queues.message import Message
from amqp_broker.queues.quorum_effects import with_delivery_count
from amqp_broker.server.node import open_broker, serve_broker

_SAMPLE = re.compile(r'^([a-z_]+)(\{[^}]*\})? (-?[0-9.e+-]+)$')

_CONF = """\
# tiny limits: a few publishes fill the WAL, each segment file holds at most 8 entries
raft.wal_max_size_bytes = 2048
raft.segment_max_entries = 8
"""


def _samples(text: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            m = _SAMPLE.match(line)
            assert m, f"not a Prometheus sample line: {line!r}"
            out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out


def _publish_and_get(port: int, queue: str, n: int) -> None:
    """Blocking pika client: n confirmed persistent publishes to a quorum queue, then one
    basic.get that is nacked back (its redelivery carries x-delivery-count)."""
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port,
                                                             connection_attempts=1))
    try:
        ch = conn.channel()
        ch.queue_declare(queue, durable=True, arguments={"x-queue-type": "quorum"})
        ch.confirm_delivery()
        for i in range(n):
            ch.basic_publish("", queue, b"payload-%04d" % i + b"." * 200,
                             pika.BasicProperties(delivery_mode=2))
        method, _props, _body = ch.basic_get(queue)
        ch.basic_nack(method.delivery_tag, requeue=True)
        method, props, _body = ch.basic_get(queue)
        assert props.headers["x-delivery-count"] == 1
        ch.basic_ack(method.delivery_tag)
    finally:
        conn.close()


def _settings(tmp_path):
    conf = tmp_path / "rabbitmq.conf"
    conf.write_text(_CONF)
    s = load_settings(conf, overrides={"data_dir": tmp_path / "data", "port": 0,
                                       "host": "127.0.0.1"})
    return dataclasses.replace(s, management=HttpListener("127.0.0.1", -1))


def test_x_delivery_count_header_is_a_long():
    msg = Message.from_publish("", "q", b"\x00\x00", b"body")
    props = with_delivery_count(msg, 2).properties
    # field name (short string), then 'l' and a signed 64-bit big-endian value
    assert b"\x10x-delivery-countl" + (2).to_bytes(8, "big", signed=True) in props


@pytest.mark.trio
async def test_raft_settings_reach_the_log_and_raft_metrics(tmp_path):
    broker = open_broker(_settings(tmp_path))
    config = broker.quorum.log.store.config
    assert (config.wal_max_size_bytes, config.segment_max_entries) == (2048, 8)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve_broker, broker)
        await trio.to_thread.run_sync(_publish_and_get, port, "qq.metrics", 60)
        admin = Admin(broker)
        per_queue = _samples(render_metrics(admin, per_object=True))
        node = _samples(render_metrics(admin))
        nursery.cancel_scope.cancel()

    segments = list((tmp_path / "data" / "quorum").rglob("*.seg"))
    assert segments, "the WAL never rolled over into segment files"

    label = '{vhost="/",queue="qq.metrics"}'
    applied = per_queue["rabbitmq_raft_log_last_applied_index" + label]
    assert applied >= 60  # every publish is one applied entry (plus checkouts, settles)
    assert per_queue["rabbitmq_raft_log_commit_index" + label] >= applied
    assert per_queue["rabbitmq_raft_log_last_written_index" + label] >= applied
    assert per_queue["rabbitmq_raft_term_total" + label] >= 1
    assert per_queue["rabbitmq_raft_log_snapshot_index" + label] >= 0
    assert per_queue["rabbitmq_raft_entry_commit_latency_seconds" + label] > 0
    assert per_queue["rabbitmq_raft_segment_size_bytes" + label] > 0
    # /metrics: one unlabelled series per family (a single queue: the same numbers)
    assert node["rabbitmq_raft_log_commit_index"] == per_queue["rabbitmq_raft_log_commit_index"
                                                               + label]
    assert node["rabbitmq_raft_entry_commit_latency_seconds"] == pytest.approx(
        per_queue["rabbitmq_raft_entry_commit_latency_seconds" + label])
    assert not any(k.startswith("rabbitmq_raft_log_commit_index{") for k in node)
    assert node["rabbitmq_raft_wal_size_bytes"] > 0


def _reject_into_dlx(port: int) -> None:
    """One message rejected from each of two quorum queues: at-most-once and at-least-once."""
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port,
                                                             connection_attempts=1))
    try:
        ch = conn.channel()
        ch.queue_declare("dl.target", durable=True)
        for name, strategy in (("dl.amo", "at-most-once"), ("dl.alo", "at-least-once")):
            ch.queue_declare(name, durable=True, arguments={
                "x-queue-type": "quorum", "x-dead-letter-exchange": "",
                "x-dead-letter-routing-key": "dl.target", "x-dead-letter-strategy": strategy,
                "x-overflow": "reject-publish"})
            ch.basic_publish("", name, b"dead", pika.BasicProperties(delivery_mode=2))
            method = None
            while method is None:
                method, _props, _body = ch.basic_get(name)
            ch.basic_reject(method.delivery_tag, requeue=False)
        while ch.queue_declare("dl.target", passive=True).method.message_count < 2:
            conn.sleep(0.02)  # both dead letters arrived
    finally:
        conn.close()


@pytest.mark.trio
async def test_quorum_dead_letters_counted_by_strategy(tmp_path):
    broker = open_broker(_settings(tmp_path))
    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve_broker, broker)
        with trio.fail_after(60):
            await trio.to_thread.run_sync(_reject_into_dlx, port)
        s = _samples(render_metrics(Admin(broker)))
        nursery.cancel_scope.cancel()
    name = "rabbitmq_global_messages_dead_lettered_rejected_total"
    assert s[name + '{queue_type="rabbit_quorum_queue",dead_letter_strategy="at_most_once"}'] == 1
    assert s[name + '{queue_type="rabbit_quorum_queue",dead_letter_strategy="at_least_once"}'] == 1
    assert s[name + '{queue_type="rabbit_classic_queue",dead_letter_strategy="at_most_once"}'] == 0
