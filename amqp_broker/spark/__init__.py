"""PySpark integration: the `amqp` data source (streaming source, sink, guarded batch read), the
`drain_queue` helper and the dead-letter report CLI (`amqp_broker.spark.dlq`).

Needs the optional `[spark]` extra.  The pyspark-dependent names are loaded lazily so that the pure
helpers (options, rows, ledger, messages) import without pyspark; the broker never imports this
package.  See docs/SPARK-PIPELINE.md.
"""

from __future__ import annotations

from .ledger import Ledger, offset_json, offset_seq
from .messages import Outgoing, deterministic_id, to_message
from .options import (OptionError, SinkOptions, SourceOptions, parse_batch_read_options,
                      parse_sink_options, parse_source_options)
from .rows import COLUMNS, SCHEMA_DDL, make_row

_LAZY = {
    "AmqpDataSource": "datasource",
    "register": "datasource",
    "AmqpStreamReader": "source",
    "AmqpStreamWriter": "sink",
    "AmqpBatchWriter": "sink",
    "AmqpCommit": "sink",
    "AmqpBatchReader": "batch",
    "drain_queue": "batch",
    "publish_all": "publisher",
    "PublishError": "publisher",
    "ConsumerError": "consumer",
}

__all__ = ["COLUMNS", "SCHEMA_DDL", "Ledger", "OptionError", "Outgoing", "SinkOptions",
           "SourceOptions", "deterministic_id", "make_row", "offset_json", "offset_seq",
           "parse_batch_read_options", "parse_sink_options", "parse_source_options",
           "to_message", *_LAZY]


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
