"""S8: the dead-letter report CLI on a fixture archive, in its own process and JVM."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from . import dlq_fixture
from .conftest import spark_available

pytestmark = pytest.mark.skipif(spark_available() is not None, reason=str(spark_available()))


def test_s8_report_cli_json(tmp_path):
    archive = dlq_fixture.write_archive(tmp_path / "archive")
    out = tmp_path / "report"
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               PYSPARK_SUBMIT_ARGS="--driver-java-options '-XX:TieredStopAtLevel=1 -XX:+UseSerialGC' "
                                   "pyspark-shell")
    proc = subprocess.run(
        [sys.executable, "-m", "amqp_broker.spark.dlq", "report", "--archive", str(archive),
         "--format", "json", "--bucket", "1h", "--top", "3", "--out", str(out), "--master", "local[1]"],
        capture_output=True, text=True, env=env, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)

    totals = {(r["reason"], r["queue"]): (r["dead_letters"], r["distinct_messages"]) for r in report["totals"]}
    assert totals == dlq_fixture.EXPECTED
    assert sum(r["dead_letters"] for r in report["over_time"]) == dlq_fixture.EXPECTED_TOTAL_ROWS
    hours = {(r["bucket_start"][11:13], r["reason"]) for r in report["over_time"]}
    assert hours == {("10", "rejected"), ("11", "expired"), ("11", "maxlen"), ("12", "delivery_limit")}

    top = report["top_poison"]
    assert [t["message_key"] for t in top[:2]] == ["poison-1", "poison-2"]
    assert top[0]["max_delivery_count"] == 25 and top[0]["total_deaths"] == 3
    assert top[0]["origin_queue"] == "orders" and top[0]["reason"] == "delivery_limit"

    assert json.loads((out / "totals.json").read_text())
    assert (out / "dead_letters_over_time.png").read_bytes()[:4] == b"\x89PNG"


def test_archive_then_report_in_process(spark, broker_url, amqp, tmp_path, capsys):
    """`archive` drains a real DLQ into the dt-partitioned archive; `report` reads it back."""
    import argparse

    import pika

    from amqp_broker.spark import dlq

    from .amqp_util import unique

    dlx, dlq_name, src = unique("adlx"), unique("adlq"), unique("asrc")
    amqp.ch.exchange_declare(dlx, "fanout")
    amqp.declare(dlq_name)
    amqp.ch.queue_bind(dlq_name, dlx)
    amqp.declare(src, **{"x-dead-letter-exchange": dlx})
    for i in range(5):
        amqp.ch.basic_publish("", src, b"bad", pika.BasicProperties(message_id=f"bad-{i}"))
    for _ in range(5):
        method, _, _ = amqp.ch.basic_get(src)
        amqp.ch.basic_reject(method.delivery_tag, requeue=False)

    archive = str(tmp_path / "archive")
    args = argparse.Namespace(url=broker_url, queue=dlq_name, archive=archive, checkpoint=None,
                              continuous=False, trigger="30s", max_messages_per_batch=2,
                              since=None, until=None, bucket="1d", top=3, format="json", out=None)
    assert dlq.archive(spark, args) == {"rows": 5}
    assert amqp.wait_no_consumers(dlq_name) == 0
    assert any(p.name.startswith("dt=") for p in (tmp_path / "archive").iterdir())
    capsys.readouterr()
    dlq.report(spark, args)
    report = json.loads(capsys.readouterr().out)
    assert [(t["reason"], t["queue"], t["dead_letters"], t["share"]) for t in report["totals"]] == \
        [("rejected", src, 5, 1.0)]
    assert len(report["top_poison"]) == 3
