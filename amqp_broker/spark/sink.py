"""The sink: `df.writeStream.format("amqp")` and `df.write.format("amqp")` (SPARK.md 5.4 and 5.5).

Writers are built on the driver and pickled to executors; `write()` runs in executor tasks, gets its
partition as Arrow record batches (the Arrow writer bases: no per-row Row objects) and publishes it
with pipelined publisher confirms (`publisher.publish_all`).  Any nack, return or
confirm timeout fails the task, so Spark retries it: at-least-once, with a deterministic
`message_id` per row for consumers to dedupe on.  The driver-side `commit` only logs totals:
AMQP has nothing to commit.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid

from pyspark import TaskContext
from pyspark.sql.datasource import (DataSourceArrowWriter, DataSourceStreamArrowWriter,
                                    WriterCommitMessage)

from .messages import body_messages, id_prefix, to_message
from .options import SinkOptions, check_sink_columns
from .publisher import publish_all

log = logging.getLogger(__name__)


@dataclasses.dataclass
class AmqpCommit(WriterCommitMessage):
    partition: int
    batchId: int | str
    published: int
    returned: int


def _task_ids(fallback_query: str, fallback_batch: int | str) -> tuple[str, int | str, int]:
    ctx = TaskContext.get()
    if ctx is None:  # called outside a task (unit tests)
        return fallback_query, fallback_batch, 0
    query = ctx.getLocalProperty("sql.streaming.queryId") or fallback_query
    batch = ctx.getLocalProperty("streaming.sql.batchId")
    return query, (int(batch) if batch is not None else fallback_batch), ctx.partitionId()


def _messages(opts: SinkOptions, batches, ids: str | None):
    """Spark hands the writers Arrow record batches: plain dicts per row (no Row objects), or
    for a lone body column just the bodies."""
    index = 0
    for batch in batches:
        if batch.schema.names == ["body"]:
            yield from body_messages(batch.column(0).to_pylist(), opts, ids, index)
        else:
            for n, row in enumerate(batch.to_pylist(), index):
                yield to_message(row, opts, None if ids is None else ids + str(n))
        index += batch.num_rows


def _publish_partition(opts: SinkOptions, batches, query_id: str, batch_id, partition: int) -> AmqpCommit:
    ids = id_prefix(query_id, batch_id, partition) if opts.deterministic_ids else None
    result = publish_all(opts.urls, _messages(opts, batches, ids), mandatory=opts.mandatory,
                         count_unroutable=opts.count_unroutable, max_in_flight=opts.max_in_flight,
                         confirm_timeout=opts.confirm_timeout, heartbeat=opts.heartbeat)
    return AmqpCommit(partition, batch_id, result.published, result.returned)


def _totals(messages) -> tuple[int, int]:
    done = [m for m in messages if isinstance(m, AmqpCommit)]
    return sum(m.published for m in done), sum(m.returned for m in done)


class AmqpStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, opts: SinkOptions, columns: list[str]) -> None:
        check_sink_columns(columns, opts)  # on the driver, before any task runs
        self._opts = opts

    def write(self, iterator) -> AmqpCommit:
        query, batch, partition = _task_ids("query", 0)
        return _publish_partition(self._opts, iterator, query, batch, partition)

    def commit(self, messages, batchId: int) -> None:
        published, returned = _totals(messages)
        log.info("amqp sink: batch %s published %s messages (%s returned)", batchId, published, returned)

    def abort(self, messages, batchId: int) -> None:
        published, _ = _totals(messages)
        log.warning("amqp sink: batch %s aborted after %s confirmed publishes; the retry "
                    "republishes them (same message_id)", batchId, published)


class AmqpBatchWriter(DataSourceArrowWriter):
    def __init__(self, opts: SinkOptions, columns: list[str]) -> None:
        check_sink_columns(columns, opts)
        self._opts = opts
        # One id per save(): retries of a task reuse it, so message ids stay deterministic.
        self._job_id = f"batch-{uuid.uuid4().hex[:12]}"

    def write(self, iterator) -> AmqpCommit:
        _, _, partition = _task_ids(self._job_id, 0)
        return _publish_partition(self._opts, iterator, self._job_id, 0, partition)

    def commit(self, messages) -> None:
        published, returned = _totals(messages)
        log.info("amqp sink: %s published %s messages (%s returned)", self._job_id, published, returned)

    def abort(self, messages) -> None:
        log.warning("amqp sink: %s aborted", self._job_id)
