"""`AmqpDataSource`, the PySpark data source named "amqp", and `register(spark)`.

Spark instantiates the data source in its Python workers and asks it for readers and writers;
options are parsed here so a bad option fails at `load()` / `start()` on the driver, with a message
naming the option.  Imported only by `amqp_broker.spark` users, never by the broker.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource

from .batch import AmqpBatchReader
from .options import parse_batch_read_options, parse_sink_options, parse_source_options
from .rows import SCHEMA_DDL
from .sink import AmqpBatchWriter, AmqpStreamWriter
from .source import AmqpStreamReader


class AmqpDataSource(DataSource):
    """Read queues (streaming, at-least-once) and write to exchanges (publisher confirms)."""

    @classmethod
    def name(cls) -> str:
        return "amqp"

    def schema(self) -> str:
        return SCHEMA_DDL

    def streamReader(self, schema) -> AmqpStreamReader:
        return AmqpStreamReader(parse_source_options(self.options))

    def reader(self, schema) -> AmqpBatchReader:
        return AmqpBatchReader(parse_batch_read_options(self.options))

    def streamWriter(self, schema, overwrite: bool) -> AmqpStreamWriter:
        return AmqpStreamWriter(parse_sink_options(self.options), list(schema.fieldNames()))

    def writer(self, schema, overwrite: bool) -> AmqpBatchWriter:
        return AmqpBatchWriter(parse_sink_options(self.options), list(schema.fieldNames()))


def register(spark) -> None:
    """Make `format("amqp")` available in this SparkSession."""
    spark.dataSource.register(AmqpDataSource)
