"""Quorum queues on /metrics and in the quorum log: an `amqp-broker` process started from a
rabbitmq.conf with tiny raft.* limits (the WAL rolls into segment files of at most 8 entries,
seen in the data directory), the ra_metrics family per queue and aggregated over HTTP, WAL and
segment sizes, dead letters counted by strategy, and x-delivery-count sent as a long.
"""

from __future__ import annotations

import time

import pika
import pytest

from amqp_broker.queues.message import Message
from amqp_broker.queues.quorum_effects import with_delivery_count
from compat_tests.support.launcher import Broker
from compat_tests.support.metrics import scrape
from compat_tests.support.pika_util import pika_connections
from quorum.log.segment import parse_segment_name

_CONF = """\
# tiny limits: a few dozen publishes fill the WAL, which rolls into segment files of at most 8
# entries each (several per rollover)
raft.wal_max_size_bytes = 16384
raft.segment_max_entries = 8
"""


@pytest.fixture
def raft_node(tmp_path):
    """A node of the test's own with the tiny raft.* limits, management API and metrics on."""
    with Broker(tmp_path, config=_CONF).start() as node:
        yield node


def _publish_and_get(conn: pika.BlockingConnection, queue: str, n: int) -> None:
    """n confirmed persistent publishes to a quorum queue, then one basic.get that is nacked
    back (its redelivery carries x-delivery-count)."""
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


def test_x_delivery_count_header_is_a_long():
    msg = Message.from_publish("", "q", b"\x00\x00", b"body")
    props = with_delivery_count(msg, 2).properties
    # field name (short string), then 'l' and a signed 64-bit big-endian value
    assert b"\x10x-delivery-countl" + (2).to_bytes(8, "big", signed=True) in props


def test_raft_settings_reach_the_log_and_raft_metrics(raft_node):
    with pika_connections() as connect:
        _publish_and_get(connect(raft_node.url), "qq.metrics", 200)
    per_queue = scrape(raft_node.metrics_url, "/metrics/per-object")
    node = scrape(raft_node.metrics_url)

    # raft.wal_max_size_bytes: the WAL rolled over (at the 512 MiB default it never would) ...
    spans = [parse_segment_name(p.name) for p in (raft_node.data_dir / "quorum").rglob("*.seg")]
    assert spans, "the WAL never rolled over into segment files"
    # ... and raft.segment_max_entries: no segment file holds more than 8 entries
    sizes = [last - first + 1 for _counter, first, last in spans]
    assert max(sizes) == 8, sizes

    label = '{vhost="/",queue="qq.metrics"}'
    applied = per_queue["rabbitmq_raft_log_last_applied_index" + label]
    assert applied >= 200  # every publish is one applied entry (plus checkouts, settles)
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
    assert 0 < node["rabbitmq_raft_wal_size_bytes"]


def _reject_into_dlx(conn: pika.BlockingConnection) -> None:
    """One message rejected from each of two quorum queues: at-most-once and at-least-once."""
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
    deadline = time.monotonic() + 30
    while ch.queue_declare("dl.target", passive=True).method.message_count < 2:
        assert time.monotonic() < deadline, "the two dead letters never reached dl.target"
        conn.sleep(0.02)


def test_quorum_dead_letters_counted_by_strategy(raft_node):
    with pika_connections() as connect:
        _reject_into_dlx(connect(raft_node.url))
    s = scrape(raft_node.metrics_url)
    name = "rabbitmq_global_messages_dead_lettered_rejected_total"
    assert s[name + '{queue_type="rabbit_quorum_queue",dead_letter_strategy="at_most_once"}'] == 1
    assert s[name + '{queue_type="rabbit_quorum_queue",dead_letter_strategy="at_least_once"}'] == 1
    assert s[name + '{queue_type="rabbit_classic_queue",dead_letter_strategy="at_most_once"}'] == 0
