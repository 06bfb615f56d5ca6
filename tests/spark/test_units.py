"""U1-U4 (SPARK.md section 7): offsets, parsing, options, pickling.  No JVM, no broker."""

from __future__ import annotations

import datetime as dt
import json
import pickle
import socket
import types

import pytest
from hypothesis import given
from hypothesis import strategies as st

from amqp_broker.spark import ledger as L
from amqp_broker.spark import options as O
from amqp_broker.spark import rows as R
from amqp_broker.spark.messages import deterministic_id, to_message

NOW = dt.datetime(2026, 11, 22, 12, 0, tzinfo=dt.timezone.utc)


def _delivery(session: int, tag: int, size: int = 10) -> L.Delivery:
    return L.delivery(session, tag, ("q", b"x" * size) + (None,) * 15, size)


# -- U1 offset bookkeeping -------------------------------------------------------------------

def test_u1_seq_assignment_and_ack_upto():
    led = L.Ledger()
    s = led.new_session()
    for tag in range(1, 8):
        assert led.receive(_delivery(s, tag))
    assert led.admit(max_rows=3, max_bytes=None) == 3
    assert led.admit(max_rows=3, max_bytes=None) == 6
    seqs, rows = led.rows_between(3, 6)
    assert seqs == [4, 5, 6] and [r[0] for r in rows] == ["q"] * 3
    assert led.ack_upto(2) == 2          # tags 1,2 -> ack multiple up to 2
    assert led.ack_upto(2) is None       # idempotent
    assert led.ack_upto(6) == 6
    assert led.unacked() == 0
    assert led.admit(max_rows=None, max_bytes=None) == 7


def test_u1_new_session_never_acks_old_tags():
    led = L.Ledger()
    old = led.new_session()
    for tag in (1, 2, 3):
        led.receive(_delivery(old, tag))
    led.admit(None, None)
    new = led.new_session()              # reconnect: the broker requeued tags 1-3
    assert led.receive(_delivery(old, 4)) is False  # late delivery of the dead channel
    led.receive(_delivery(new, 1))
    assert led.admit(None, None) == 4    # seq keeps counting across sessions
    assert led.rows_between(0, 3) == ([], [])  # the dead session's batch replays empty
    assert led.ack_upto(3) is None       # nothing of the old session is acked
    assert led.ack_upto(4) == 1          # tag 1 of the *new* channel


def test_u1_empty_replay_for_unknown_range_moves_seq_forward():
    led = L.Ledger()
    s = led.new_session()
    assert led.rows_between(400, 600) == ([], [])  # a batch from before a crash
    led.receive(_delivery(s, 1))
    assert led.admit(None, None) == 601


def test_u1_caps_bytes_and_available_now_target():
    led = L.Ledger()
    s = led.new_session()
    for tag in range(1, 6):
        led.receive(_delivery(s, tag, size=100))
    assert led.admit(max_rows=None, max_bytes=250) == 2
    assert led.admit(max_rows=None, max_bytes=10) == 3   # one oversized message still goes
    led.remaining = 1
    assert led.admit(max_rows=100, max_bytes=None) == 4
    assert led.admit(max_rows=100, max_bytes=None) == 4  # target reached: no new batch
    assert led.wanted(100) == 0


def test_u1_offsets_round_trip_as_json():
    off = L.offset_json(42)
    assert json.loads(json.dumps(off)) == {"seq": 42}
    assert L.offset_seq(json.dumps(off)) == 42 and L.offset_seq(off) == 42 and L.offset_seq(None) == 0


# -- U2 parsing --------------------------------------------------------------------------------

def _props(**kw):
    base = {name: None for name in R.PROPERTY_FIELDS}
    base["headers"] = None
    base.update(kw)
    return types.SimpleNamespace(**base)


def test_u2_x_death_table_to_typed_struct():
    died = dt.datetime(2026, 11, 1, 10, 5)  # pika gives naive UTC
    headers = {
        "x-death": [{"queue": b"orders", "reason": "rejected", "exchange": "", "count": 2,
                     "routing-keys": ["orders", b"cc"], "time": died, "original-expiration": "6000"},
                    {"queue": "dlq", "reason": "expired", "exchange": "dlx", "count": 1,
                     "routing-keys": ["orders"], "time": died}],
        "x-first-death-reason": "rejected", "x-first-death-queue": "orders",
        "x-first-death-exchange": "", "x-last-death-reason": "expired",
        "x-delivery-count": 3,
    }
    row = R.make_row(seq=0, queue="dlq", body=b"b", exchange="dlx", routing_key="orders",
                     redelivered=True, delivery_tag=9, properties=_props(headers=headers), consumed_at=NOW)
    rec = dict(zip(R.COLUMNS, row))
    first = rec["x_death"][0]
    assert first == ("orders", "rejected", "", ["orders", "cc"], 2,
                     died.replace(tzinfo=dt.timezone.utc), "6000")
    assert rec["x_death"][1][2] == "dlx" and rec["x_death"][1][6] is None
    assert (rec["x_first_death_reason"], rec["x_first_death_queue"], rec["x_first_death_exchange"]) == \
        ("rejected", "orders", "")
    assert rec["x_last_death_reason"] == "expired" and rec["x_last_death_queue"] is None
    assert rec["delivery_count"] == 3
    assert json.loads(rec["headers"]["x-death"])[0]["queue"] == "orders"


def test_u2_header_coercion_and_properties():
    headers = {"n": 5, "flag": True, "raw": b"\xff\x00", "text": b"hi", "tbl": {"a": [1, 2]}, "none": None}
    mapped = R.headers_map(headers)
    assert mapped["n"] == "5" and mapped["flag"] == "true" and mapped["text"] == "hi"
    assert json.loads(mapped["tbl"]) == {"a": [1, 2]} and mapped["none"] is None
    assert isinstance(mapped["raw"], str)
    props = R.properties_struct(_props(content_type="text/plain", delivery_mode=2, priority="4",
                                       message_id="m1", timestamp=1_700_000_000))
    rec = dict(zip(R.PROPERTY_FIELDS, props))
    assert rec["delivery_mode"] == 2 and rec["priority"] == 4 and rec["message_id"] == "m1"
    assert rec["timestamp"] == dt.datetime.fromtimestamp(1_700_000_000, dt.timezone.utc)
    plain = dict(zip(R.COLUMNS, R.make_row(seq=1, queue="q", body=None, exchange="", routing_key="q",
                                          redelivered=False, delivery_tag=1, properties=_props(),
                                          consumed_at=NOW)))
    assert plain["x_death"] is None and plain["delivery_count"] is None and plain["headers"] == {}


def test_u2_sink_row_to_message():
    opts = O.parse_sink_options({"url": "amqp://h", "exchange": "ex", "routingKey": "rk"})
    msg = to_message({"body": "hé", "headers": {"a": "1"},
                      "properties": {"content_type": "text/plain", "timestamp": NOW}}, opts,
                     deterministic_id("q", 3, 1, 7))
    assert msg.body == "hé".encode() and (msg.exchange, msg.routing_key) == ("ex", "rk")
    assert msg.properties["message_id"] == "q:3:1:7" and msg.properties["delivery_mode"] == 2
    assert msg.properties["timestamp"] == int(NOW.timestamp()) and msg.properties["headers"] == {"a": "1"}
    kept = to_message({"body": b"x", "routing_key": "own", "message_id": "mine"}, opts, None)
    assert kept.properties["message_id"] == "mine" and kept.routing_key == "own"


@pytest.mark.parametrize("ids", ["deterministic", "none"])
def test_u2_a_lone_body_column_gives_the_messages_the_rows_give(ids):
    """The sink's body-only path (no dict per row) makes exactly what `to_message` makes, ids
    counting on across a partition's record batches."""
    import pyarrow as pa

    from amqp_broker.spark.sink import _messages

    opts = O.parse_sink_options({"url": "amqp://h", "routingKey": "rk", "messageId": ids,
                                 "deliveryMode": "1"})
    bodies = ["a", "hé", "", None, "z" * 300]
    batches = [pa.record_batch({"body": pa.array(bodies[:2])}),
               pa.record_batch({"body": pa.array(bodies[2:])})]
    prefix = "q:3:1:" if ids == "deterministic" else None
    want = [to_message({"body": b}, opts, None if prefix is None else deterministic_id("q", 3, 1, i))
            for i, b in enumerate(bodies)]
    assert list(_messages(opts, batches, prefix)) == want
    binary = [pa.record_batch({"body": pa.array([b"\x00\xff", None], pa.binary())})]
    assert [m.body for m in _messages(opts, binary, prefix)] == [b"\x00\xff", b""]


# -- U3 options --------------------------------------------------------------------------------

class _CaseInsensitive(dict):
    """Like Spark's options map: stored lower-case."""

    def __init__(self, items):
        super().__init__({k.lower(): v for k, v in items.items()})


def test_u3_keys_are_case_insensitive():
    opts = O.parse_source_options(_CaseInsensitive({"URL": "amqp://h", "Queue": "q",
                                                    "maxMessagesPerBatch": "100"}))
    assert opts.max_messages_per_batch == 100 and opts.prefetch == 200 and opts.queue == "q"
    mixed = O.parse_source_options({"url": "amqp://h", "queue": "q", "MAXMESSAGESPERBATCH": "7",
                                    "consumerArguments": '{"x-priority": 5}', "ackMode": "autoAck"})
    assert mixed.max_messages_per_batch == 7 and mixed.consumer_arguments == {"x-priority": 5}
    assert mixed.auto_ack


def test_u3_invalid_options_are_rejected():
    with pytest.raises(O.OptionError, match="prefetch"):
        O.parse_source_options({"url": "amqp://h", "queue": "q", "maxMessagesPerBatch": "100",
                                "prefetch": "50"})
    with pytest.raises(O.OptionError, match="url"):
        O.parse_source_options({"queue": "q"})
    with pytest.raises(O.OptionError, match="ackMode"):
        O.parse_source_options({"url": "amqp://h", "queue": "q", "ackMode": "never"})
    with pytest.raises(O.OptionError, match="confirmTimeout"):
        O.parse_sink_options({"url": "amqp://h", "confirmTimeout": "soon"})


def test_u3_unknown_sink_columns():
    opts = O.parse_sink_options({"url": "amqp://h"})
    O.check_sink_columns(["body", "routing_key", "headers"], opts)
    with pytest.raises(O.OptionError, match="extra"):
        O.check_sink_columns(["body", "extra"], opts)
    with pytest.raises(O.OptionError, match="body"):
        O.check_sink_columns(["value"], opts)
    O.check_sink_columns(["body", "extra"], O.parse_sink_options({"url": "amqp://h",
                                                                  "ignoreUnknownColumns": "true"}))


# -- U4 pickling -------------------------------------------------------------------------------

def test_u4_reader_and_writer_pickle_without_live_state_and_do_no_io(monkeypatch):
    pytest.importorskip("pyspark")
    from amqp_broker.spark.sink import AmqpBatchWriter, AmqpStreamWriter
    from amqp_broker.spark.source import AmqpStreamReader, split_rows

    def no_sockets(*a, **kw):
        raise AssertionError("constructor opened a socket")
    monkeypatch.setattr(socket, "socket", no_sockets)
    monkeypatch.setattr(socket, "create_connection", no_sockets)

    src = O.parse_source_options({"url": "amqp://h", "queue": "q"})
    reader = AmqpStreamReader(src)
    reader._runtime()  # live state (thread condition, ledger) exists in the runner...
    copy = pickle.loads(pickle.dumps(reader))
    assert copy._rt is None and copy._opts == src  # ...and is never shipped
    sink = O.parse_sink_options({"url": "amqp://h"})
    for cls in (AmqpStreamWriter, AmqpBatchWriter):
        writer = pickle.loads(pickle.dumps(cls(sink, ["body"])))
        assert writer._opts == sink
    rows = [_row(i) for i in range(1, 6)]
    parts = split_rows(*_offsets_and_rows(rows), 2)
    assert [p.count for p in parts] == [3, 2]
    batches = list(copy.read(pickle.loads(pickle.dumps(parts[1]))))
    got = [tuple(r.values()) for b in batches for r in b.to_pylist()]
    assert [r[0] for r in got] == [4, 5] and [r[2] for r in got] == [rows[3][2], rows[4][2]]


def _offsets_and_rows(rows: list[tuple]) -> tuple[list[int], list[tuple]]:
    """Whole rows (`make_row`) -> what the ledger hands `split_rows` / `record_batch`: the seqs,
    and rows without them whose property columns are in the ledger's form."""
    first = R.COLUMNS.index("delivery_count")
    last = first + len(R.property_columns(None))
    return [r[0] for r in rows], [r[1:first] + R.ledger_columns(r[first:last]) + r[last:]
                                  for r in rows]


def _row(seq: int, headers: dict | None = None) -> tuple:
    props = types.SimpleNamespace(message_id=f"m{seq}", delivery_mode=2, headers=headers,
                                  timestamp=NOW.replace(tzinfo=None))
    return R.make_row(seq=seq, queue="q", body=b"b%d" % seq, exchange="ex", routing_key="rk",
                      redelivered=seq % 2 == 0, delivery_tag=seq, properties=props, consumed_at=NOW)


def test_arrow_batches_carry_every_column_as_the_rows_do():
    """The Arrow path (what read() hands Spark) against the plain row tuples, incl. dead letters."""
    pa = pytest.importorskip("pyarrow")
    from amqp_broker.spark import arrow_rows as A
    death = [{"queue": "orders", "reason": "rejected", "exchange": "", "count": 3,
              "routing-keys": ["orders"], "time": NOW.replace(tzinfo=None)}]
    rows = [_row(1), _row(2, {"x-death": death, "x-first-death-reason": "rejected",
                              "x-delivery-count": 4, "k": b"v"}), _row(3, {})]
    batch = A.from_ipc(A.to_ipc(A.record_batch(*_offsets_and_rows(rows))))[0]
    assert batch.schema == A.ARROW_SCHEMA and batch.num_rows == 3
    out = batch.to_pylist()
    assert [o["body"] for o in out] == [b"b1", b"b2", b"b3"]
    assert [o["redelivered"] for o in out] == [False, True, False]
    assert out[1]["delivery_count"] == 4 and out[1]["x_first_death_reason"] == "rejected"
    assert dict(out[1]["headers"])["k"] == "v"
    assert out[1]["x_death"][0]["count"] == 3 and out[1]["x_death"][0]["routing_keys"] == ["orders"]
    assert out[0]["x_death"] is None and out[2]["headers"] == []
    assert out[0]["properties"]["message_id"] == "m1"
    assert out[0]["properties"]["timestamp"] == NOW and out[0]["consumed_at"] == NOW
    assert A.record_batch([], []).num_rows == 0
    assert isinstance(batch, pa.RecordBatch)


# -- the dlq CLI without a JVM -----------------------------------------------------------------

def test_dlq_cli_arguments_and_missing_archive(tmp_path, capsys):
    from amqp_broker.spark import dlq
    assert dlq.window_duration("1h") == "1 hours" and dlq.window_duration("15m") == "15 minutes"
    assert dlq.window_duration("1 day") == "1 day"
    assert dlq.main(["report", "--archive", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        dlq.main(["archive", "--archive", str(tmp_path)])  # --url is required


def test_dlq_output_rendering(tmp_path):
    from amqp_broker.spark import dlq_output
    report = {"over_time": [{"bucket_start": NOW.replace(tzinfo=None), "reason": "rejected",
                             "queue": "q", "exchange": "", "dead_letters": 3, "distinct_messages": 2}],
              "totals": [{"reason": "rejected", "queue": "q", "dead_letters": 3, "share": 1.0}],
              "top_poison": []}
    text = dlq_output.render_tables(report)
    assert "Dead letters over time" in text and "rejected" in text and "(no rows)" in text
    assert json.loads(dlq_output.render_json(report))["totals"][0]["dead_letters"] == 3
    written = dlq_output.write_files(report, tmp_path, "csv")
    assert (tmp_path / "totals.csv").read_text().splitlines()[0] == "reason,queue,dead_letters,share"
    assert len(written) == 3
    assert dlq_output.write_chart([], tmp_path / "none.png") is None
    report["top_poison"] = [{"message_key": "<script>", "body_preview": "a & b"}]
    page = dlq_output.write_html(report, tmp_path / "r.html", None).read_text()
    assert page.count("<table>") == 3 and "&lt;script&gt;" in page and "a &amp; b" in page
    assert "<script>" not in page  # cells are escaped


# -- the documented cluster path (no JVM) -----------------------------------------------------

def test_pyfiles_zip_is_enough_to_import_the_connector(tmp_path):
    """Executors get only pyspark and the zip: the connector and pika must import from it alone
    (-S: no site-packages, so neither the installed package nor pika can help)."""
    import subprocess
    import sys
    import zipfile

    from amqp_broker.spark import pyfiles

    zip_path = pyfiles.build(tmp_path / "dist" / "amqp_broker.zip")
    names = set(zipfile.ZipFile(zip_path).namelist())
    assert {"amqp_broker/__init__.py", "amqp_broker/spark/source.py", "pika/__init__.py",
            "pamqp/__init__.py"} <= names
    assert not any(n.startswith(("amqp_broker/core", "amqp_broker/server")) for n in names)
    code = ("import sys; sys.path.insert(0, sys.argv[1]); "
            "import amqp_broker.spark.consumer, amqp_broker.spark.publisher, pika, pamqp; "
            "print(amqp_broker.spark.consumer.__file__)")
    proc = subprocess.run([sys.executable, "-S", "-c", code, str(zip_path)],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().startswith(str(zip_path))


def test_launcher_finds_the_broker_command_beside_the_interpreter(monkeypatch):
    """A venv's interpreter run without activating the venv: `amqp-broker` is not on PATH."""
    import sys
    from pathlib import Path

    from compat_tests.support import launcher

    monkeypatch.setenv("PATH", "/nonexistent")
    beside = Path(sys.executable).with_name("amqp-broker")
    if not beside.exists():
        pytest.skip(f"no amqp-broker beside {sys.executable}")
    assert launcher._command() == str(beside)


# -- the sink's hand-built publish frames (no broker) -----------------------------------------

_short = st.text(max_size=40)


@given(props=st.fixed_dictionaries({}, optional={
    "content_type": _short, "content_encoding": _short, "correlation_id": _short,
    "reply_to": _short, "expiration": _short, "message_id": _short, "type": _short,
    "user_id": _short, "app_id": _short, "delivery_mode": st.sampled_from([1, 2]),
    "priority": st.integers(0, 9), "timestamp": st.integers(0, 2**31 - 1),  # pamqp reads larger as ms
    "headers": st.dictionaries(st.text(min_size=1, max_size=10), _short, max_size=3)}))
def test_publish_properties_decode_as_written(props):
    """Our hand-encoded basic.properties, read back by pamqp's decoder."""
    import struct

    from pamqp import commands

    from amqp_broker.spark.publisher import encode_properties
    raw = encode_properties(props)
    decoded = commands.Basic.Properties()
    decoded.unmarshal(struct.unpack(">H", raw[:2])[0], raw[2:])
    for name, value in props.items():
        got = getattr(decoded, {"type": "message_type"}.get(name, name))  # pamqp's name
        if name == "timestamp":
            got = int(got.replace(tzinfo=dt.timezone.utc).timestamp())
        assert got == value, name


def _unmarshal_frames(data: bytes) -> list:
    """Every frame in `data`, decoded by pamqp (what a client would read)."""
    from protocol.peer import parse  # tests/protocol (pytest puts tests/ on sys.path)
    return [value for _channel, value in parse(data)]


def test_publish_frames_split_large_bodies_at_frame_max():
    from amqp_broker.spark.messages import Outgoing
    from amqp_broker.spark.publisher import PublishFrames
    body = bytes(range(256)) * 40  # 10240 bytes -> 3 body frames
    data = PublishFrames(4096).of(Outgoing("ex", "rk", body, {"message_id": "m", "delivery_mode": 2}), True)
    method, header, *bodies = _unmarshal_frames(data)
    assert (method.exchange, method.routing_key, method.mandatory) == ("ex", "rk", True)
    assert header.body_size == len(body) and header.properties.message_id == "m"
    assert b"".join(b.value for b in bodies) == body and len(bodies) == 3


def test_dlq_replay_arguments(tmp_path, capsys):
    from amqp_broker.spark import dlq
    args = dlq._parser().parse_args(["replay", "--url", "amqp://h", "--archive", "a", "--reason", "rejected",
                                     "--reason", "expired", "--message-id", "m1", "--dry-run"])
    assert (args.reason, args.message_id, args.dry_run, args.to_exchange) == (
        ["rejected", "expired"], ["m1"], True, None)
    assert dlq.main(["replay", "--url", "amqp://h", "--archive", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        dlq.main(["replay", "--archive", str(tmp_path)])  # --url is required


# -- parallel reading: several queues or a pattern ----------------------------------------------

def test_source_options_take_a_list_or_a_pattern():
    opts = O.parse_source_options({"url": "amqp://h", "queue": "a, b,a ,c"})
    assert opts.queues == ("a", "b", "c") and opts.queue == "a,b,c"
    pat = O.parse_source_options({"url": "amqp://h", "queuePattern": "orders-[0-9]+",
                                  "managementUrl": "http://h:15672"})
    assert pat.queue_pattern == "orders-[0-9]+" and pat.queues == ()
    for bad in ({"url": "amqp://h"}, {"url": "amqp://h", "queue": "a", "queuePattern": "b"},
                {"url": "amqp://h", "queuePattern": "x"},  # no managementUrl
                {"url": "amqp://h", "queuePattern": "(", "managementUrl": "http://h"},
                {"url": "amqp://h", "queue": " , "}):
        with pytest.raises(O.OptionError):
            O.parse_source_options(bad)


def test_partitions_follow_the_queues():
    pytest.importorskip("pyspark")
    from amqp_broker.spark.source import split_rows
    rows = [(i, "a" if i % 4 else "b") + _row(i)[2:] for i in range(1, 13)]  # 9 of a, 3 of b
    parts = split_rows(*_offsets_and_rows(rows), 4)
    assert [p.count for p in parts] == [3, 3, 3, 3]  # a gets 3 partitions, b one
    from amqp_broker.spark.arrow_rows import from_ipc
    queues = [{r["queue"] for b in from_ipc(p.ipc) for r in b.to_pylist()} for p in parts]
    assert queues == [{"a"}, {"a"}, {"a"}, {"b"}]
    seqs = [r["seq"] for p in parts for b in from_ipc(p.ipc) for r in b.to_pylist()]
    assert sorted(seqs) == list(range(1, 13))
    assert [p.count for p in split_rows(*_offsets_and_rows(rows), 1)] == [9, 3]  # at least one per queue


def test_partitions_follow_the_partitions_of_a_partitioned_queue():
    """Deliveries from a partitioned queue carry x-partition: input partitions never mix two of
    its partitions, and each keeps its partition's delivery order."""
    pytest.importorskip("pyspark")
    from amqp_broker.spark.arrow_rows import from_ipc
    from amqp_broker.spark.source import split_rows
    rows = [_row(i, {"x-partition": i % 3}) for i in range(1, 13)]
    parts = split_rows(*_offsets_and_rows(rows), 2)
    assert len(parts) == 3  # one each at least, though only two were asked for
    for part in parts:
        got = [r for b in from_ipc(part.ipc) for r in b.to_pylist()]
        assert len({dict(r["headers"])["x-partition"] for r in got}) == 1  # a map: (key, value) pairs
        assert [r["seq"] for r in got] == sorted(r["seq"] for r in got)
    assert sorted(r["seq"] for p in parts for b in from_ipc(p.ipc) for r in b.to_pylist()) \
        == list(range(1, 13))


def test_u1_a_new_session_asks_for_the_available_now_target_to_be_recounted():
    led = L.Ledger()
    s = led.new_session()
    for tag in range(1, 6):
        led.receive(_delivery(s, tag))
    led.remaining = 5
    led.admit(max_rows=3, max_bytes=None)          # seq 1-3 admitted, remaining 2
    assert led.ack_upto(1) == 1                    # seq 1 acked: gone for good
    assert led.remaining == 2
    led.new_session()                              # connection lost: seq 2-3 and tags 4-5 come back
    assert led.needs_recount and led.unacked() == 0 and not led.pending


@given(props=st.fixed_dictionaries({}, optional={
    "content_type": _short, "message_id": _short, "type": _short, "app_id": _short,
    "delivery_mode": st.sampled_from([1, 2]), "priority": st.integers(0, 9),
    "timestamp": st.integers(0, 2**40),
    "headers": st.dictionaries(st.text(min_size=1, max_size=10), st.one_of(_short, st.integers(0, 2**31)),
                               max_size=3)}))
def test_wire_properties_round_trip(props):
    from amqp_broker.spark.wire import decode_properties, encode_properties
    decoded = decode_properties(b"\x00\x3c\x00\x00" + bytes(8) + encode_properties(props), 12)
    for name, value in props.items():
        assert getattr(decoded, name) == value, name


def test_deliveries_are_parsed_from_frames_into_rows():
    """basic.deliver + header + two body frames, as the consumer's I/O thread sees them."""
    import struct

    from amqp_broker.spark.consumer import _DeliveryParser
    from amqp_broker.spark.wire import encode_properties
    body = b"x" * 10 + b"y" * 5
    deliver = (b"\x00\x3c\x00\x3c" + b"\x05ctag1" + struct.pack(">QB", 42, 1) + b"\x02ex" + b"\x03key")
    header = struct.pack(">HHQ", 60, 0, len(body)) + encode_properties(
        {"message_id": "m1", "delivery_mode": 2,
         "headers": {"x-delivery-count": 3, "x-first-death-reason": "rejected"}})
    parser = _DeliveryParser({"ctag1": "orders"}, include_body=True)
    parser.deliver(deliver)
    parser.header(header)
    assert not parser.done
    parser.body(body[:10])
    parser.body(body[10:])
    assert parser.done
    delivery = parser.take(session=7, consumed_at=NOW)
    row = dict(zip(R.COLUMNS[1:], delivery[L.ROW]))  # a ledger row: seq comes on admission
    assert (delivery[L.SESSION], delivery[L.TAG]) == (7, 42)
    assert (row["queue"], row["exchange"], row["routing_key"], row["redelivered"]) == ("orders", "ex", "key", True)
    assert row["body"] == body and row["delivery_count"] == 3 and row["x_first_death_reason"] == "rejected"
    assert row["properties"][PROPERTY_INDEX["message_id"]] == "m1" and row["consumed_at"] == NOW
    parser.deliver(deliver)
    parser.header(struct.pack(">HHQ", 60, 0, 0) + encode_properties({}))
    assert parser.done and dict(zip(R.COLUMNS[1:], parser.take(1, NOW)[L.ROW]))["body"] == b""


def test_parsed_rows_follow_each_message_s_own_properties():
    """The parser reuses the columns of property bytes it has seen: messages with the same
    properties share them, and every other message still gets its own."""
    import struct

    from amqp_broker.spark.consumer import _DeliveryParser
    from amqp_broker.spark.wire import encode_properties
    parser = _DeliveryParser({"c": "q"}, include_body=True)
    ids = [f"m{i % 7}" for i in range(600)]  # 7 property sets, each seen many times
    ids += [f"unique-{i}" for i in range(600)]  # past the parser's memory of property sets
    for tag, message_id in enumerate(ids, 1):
        parser.deliver(b"\x00\x3c\x00\x3c\x01c" + struct.pack(">QB", tag, 0) + b"\x00\x01q")
        headers = {"n": tag % 3} if tag % 2 else {}
        parser.header(struct.pack(">HHQ", 60, 0, 1) + encode_properties(
            {"message_id": message_id, "headers": headers}))
        parser.body(b"b")
        row = dict(zip(R.COLUMNS[1:], parser.take(1, NOW)[L.ROW]))
        assert row["properties"][PROPERTY_INDEX["message_id"]] == message_id
        assert row["headers"] == ((("n", str(tag % 3)),) if tag % 2 else ())
        assert row["delivery_tag"] == tag


def test_buffered_deliveries_are_not_tracked_by_the_garbage_collector():
    """The ledger holds a whole prefetch window; if its rows stayed tracked, every full
    collection in the runner walked all of them."""
    import gc
    import struct

    from amqp_broker.spark.consumer import _DeliveryParser
    from amqp_broker.spark.wire import encode_properties
    parser = _DeliveryParser({"c": "q"}, include_body=True)
    death = [{"queue": "q", "reason": "expired", "count": 1, "routing-keys": ["q"]}]
    got = []
    for headers in (None, {"x-death": death, "k": "v"}):
        parser.deliver(b"\x00\x3c\x00\x3c\x01c" + struct.pack(">QB", 1, 0) + b"\x00\x01q")
        parser.header(struct.pack(">HHQ", 60, 0, 1) + encode_properties(
            {"delivery_mode": 2} if headers is None else {"headers": headers}))
        parser.body(b"b")
        got.append(parser.take(1, NOW))
    for _ in range(4):  # each collection untracks one more level of nested tuples
        gc.collect()
    assert not any(gc.is_tracked(d) for d in got)


PROPERTY_INDEX = {name: i for i, name in enumerate(R.PROPERTY_FIELDS)}


@given(st.sampled_from([1, 2]), st.text(max_size=80))
def test_the_sink_s_usual_properties_encode_as_any_others_do(mode, message_id):
    from amqp_broker.spark.wire import encode_properties
    usual = encode_properties({"delivery_mode": mode, "message_id": message_id})  # its own path
    assert usual == encode_properties({"message_id": message_id, "delivery_mode": mode})


@pytest.mark.parametrize("size", [0, 1, 4087, 4088, 4089, 3 * 4088 + 5])
def test_publish_frames_carry_bodies_of_every_size_around_frame_max(size):
    from amqp_broker.spark.messages import Outgoing
    from amqp_broker.spark.publisher import PublishFrames
    body = bytes(i % 251 for i in range(size))
    data = PublishFrames(4096).of(Outgoing("", "rk", body, {"delivery_mode": 2}), False)
    method, header, *bodies = _unmarshal_frames(data)
    assert (method.routing_key, method.mandatory) == ("rk", False)
    assert header.body_size == size and header.properties.delivery_mode == 2
    assert b"".join(b.value for b in bodies) == body
    assert len(bodies) == -(-size // 4088) and all(len(b.value) <= 4088 for b in bodies)


class _NaiveLedger:
    """The protocol of SPARK.md 3.3 written as plainly as possible: a dict seq -> delivery."""

    def __init__(self) -> None:
        self.session, self.admitted_upto, self.buffer, self.pending = 0, 0, {}, []

    def new_session(self):
        self.session += 1
        self.buffer, self.pending = {}, []

    def admit(self, max_rows, max_bytes):
        size = taken = 0
        while self.pending and (max_rows is None or max_rows > 0):
            nxt = self.pending[0]
            if max_bytes is not None and taken and size + nxt[L.SIZE] > max_bytes:
                break
            self.pending.pop(0)
            self.admitted_upto += 1
            self.buffer[self.admitted_upto] = nxt
            size += nxt[L.SIZE]
            taken += 1
            max_rows = None if max_rows is None else max_rows - 1
        return self.admitted_upto

    def ack_upto(self, seq):
        gone = sorted(k for k in self.buffer if k <= seq)
        tags = [self.buffer.pop(k)[L.TAG] for k in gone]
        return max(tags) if tags else None

    def rows_between(self, start, end):
        self.admitted_upto = max(self.admitted_upto, end)
        seqs = [k for k in range(start + 1, end + 1) if k in self.buffer]
        return seqs, [self.buffer[k][L.ROW] for k in seqs]


_ops = st.lists(st.one_of(
    st.tuples(st.just("receive"), st.integers(1, 5), st.sampled_from([0, 100, 250])),
    st.tuples(st.just("admit"), st.none() | st.integers(0, 6),
              st.none() | st.sampled_from([1, 100, 200, 250, 350, 500])),  # sums land on the cap
    st.tuples(st.just("ack"), st.integers(-2, 3)),
    st.tuples(st.just("rows"), st.integers(-3, 3), st.integers(0, 4)),
    st.tuples(st.just("new_session"))), max_size=40)


@given(ops=_ops)
def test_u1_the_ledger_keeps_the_protocol_of_a_plain_dict(ops):
    """Admitting, acking and slicing with list operations give what the plain protocol gives:
    the same seqs, rows, acked tags and byte caps, across sessions and empty replays."""
    led, model = L.Ledger(), _NaiveLedger()
    tags = 0
    for op in ops:
        if op[0] == "receive":
            for _ in range(op[1]):
                tags += 1
                d = L.delivery(led.session, tags, ("q", tags), op[2])
                led.receive(d)
                if d[L.SESSION] == model.session:
                    model.pending.append(d)
        elif op[0] == "admit":
            assert led.admit(op[1], op[2]) == model.admit(op[1], op[2])
        elif op[0] == "ack":
            seq = max(0, led.admitted_upto + op[1])
            assert led.ack_upto(seq) == model.ack_upto(seq)
        elif op[0] == "rows":
            start = max(0, led.admitted_upto + op[1])
            assert led.rows_between(start, start + op[2]) == model.rows_between(start, start + op[2])
        else:
            led.new_session()
            model.new_session()
            tags = 0
        assert led.admitted_upto == model.admitted_upto and led.unacked() == len(model.buffer)
        assert list(led.pending) == model.pending
