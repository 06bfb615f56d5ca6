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


def _flip(path, offset: int) -> None:
    data = bytearray((path / "messages.journal").read_bytes())
    data[offset] ^= 0xFF
    (path / "messages.journal").write_bytes(bytes(data))


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
    j.flush_sync(compact=True)  # the live set rewritten, ending with a commit mark
    j.close()
    assert _bodies(tmp_path) == [b"batch%d-%d" % (b, i) for b in range(3) for i in range(2)]
    _flip(tmp_path, 20)
    with pytest.raises(StoreFatalError, match="damaged record"):
        MessageJournal(str(tmp_path)).open()
