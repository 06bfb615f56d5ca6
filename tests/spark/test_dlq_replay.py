"""`amqp-broker-dlq replay`: archived dead letters back to their original exchange and routing key
(or a named one), with confirms, each archived row at most once; `--dry-run` publishes nothing.
Real dead letters (rejected and expired) from the broker under test, archived by `archive`; only
AMQP 0-9-1, so this also runs against RabbitMQ (SPARK_BROKER_URL)."""

from __future__ import annotations

import argparse
import json
import time

import pika
import pytest

from amqp_broker.spark import dlq

from .amqp_util import unique


def _args(broker_url: str, archive: str, **kw) -> argparse.Namespace:
    base = dict(url=broker_url, archive=archive, reason=[], source_queue=[], since=None, until=None,
                message_id=[], to_exchange=None, to_routing_key=None, dry_run=False, format="json")
    base.update(kw)
    return argparse.Namespace(**base)


def _wait_ready(amqp, queue: str, count: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while amqp.counts(queue)[0] < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"{queue}: {amqp.counts(queue)[0]} of {count} messages")
        time.sleep(0.1)


@pytest.fixture
def archived(spark, broker_url, amqp, tmp_path):
    """An archive of 6 real dead letters of `origin`: r0..r3 rejected, e0..e1 expired."""
    dlx, dlq_name, origin = unique("rdlx"), unique("rdlq"), unique("rorig")
    amqp.ch.exchange_declare(dlx, "fanout")
    amqp.declare(dlq_name)
    amqp.ch.queue_bind(dlq_name, dlx)
    amqp.declare(origin, **{"x-dead-letter-exchange": dlx})
    for i in range(2):
        amqp.ch.basic_publish("", origin, f"expired {i}".encode(),
                              pika.BasicProperties(message_id=f"e{i}", expiration="1"))
    time.sleep(0.2)
    assert amqp.ch.basic_get(origin)[0] is None  # both expired at the head
    for i in range(4):
        amqp.ch.basic_publish("", origin, f"rejected {i}".encode(),
                              pika.BasicProperties(message_id=f"r{i}", delivery_mode=2,
                                                   headers={"tenant": "t1"}))
    for _ in range(4):
        method, _, _ = amqp.ch.basic_get(origin)
        amqp.ch.basic_reject(method.delivery_tag, requeue=False)
    _wait_ready(amqp, dlq_name, 6)
    archive = str(tmp_path / "archive")
    args = argparse.Namespace(url=broker_url, queue=dlq_name, archive=archive, checkpoint=None,
                              continuous=False, trigger="30s", max_messages_per_batch=100)
    assert dlq.archive(spark, args) == {"rows": 6}
    return origin, archive


def _replay(spark, capsys, args) -> dict:
    capsys.readouterr()
    dlq.replay(spark, args)
    return json.loads(capsys.readouterr().out)


def test_replay_dry_run_then_once_then_nothing(spark, broker_url, amqp, archived, capsys):
    origin, archive = archived

    dry = _replay(spark, capsys, _args(broker_url, archive, reason=["rejected"], dry_run=True))
    assert (dry["selected"], dry["replayed"]) == (4, 0)
    assert sorted(r["message_key"] for r in dry["rows"]) == ["r0", "r1", "r2", "r3"]
    assert {(r["exchange"], r["routing_key"], r["origin_queue"]) for r in dry["rows"]} == {("", origin, origin)}
    assert amqp.counts(origin)[0] == 0  # a dry run publishes nothing

    first = _replay(spark, capsys, _args(broker_url, archive, reason=["rejected"]))
    assert (first["selected"], first["replayed"]) == (4, 4)
    got = amqp.drain(origin)
    assert sorted(p.message_id for _, p, _ in got) == ["r0", "r1", "r2", "r3"]
    for _, props, body in got:
        assert body == f"rejected {props.message_id[1]}".encode()
        assert props.delivery_mode == 2 and props.headers["tenant"] == "t1"
        assert props.headers["x-replayed-from-archive"] == first["replay_id"]
        assert not {"x-death", "x-first-death-reason"} & set(props.headers)

    second = _replay(spark, capsys, _args(broker_url, archive, reason=["rejected"]))
    assert (second["selected"], second["replayed"]) == (0, 0)
    assert amqp.counts(origin)[0] == 0


def test_replay_to_a_named_target_marks_only_what_it_replayed(spark, broker_url, amqp, archived, capsys):
    origin, archive = archived
    target = unique("rtarget")
    amqp.declare(target)

    one = _replay(spark, capsys, _args(broker_url, archive, message_id=["e1"], to_exchange="",
                                       to_routing_key=target))
    assert one["replayed"] == 1
    got = amqp.drain(target)
    assert [(p.message_id, b) for _, p, b in got] == [("e1", b"expired 1")]

    # the rest of the expired ones (only e0 now) go back where they came from
    rest = _replay(spark, capsys, _args(broker_url, archive, reason=["expired"], source_queue=[origin]))
    assert rest["replayed"] == 1
    assert [p.message_id for _, p, _ in amqp.drain(origin)] == ["e0"]
    assert amqp.counts(target)[0] == 0

    # nothing of the archive matches a filter of another queue
    none = _replay(spark, capsys, _args(broker_url, archive, source_queue=["no-such-queue"]))
    assert none["selected"] == 0
