"""The source's rows as Arrow record batches (the schema of `rows.SCHEMA_DDL`, in pyarrow types).

Pure (pyarrow only, no pyspark).  `source.py` turns each input partition's rows into one
Arrow IPC buffer on the driver, and `read()` on an executor hands the decoded `RecordBatch` to Spark
as is: no per-row conversion in the executors, and a compact buffer instead of pickled tuples
inside each task.  Types follow what Spark expects for the DDL (`to_arrow_schema(..., "UTC")`):
LONG int64, INT int32, TIMESTAMP timestamp[us, UTC], MAP map<string, string>.
"""

from __future__ import annotations

from itertools import accumulate

import pyarrow as pa

from .rows import COLUMNS

_TS = pa.timestamp("us", tz="UTC")

_PROPERTIES = pa.struct([
    ("content_type", pa.string()), ("content_encoding", pa.string()), ("delivery_mode", pa.int32()),
    ("priority", pa.int32()), ("correlation_id", pa.string()), ("reply_to", pa.string()),
    ("expiration", pa.string()), ("message_id", pa.string()), ("timestamp", _TS),
    ("type", pa.string()), ("user_id", pa.string()), ("app_id", pa.string())])

_DEATH = pa.struct([
    ("queue", pa.string()), ("reason", pa.string()), ("exchange", pa.string()),
    ("routing_keys", pa.list_(pa.string())), ("count", pa.int64()), ("time", _TS),
    ("original_expiration", pa.string())])

ARROW_SCHEMA = pa.schema([
    ("seq", pa.int64()), ("queue", pa.string()), ("body", pa.binary()), ("exchange", pa.string()),
    ("routing_key", pa.string()), ("redelivered", pa.bool_()), ("delivery_tag", pa.int64()),
    ("delivery_count", pa.int32()), ("headers", pa.map_(pa.string(), pa.string())),
    ("properties", _PROPERTIES), ("x_death", pa.list_(_DEATH)),
    ("x_first_death_reason", pa.string()), ("x_first_death_queue", pa.string()),
    ("x_first_death_exchange", pa.string()), ("x_last_death_reason", pa.string()),
    ("x_last_death_queue", pa.string()), ("x_last_death_exchange", pa.string()),
    ("consumed_at", _TS)])

assert tuple(ARROW_SCHEMA.names) == COLUMNS
_ROW_FIELDS = list(ARROW_SCHEMA)[1:]  # a ledger row's columns: all but seq


def _struct_dicts(values, fields: pa.StructType) -> list:
    names = [f.name for f in fields]
    return [None if v is None else dict(zip(names, v)) for v in values]


def _binary(values) -> pa.Array:
    """Bodies as one joined buffer plus offsets: far cheaper than pa.array over bytes objects."""
    if None in values:
        return pa.array(values, type=pa.binary())
    offsets = list(accumulate(map(len, values), initial=0))
    if offsets[-1] >= 2**31:
        return pa.array(values, type=pa.large_binary()).cast(pa.binary())
    return pa.Array.from_buffers(pa.binary(), len(values),
                                 [None, pa.py_buffer(pa.array(offsets, pa.int32()).buffers()[1]),
                                  pa.py_buffer(b"".join(values))])


def _properties(values) -> pa.Array:
    """The struct built from its 12 child columns (rows.properties_struct never yields None)."""
    children = list(zip(*values)) if values else [()] * _PROPERTIES.num_fields
    return pa.StructArray.from_arrays(
        [_plain(c, f.type) for c, f in zip(children, _PROPERTIES)], fields=list(_PROPERTIES))


def _plain(values, kind: pa.DataType) -> pa.Array:
    """A column that is mostly absent (most properties, the dead-letter fields) costs no
    per-row conversion when it is absent throughout."""
    if values.count(None) == len(values):
        return pa.nulls(len(values), kind)
    return pa.array(values, type=kind)


def _all_empty(values, kind: pa.DataType) -> pa.Array:
    """Every row an empty map or list (not null): zero offsets, no per-row conversion."""
    offsets = pa.array([0] * (len(values) + 1), pa.int32())
    if pa.types.is_map(kind):
        return pa.MapArray.from_arrays(offsets, pa.array([], kind.key_type),
                                       pa.array([], kind.item_type))
    return pa.ListArray.from_arrays(offsets, pa.array([], kind.value_type))


def _by_identity(values, convert) -> pa.Array:
    """A column whose rows share a few objects (the consumer reuses one properties tuple per
    distinct content header and one timestamp per read): each distinct object converted once."""
    codes: dict[int, int] = {}
    index = [codes.setdefault(id(v), len(codes)) for v in values]
    if len(codes) * 2 > len(values):
        return convert(values)
    distinct = list({id(v): v for v in values}.values())  # in order of first appearance
    return convert(distinct).take(pa.array(index, pa.int32()))


def _column(values, field: pa.Field) -> pa.Array:
    name = field.name
    if name == "body":
        return _binary(values)
    if name == "properties":
        return _by_identity(values, _properties)
    if name == "consumed_at":
        return _by_identity(values, lambda distinct: _plain(distinct, field.type))
    if name in ("x_death", "headers") and None not in values and not any(values):
        return _all_empty(values, field.type)  # the usual headers: none
    if name == "x_death":
        values = [None if v is None else _struct_dicts(v, _DEATH) for v in values]
    elif name == "headers":
        values = [None if v is None else list(v) for v in values]
    return _plain(values, field.type)


def record_batch(seqs: list[int], rows: list[tuple]) -> pa.RecordBatch:
    """A batch's seqs and their rows (the columns after `seq`, in `COLUMNS` order) -> one
    RecordBatch in `ARROW_SCHEMA`."""
    columns = list(zip(*rows)) if rows else [()] * (len(COLUMNS) - 1)
    arrays = [pa.array(seqs, pa.int64())]
    arrays += [_column(values, field) for values, field in zip(columns, _ROW_FIELDS)]
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


def to_ipc(batch: pa.RecordBatch) -> pa.Buffer:
    """The batch as an Arrow IPC stream, in one buffer (bytes-like; pickles as bytes)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue()


def from_ipc(data) -> list[pa.RecordBatch]:
    with pa.ipc.open_stream(pa.py_buffer(data)) as reader:
        return list(reader)
