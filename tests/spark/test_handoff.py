"""The runner's slice server and the executors' fetch (`amqp_broker.spark.handoff`), over real
loopback sockets."""

from __future__ import annotations

import datetime as dt
import pickle

import pytest

from amqp_broker.spark.handoff import HandoffError, SliceServer, fetch


def _put(server: SliceServer, batch_end: int, data) -> int:
    slice_id = server.reserve(batch_end)
    server.fill(slice_id, data)
    return slice_id


@pytest.fixture
def server():
    s = SliceServer("127.0.0.1")
    yield s
    s.close()


def test_a_slice_comes_back_whole_as_often_as_asked_until_its_batch_is_released(server):
    data = bytes(range(256)) * 40_000  # 10 MB: many recv calls
    first = _put(server, 100, data)
    second = _put(server, 200, b"later batch")
    for _ in range(2):  # a retried task fetches the same rows again
        assert fetch(server.address, server.secret, first) == data
    server.release_upto(100)
    with pytest.raises(HandoffError, match="does not hold"):
        fetch(server.address, server.secret, first)
    assert fetch(server.address, server.secret, second) == b"later batch"
    assert server.held() == 1


def test_an_empty_slice_is_served(server):
    assert fetch(server.address, server.secret, _put(server, 1, b"")) == b""


def test_a_request_without_the_secret_gets_no_rows(server):
    slice_id = _put(server, 1, b"private rows")
    with pytest.raises(HandoffError, match="connection closed"):
        fetch(server.address, b"\0" * 16, slice_id)
    assert fetch(server.address, server.secret, slice_id) == b"private rows"


def test_a_server_that_is_gone_names_the_address_and_the_inline_option():
    s = SliceServer("127.0.0.1")
    address, secret = s.address, s.secret
    s.close()
    with pytest.raises(HandoffError, match=rf"{address[1]}.*rowTransfer=inline"):
        fetch(address, secret, 1)


def _runtime_with_a_batch(transfer: str, count: int):
    """A source runtime (as in Spark's runner, nothing started) whose ledger holds one admitted
    batch of `count` 1 KiB deliveries."""
    from amqp_broker.spark import options as O
    from amqp_broker.spark.ledger import delivery
    from amqp_broker.spark.rows import ledger_columns, property_columns, row_bytes
    from amqp_broker.spark.source import AmqpStreamReader

    reader = AmqpStreamReader(O.parse_source_options(
        {"url": "amqp://h", "queue": "q", "rowTransfer": transfer, "rowServerHost": "127.0.0.1",
         "numPartitions": "2"}))
    rt = reader._runtime()
    now = dt.datetime.now(dt.timezone.utc)
    columns = ledger_columns(property_columns(None))
    rows = [("q", b"x" * 1000 + i.to_bytes(2, "big"), "", "q", False, i, *columns, now)
            for i in range(1, count + 1)]
    session = rt.ledger.new_session()
    for i, row in enumerate(rows, 1):
        rt.ledger.receive(delivery(session, i, row, row_bytes(row[1])))
    assert rt.ledger.admit(None, None) == count
    return reader, rt, rows


@pytest.mark.parametrize("transfer", ["fetch", "inline"])
def test_a_batchs_partitions_carry_or_fetch_its_rows_in_order(transfer):
    pytest.importorskip("pyspark")
    from amqp_broker.spark.arrow_rows import from_ipc

    reader, rt, rows = _runtime_with_a_batch(transfer, 6)
    try:
        parts = reader.partitions({"seq": 0}, {"seq": 6})  # a replay: no job from latestOffset
        assert [p.count for p in parts] == [3, 3]
        if transfer == "fetch":
            assert all(p.ipc is None for p in parts)
            assert all(len(pickle.dumps(p)) < 1000 for p in parts)  # the bodies stay in the runner
        else:
            assert all(len(pickle.dumps(p)) > 3000 for p in parts)  # ...or travel with the task
        shipped = [pickle.loads(pickle.dumps(p)) for p in parts]
        got = [r for p in shipped for b in reader.read(p) for r in b.to_pylist()]
        assert [r["seq"] for r in got] == list(range(1, 7))
        assert [r["body"] for r in got] == [r[1] for r in rows]
        reader.commit({"seq": 6})
        if transfer == "fetch":
            assert rt.slices.held() == 0  # committed: the runner lets the rows go
            with pytest.raises(HandoffError, match="does not hold"):
                shipped[0].arrow_ipc()
        else:
            assert rt.slices is None  # no server is opened for inline partitions
            assert [r["seq"] for r in from_ipc(shipped[1].ipc)[0].to_pylist()] == [4, 5, 6]
    finally:
        reader.stop()


def test_a_fetch_waits_for_a_slice_that_is_still_being_built(server):
    import threading
    slice_id = server.reserve(10)
    threading.Timer(0.3, server.fill, args=(slice_id, b"built late")).start()
    assert fetch(server.address, server.secret, slice_id) == b"built late"


def test_a_slice_that_could_not_be_built_fails_its_task_with_the_reason(server):
    slice_id = server.reserve(10)
    server.fill(slice_id, "ArrowInvalid: bad column")
    with pytest.raises(HandoffError, match="could not build slice .*ArrowInvalid: bad column"):
        fetch(server.address, server.secret, slice_id)


def test_an_address_the_runner_cannot_listen_on_names_the_options_that_fix_it():
    with pytest.raises(HandoffError, match="192.0.2.1.*rowServerHost.*rowTransfer=inline"):
        SliceServer("192.0.2.1")  # TEST-NET-1: never an address of this host


def test_an_ipv6_driver_address_serves_too():
    try:
        s = SliceServer("::1")
    except HandoffError as exc:
        pytest.skip(f"no IPv6 loopback on this machine: {exc}")
    try:
        assert s.address[0] == "::1"
        assert fetch(s.address, s.secret, _put(s, 1, b"over v6")) == b"over v6"
    finally:
        s.close()
