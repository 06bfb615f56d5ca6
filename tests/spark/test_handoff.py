"""The runner's slice server and the executors' fetch (`amqp_broker.spark.handoff`), over real
loopback sockets."""

from __future__ import annotations

import datetime as dt
import pickle

import pytest

from amqp_broker.spark.handoff import HandoffError, SliceServer, fetch


@pytest.fixture
def server():
    s = SliceServer("127.0.0.1")
    yield s
    s.close()


def test_a_slice_comes_back_whole_as_often_as_asked_until_its_batch_is_released(server):
    data = bytes(range(256)) * 40_000  # 10 MB: many recv calls
    first = server.put(100, data)
    second = server.put(200, b"later batch")
    for _ in range(2):  # a retried task fetches the same rows again
        assert fetch(server.address, server.secret, first) == data
    server.release_upto(100)
    with pytest.raises(HandoffError, match="no longer holds"):
        fetch(server.address, server.secret, first)
    assert fetch(server.address, server.secret, second) == b"later batch"
    assert server.held() == 1


def test_an_empty_slice_is_served(server):
    assert fetch(server.address, server.secret, server.put(1, b"")) == b""


def test_a_request_without_the_secret_gets_no_rows(server):
    slice_id = server.put(1, b"private rows")
    with pytest.raises(HandoffError, match="connection closed"):
        fetch(server.address, b"\0" * 16, slice_id)
    assert fetch(server.address, server.secret, slice_id) == b"private rows"


def test_a_server_that_is_gone_names_the_address_and_the_inline_option():
    s = SliceServer("127.0.0.1")
    address, secret = s.address, s.secret
    s.close()
    with pytest.raises(HandoffError, match=rf"{address[1]}.*rowTransfer=inline"):
        fetch(address, secret, 1)


def test_a_partition_pickles_without_its_rows_and_reads_them_back(server):
    pytest.importorskip("pyspark")
    from amqp_broker.spark.arrow_rows import from_ipc
    from amqp_broker.spark.source import split_rows

    from amqp_broker.spark.rows import ledger_columns, property_columns

    now = dt.datetime.now(dt.timezone.utc)
    columns = ledger_columns(property_columns(None))
    rows = [("q", b"x" * 1000 + bytes([i]), "", "q", False, i, *columns, now) for i in range(1, 7)]
    seqs = list(range(1, 7))
    parts = split_rows(seqs, rows, 2, server, batch_end=6)
    assert [p.count for p in parts] == [3, 3] and all(p.ipc is None for p in parts)
    shipped = [pickle.loads(pickle.dumps(p)) for p in parts]
    assert all(len(pickle.dumps(p)) < 1000 for p in parts)  # the bodies stay in the runner
    got = [r for p in shipped for b in from_ipc(p.arrow_ipc()) for r in b.to_pylist()]
    assert [r["seq"] for r in got] == seqs and [r["body"] for r in got] == [r[1] for r in rows]
    server.release_upto(6)
    assert server.held() == 0

