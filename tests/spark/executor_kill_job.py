"""The driver program of the executor-kill test, run by spark-submit (`--master spark://...`).

    spark-submit ... executor_kill_job.py URL QUEUE OUT CKPT STALL_ID MARKER

Drains QUEUE into Parquet at OUT (the `amqp` source, Trigger.AvailableNow, acks after commit).
The task that meets the row with message id STALL_ID, on its first attempt, writes MARKER and
waits there, mid-batch, so the test can kill its executor with SIGKILL; Spark runs the task again
on a new executor (the retry finds MARKER and goes on).  Prints one JSON line with the batches.
"""

from __future__ import annotations

import json
import os
import sys
import time


def main() -> None:
    url, queue, out, ckpt, stall_id, marker = sys.argv[1:7]
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import amqp_broker.spark as amqp_spark

    spark = SparkSession.builder.appName("amqp-executor-kill-test").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    amqp_spark.register(spark)

    def stall_once(message_id):
        if message_id == stall_id and not os.path.exists(marker):
            with open(marker + ".tmp", "w") as f:
                f.write(str(os.getpid()))
            os.rename(marker + ".tmp", marker)
            parent, deadline = os.getppid(), time.monotonic() + 300
            while os.getppid() == parent and time.monotonic() < deadline:
                time.sleep(0.2)  # until the executor under this worker is gone
        return message_id

    stream = (spark.readStream.format("amqp").option("url", url).option("queue", queue)
              .option("maxMessagesPerBatch", "100").load()
              .withColumn("checked_id", F.udf(stall_once, "string")("properties.message_id")))
    query = (stream.writeStream.format("parquet").option("path", out)
             .option("checkpointLocation", ckpt).trigger(availableNow=True).start())
    query.awaitTermination()
    batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    print("RESULT " + json.dumps({"batches": batches}), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
