"""The documented cluster path on a real Spark standalone cluster (master + worker from pyspark's
jars, loopback ports chosen at run time): the source, the sink and `amqp-broker-dlq run`, each
submitted with `spark-submit --master spark://... --py-files dist/amqp_broker.zip`, executors
importing the connector from that zip only.  Checks the data, the queues, and that the master
lists both applications as finished.  Own JVMs (master, worker, driver, executor): marked slow.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pika
import pytest

from amqp_broker.spark import dlq, pyfiles

from .amqp_util import unique
from .conftest import spark_available
from .standalone import StandaloneCluster

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(spark_available() is not None, reason=str(spark_available()))]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    standalone = StandaloneCluster(tmp_path_factory.mktemp("standalone"))
    standalone.start()
    try:
        yield standalone
    finally:
        standalone.stop()


def _result(proc, marker: str = "RESULT ") -> dict:
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    line = next(line for line in proc.stdout.splitlines() if line.startswith(marker))
    return json.loads(line[len(marker):])


def test_source_and_sink_on_a_standalone_cluster(cluster, broker_url, amqp, tmp_path):
    zip_path = pyfiles.build(tmp_path / "dist" / "amqp_broker.zip")
    source, target = unique("csrc"), unique("ctgt")
    amqp.declare(source)
    amqp.declare(target)
    ids = amqp.publish(source, 300, size=64)

    job = Path(__file__).with_name("cluster_job.py")
    proc = cluster.submit([str(job), broker_url, source, str(tmp_path / "out"),
                           str(tmp_path / "ckpt"), target], py_files=zip_path)
    result = _result(proc)

    assert result["master"] == cluster.master_url
    assert (result["drained"], result["distinct"], result["published"]) == (300, 300, 300)
    assert result["batches"] == 3  # maxMessagesPerBatch=100
    # executors had no PYTHONPATH: the connector came from their own copy of the shipped zip
    assert result["executor_origins"] and all(
        "amqp_broker.zip" in origin and not origin.startswith(str(zip_path))
        for origin in result["executor_origins"]), result
    assert amqp.wait_no_consumers(source) == 0  # everything acked after commit
    got = amqp.drain(target)
    assert sorted(props.message_id for _, props, _ in got) == sorted(ids)
    assert {bytes(body) for _, _, body in got} == {mid.encode().ljust(64, b".") for mid in ids}
    _assert_finished(cluster, "amqp-cluster-test")


def test_dead_letter_archive_and_report_on_a_standalone_cluster(cluster, broker_url, amqp, tmp_path):
    """The README's form: spark-submit ... dlq.py run (archive, then report) on the cluster."""
    zip_path = pyfiles.build(tmp_path / "dist" / "amqp_broker.zip")
    dlx, dlq_name, origin = unique("cdlx"), unique("cdlq"), unique("corig")
    amqp.ch.exchange_declare(dlx, "fanout")
    amqp.declare(dlq_name)
    amqp.ch.queue_bind(dlq_name, dlx)
    amqp.declare(origin, **{"x-dead-letter-exchange": dlx})
    for i in range(20):
        amqp.ch.basic_publish("", origin, b"bad", pika.BasicProperties(message_id=f"bad-{i}"))
    for _ in range(20):
        method, _, _ = amqp.ch.basic_get(origin)
        amqp.ch.basic_reject(method.delivery_tag, requeue=False)

    archive = tmp_path / "archive"
    proc = cluster.submit([dlq.__file__, "run", "--url", broker_url, "--queue", dlq_name,
                           "--archive", str(archive), "--max-messages-per-batch", "8",
                           "--format", "json", "--bucket", "1d", "--top", "5"], py_files=zip_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    start = proc.stdout.index("{\n")  # spark-submit merges the driver's stderr into stdout
    report, _ = json.JSONDecoder().raw_decode(proc.stdout[start:])
    assert [(t["reason"], t["queue"], t["dead_letters"], t["distinct_messages"])
            for t in report["totals"]] == [("rejected", origin, 20, 20)]
    assert amqp.wait_no_consumers(dlq_name) == 0
    assert any(p.name.startswith("dt=") for p in archive.iterdir())
    _assert_finished(cluster, "amqp-broker-dlq")


def test_an_executor_killed_mid_batch_loses_and_duplicates_nothing(cluster, spark, broker_url, amqp,
                                                                   tmp_path):
    """SIGKILL the executor JVM while one of its tasks is in the middle of the second batch: Spark
    runs the task again on a new executor from the same input partition (the rows travel inside
    it), the batch commits once, and only then are its messages acked."""
    zip_path = pyfiles.build(tmp_path / "dist" / "amqp_broker.zip")
    queue = unique("ekill")
    amqp.declare(queue, **{"x-queue-type": "quorum"})
    ids = amqp.publish(queue, 300, size=64)
    marker = tmp_path / "stalled"
    job = Path(__file__).with_name("executor_kill_job.py")
    out = tmp_path / "out"
    proc = cluster.start_submit([str(job), broker_url, queue, str(out), str(tmp_path / "ckpt"),
                                 ids[150], str(marker)], py_files=zip_path,
                                output=tmp_path / "submit.log")
    try:
        deadline = time.monotonic() + 240
        while not marker.exists():
            assert proc.poll() is None, (tmp_path / "submit.log").read_text()[-5000:]
            assert time.monotonic() < deadline, "no task reached the stall point"
            time.sleep(0.2)
        executors = cluster.executor_pids()
        assert len(executors) == 1, executors
        os.kill(executors[0], signal.SIGKILL)
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    log = (tmp_path / "submit.log").read_text(errors="replace")
    assert proc.returncode == 0, log[-5000:]
    result = json.loads(next(l for l in log.splitlines() if l.startswith("RESULT "))[len("RESULT "):])
    assert sum(result["batches"]) == 300 and max(result["batches"]) <= 100, result
    assert executors[0] not in cluster.executor_pids()  # a new executor ran the retry
    # read through Spark's file-sink log: the killed attempt's partial file is not part of it
    got = [r.message_id for r in spark.read.parquet(str(out)).select("properties.message_id").collect()]
    assert sorted(got) == sorted(ids)  # each once: nothing lost, nothing written twice
    assert amqp.wait_no_consumers(queue) == 0  # all acked after the commits
    _assert_finished(cluster, "amqp-executor-kill-test")


def _assert_finished(cluster: StandaloneCluster, app_name: str) -> None:
    """The master's JSON UI lists the application as completed with state FINISHED."""
    deadline = time.monotonic() + 30  # the master learns of the end when the driver disconnects
    while True:
        state = cluster.state()
        finished = [app for app in state.get("completedapps", []) if app.get("name") == app_name]
        if finished or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert finished and finished[-1]["state"] == "FINISHED", state
    assert not [app for app in state.get("activeapps", []) if app.get("name") == app_name]
