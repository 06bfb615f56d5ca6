"""S8: the dead-letter report CLI on a fixture archive, in its own process and JVM: as
`python -m amqp_broker.spark.dlq` and in the README's `spark-submit --py-files ... dlq.py` form."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from amqp_broker.spark import dlq, pyfiles

from . import dlq_fixture
from .conftest import spark_available

pytestmark = pytest.mark.skipif(spark_available() is not None, reason=str(spark_available()))


_FAST_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def spark_submit() -> str:
    """pyspark's own spark-submit (the one beside the installed jars)."""
    import pyspark
    return str(Path(pyspark.__file__).parent / "bin" / "spark-submit")


def _launch(how: str, tmp_path: Path) -> list[str]:
    if how == "module":
        return [sys.executable, "-m", "amqp_broker.spark.dlq"]
    # The README's cluster form, verbatim: dlq.py run as a file, the package from --py-files.
    zip_path = pyfiles.build(tmp_path / "dist" / "amqp_broker.zip")
    return [spark_submit(), "--master", "local[1]", "--driver-java-options", _FAST_JVM,
            "--py-files", str(zip_path), dlq.__file__]


@pytest.mark.parametrize("how", ["module", "spark-submit-file"])
def test_s8_report_cli_json(tmp_path, how):
    archive = dlq_fixture.write_archive(tmp_path / "archive")
    out = tmp_path / "report"
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               PYSPARK_DRIVER_PYTHON=sys.executable,
               PYSPARK_SUBMIT_ARGS=f"--driver-java-options '{_FAST_JVM}' pyspark-shell")
    proc = subprocess.run(
        [*_launch(how, tmp_path), "report", "--archive", str(archive),
         "--format", "json", "--bucket", "1h", "--top", "3", "--out", str(out), "--master", "local[1]"],
        capture_output=True, text=True, env=env, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # spark-submit merges the Python driver's stderr ("wrote ..." lines) into its stdout
    start = proc.stdout.index("{\n") if how != "module" else 0
    report, _ = json.JSONDecoder().raw_decode(proc.stdout[start:])

    totals = {(r["reason"], r["queue"]): (r["dead_letters"], r["distinct_messages"]) for r in report["totals"]}
    assert totals == dlq_fixture.EXPECTED
    assert sum(r["dead_letters"] for r in report["over_time"]) == dlq_fixture.EXPECTED_TOTAL_ROWS
    hours = {(r["bucket_start"][11:13], r["reason"]) for r in report["over_time"]}
    assert hours == {("10", "rejected"), ("11", "expired"), ("11", "maxlen"), ("12", "delivery_limit")}

    top = report["top_poison"]
    assert [t["message_key"] for t in top[:2]] == ["poison-1", "poison-2"]
    assert top[0]["max_delivery_count"] == 25 and top[0]["total_deaths"] == 3
    assert top[0]["origin_queue"] == "orders" and top[0]["reason"] == "delivery_limit"

    assert top[0]["body_preview"] == "payload of poison-1"  # text, not base64, when UTF-8

    assert json.loads((out / "totals.json").read_text())
    assert (out / "dead_letters_over_time.png").read_bytes()[:4] == b"\x89PNG"
    page = (out / "report.html").read_text()
    assert "data:image/png;base64," in page and page.count("<table>") == 3 and "poison-1" in page
    assert "No Partition Defined for Window" not in proc.stderr + proc.stdout


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
