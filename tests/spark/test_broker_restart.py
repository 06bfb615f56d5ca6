"""The broker restarted under a running source: the consumer reconnects (a new session), the
AvailableNow query goes on and drains the queue; nothing is lost, the duplicates (the rows of
batches whose acks died with the old connection) come back with redelivered=true.  Restarts the
broker it launched itself (a quorum queue on one node, same port and data directory), so it does
not run against SPARK_BROKER_URL."""

from __future__ import annotations

import os
import time

import pytest

from compat_tests.support.launcher import Broker, free_port

from .amqp_util import Amqp, unique
from .conftest import spark_available
from .test_crash_restart import _check_at_least_once

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(spark_available() is not None, reason=str(spark_available()))]


def test_source_reconnects_after_a_broker_restart(spark, tmp_path):
    if os.environ.get("SPARK_BROKER_URL"):
        pytest.skip("restarts a broker it launched itself; SPARK_BROKER_URL points elsewhere")
    broker = Broker(tmp_path / "broker", port=free_port()).start()
    try:
        queue, batch, total = unique("restart"), 200, 2000
        with Amqp(broker.url) as amqp:
            amqp.declare(queue, **{"x-queue-type": "quorum"})
            ids = amqp.publish(queue, total)
        out, ckpt = tmp_path / "out", tmp_path / "ckpt"
        query = (spark.readStream.format("amqp").option("url", broker.url).option("queue", queue)
                 .option("maxMessagesPerBatch", batch).option("heartbeat", 5).load()
                 .writeStream.format("parquet").option("path", str(out))
                 .option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start())
        deadline = time.monotonic() + 180
        while not (out / "_spark_metadata" / "1").exists():  # two batches committed
            assert query.isActive and time.monotonic() < deadline, query.exception()
            time.sleep(0.05)
        broker.stop()
        time.sleep(1.0)
        broker.start()
        query.awaitTermination(300)
        assert not query.isActive and query.exception() is None
        with Amqp(broker.url) as amqp:
            left = amqp.wait_no_consumers(queue)
        rows = spark.read.parquet(str(out)).collect()
        assert left == 0, f"{left} left in the queue; {len(rows)} rows: {query.recentProgress[-3:]}"
        # the batch committed but not yet acked, and the one planned on the old connection
        _check_at_least_once(rows, ids, 2 * batch)
        assert any(r.redelivered for r in rows), "the restart happened after everything was read"
    finally:
        broker.stop()
