"""Metadata store: survives reopen, deletes stick, torn tail ignored, compaction keeps content,
every change is fsynced before returning, fsync failure is fatal."""

import os

import msgspec
import pytest

from amqp_broker.store import BINDING, EXCHANGE, QUEUE, VHOST, MetadataStore, StoreFatalError
from amqp_broker.store.records import frame


def reopen(path, **kw):
    s = MetadataStore(str(path), **kw)
    s.open()
    return s


def test_survives_restart(tmp_path):
    s = reopen(tmp_path)
    s.put(VHOST, "/", {"description": ""})
    s.put(QUEUE, ["/", "q1"], {"durable": True, "arguments": {"x-max-length": 5}})
    s.put(EXCHANGE, ["/", "ex"], {"type": "topic"})
    s.put(BINDING, ["/", "ex", "queue", "q1", "a.*", {}], {})
    s.put(QUEUE, ["/", "q2"], {"durable": True, "arguments": {}})
    s.delete(QUEUE, ["/", "q2"])
    s.delete(QUEUE, ["/", "never"])  # absent: nothing happens
    s.close()
    s2 = reopen(tmp_path)
    assert s2.items(QUEUE) == [(["/", "q1"], {"durable": True, "arguments": {"x-max-length": 5}})]
    assert s2.get(EXCHANGE, ["/", "ex"]) == {"type": "topic"}
    assert s2.get(VHOST, "/") == {"description": ""}
    assert len(s2.items(BINDING)) == 1
    assert s2.get(QUEUE, ["/", "q2"]) is None


def test_put_replaces(tmp_path):
    s = reopen(tmp_path)
    s.put(QUEUE, "q", 1)
    s.put(QUEUE, "q", 2)
    s.close()
    assert reopen(tmp_path).items(QUEUE) == [("q", 2)]


def test_torn_tail_is_ignored(tmp_path):
    s = reopen(tmp_path)
    s.put(QUEUE, "a", 1)
    s.close()
    path = os.path.join(tmp_path, "metadata.log")
    with open(path, "ab") as f:
        f.write(frame(msgspec.msgpack.encode(("put", QUEUE, "b", 2)))[:-3])  # cut short
    s2 = reopen(tmp_path)
    assert s2.items(QUEUE) == [("a", 1)]
    s2.put(QUEUE, "c", 3)  # appends after the rewritten, clean file
    s2.close()
    assert reopen(tmp_path).items(QUEUE) == [("a", 1), ("c", 3)]


def test_each_change_is_fsynced_and_compaction_keeps_content(tmp_path):
    calls = []

    def fsync(fd):
        calls.append(fd)
        os.fsync(fd)

    s = reopen(tmp_path, fsync=fsync, compact_min_records=10)
    base = len(calls)
    for i in range(30):
        s.put(QUEUE, "tmp", i)
    s.put(QUEUE, "keep", "k")
    assert len(calls) - base >= 31  # one per change (+ rewrites)
    assert s.statistics()["records"] <= 12  # compacted along the way
    s.close()
    assert reopen(tmp_path).items(QUEUE) == [("tmp", 29), ("keep", "k")]


def test_fsync_error_is_fatal(tmp_path):
    s = reopen(tmp_path)

    def broken(fd):
        raise OSError(5, "EIO")

    s._fsync = broken
    with pytest.raises(StoreFatalError):
        s.put(QUEUE, "q", 1)
