"""The driver program of the standalone-cluster test, run by spark-submit (`--master spark://...`).

    spark-submit --master spark://... --py-files amqp_broker.zip cluster_job.py URL IN OUT CKPT TARGET

Drains queue IN into Parquet at OUT (the `amqp` source, Trigger.AvailableNow, acks after commit),
reads the result back through Spark, writes its bodies and message ids to queue TARGET (the `amqp`
sink), and prints one JSON line: rows drained, distinct message ids, rows published, and where
the executors imported `amqp_broker` from (they must have it from the --py-files zip).
"""

from __future__ import annotations

import json
import sys


def _origin(_):
    import amqp_broker.spark
    return amqp_broker.spark.__file__


def main() -> None:
    url, queue_in, out, ckpt, target = sys.argv[1:6]
    from pyspark.sql import SparkSession

    import amqp_broker.spark as amqp_spark

    spark = SparkSession.builder.appName("amqp-cluster-test").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    amqp_spark.register(spark)
    origins = sorted(set(spark.sparkContext.parallelize(range(4), 2).map(_origin).collect()))

    drained = amqp_spark.drain_queue(spark, url, queue_in, out, ckpt, maxMessagesPerBatch=100)
    rows = spark.read.parquet(out)
    distinct = rows.select("properties.message_id").distinct().count()
    (rows.selectExpr("body", "properties.message_id AS message_id")
         .write.format("amqp").option("url", url).option("routingKey", target)
         .option("messageId", "none").mode("append").save())
    print("RESULT " + json.dumps({"drained": drained["rows"], "batches": drained["batches"],
                                  "distinct": distinct, "published": rows.count(),
                                  "executor_origins": origins,
                                  "master": spark.sparkContext.master}), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
