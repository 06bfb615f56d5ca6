"""The WAL's commit marks: a damaged record that was already durable (an intact mark after it)
makes `open_store` refuse with `LogFailed`, where a bad record after the last mark is a torn
tail, cut off and logged as before."""

from __future__ import annotations

import logging
import os

import pytest

from quorum.log import LogFailed, open_store


def _wal_of_three_syncs(d: str) -> str:
    s = open_store(d)
    for batch in range(3):
        s.append("a", [(batch * 2 + 1, 1, b"batch%d-first" % batch),
                       (batch * 2 + 2, 1, b"batch%d-second" % batch)])
        s.sync()
    s.close()
    [name] = os.listdir(os.path.join(d, "wal"))
    return os.path.join(d, "wal", name)


def _flip(path: str, needle: bytes) -> None:
    data = bytearray(open(path, "rb").read())
    data[data.index(needle)] ^= 0xFF
    with open(path, "wb") as f:
        f.write(bytes(data))


def test_a_damaged_durable_entry_refuses_to_open(tmp_path):
    wal = _wal_of_three_syncs(str(tmp_path))
    size = os.path.getsize(wal)
    _flip(wal, b"batch0-first")
    with pytest.raises(LogFailed, match="damaged record at offset .* before data that was "
                                        "already durable"):
        open_store(str(tmp_path))
    assert os.path.getsize(wal) == size  # nothing was cut away


def test_a_bad_record_after_the_last_mark_is_a_torn_tail(tmp_path, caplog):
    wal = _wal_of_three_syncs(str(tmp_path))
    _flip(wal, b"batch2-second")
    with caplog.at_level(logging.WARNING, logger="quorum.log.recover"):
        s = open_store(str(tmp_path))
    assert s.state("a").last_index == 5
    assert "cut a torn or corrupt tail" in caplog.text
