"""A damaged record the journal had already made durable stops the node at start-up (it does
not cut everything after it away, as it would a torn tail); a bad record after the last commit
mark is a torn tail: cut off, and logged."""

from __future__ import annotations

import logging

import pytest

from amqp_broker.queues import ClassicQueue, queue_key
from amqp_broker.store import MessageJournal, StoreFatalError

from queues.helpers import msg  # tests/queues (pytest puts tests/ on sys.path)
from store.support import whole


def _journal_of_three_flushes(path) -> tuple[bytes, list[int]]:
    """A journal written in three flushes; its bytes and where each flush's write began."""
    j = MessageJournal(str(path))
    j.open()
    q = ClassicQueue("q", "/", durable=True, journal=j)
    starts = []
    for batch in range(3):
        starts.append((path / "messages.journal").stat().st_size
                      if (path / "messages.journal").exists() else 0)
        for i in range(2):
            q.publish(msg(b"batch%d-%d" % (batch, i), persistent=True), 0)
        j.flush_sync()
    j.close()
    return (path / "messages.journal").read_bytes(), starts


def _flip(path, offset: int, name: str = "messages.journal") -> None:
    data = bytearray((path / name).read_bytes())
    data[offset] ^= 0xFF
    (path / name).write_bytes(bytes(data))


def _bodies(path) -> list[bytes]:
    j = MessageJournal(str(path))
    recovered = j.open()
    j.close()
    return [m.body for _, m, _ in whole(recovered.get(queue_key("/", "q"), []))]


def test_a_damaged_durable_record_refuses_to_start(tmp_path):
    data, starts = _journal_of_three_flushes(tmp_path)
    _flip(tmp_path, starts[0] + 20)  # inside the first flush's first record: long durable
    with pytest.raises(StoreFatalError, match=r"damaged record at offset 0, before data that "
                                              r"was already durable"):
        MessageJournal(str(tmp_path)).open()
    assert len((tmp_path / "messages.journal").read_bytes()) == len(data)  # nothing cut away


def test_a_bad_record_after_the_last_commit_mark_is_a_torn_tail(tmp_path, caplog):
    data, starts = _journal_of_three_flushes(tmp_path)
    _flip(tmp_path, len(data) - 3)  # inside the last flush's last record
    with caplog.at_level(logging.WARNING, logger="amqp_broker.store.journal"):
        assert _bodies(tmp_path) == [b"batch0-0", b"batch0-1", b"batch1-0", b"batch1-1",
                                     b"batch2-0"]
    assert "cut a torn tail of" in caplog.text


def test_a_compacted_file_is_checked_the_same_way(tmp_path):
    _journal_of_three_flushes(tmp_path)
    j = MessageJournal(str(tmp_path))
    j.open()
    j.flush_sync(compact=True)  # the live set copied to a new segment, and a commit mark
    j.close()
    assert not (tmp_path / "messages.journal").exists()
    assert _bodies(tmp_path) == [b"batch%d-%d" % (b, i) for b in range(3) for i in range(2)]
    _flip(tmp_path, 20, "messages.journal.1")
    with pytest.raises(StoreFatalError, match="damaged record"):
        MessageJournal(str(tmp_path)).open()


def test_damage_at_the_end_of_an_older_segment_refuses_to_start(tmp_path):
    """Only the newest segment file can end in a torn write: appends go to a new one only
    after the older one's last write was made durable."""
    j = MessageJournal(str(tmp_path), segment_bytes=1)   # a new segment file every flush
    j.open()
    q = ClassicQueue("q", "/", durable=True, journal=j)
    for batch in range(3):
        q.publish(msg(b"batch%d" % batch, persistent=True), 0)
        j.flush_sync()
    j.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "messages.journal", "messages.journal.1", "messages.journal.2"]
    size = (tmp_path / "messages.journal.1").stat().st_size
    _flip(tmp_path, size - 3, "messages.journal.1")   # its last (and only) record
    with pytest.raises(StoreFatalError, match="damaged record at offset 0, before data that "
                                              "was already durable \\(a newer segment\\)"):
        MessageJournal(str(tmp_path)).open()
    assert (tmp_path / "messages.journal.1").stat().st_size == size   # nothing cut away
