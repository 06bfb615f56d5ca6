"""The synchronous log core: append, recover, torn tails, corrupt records, rollover, snapshots."""

from __future__ import annotations

import logging
import os
import shutil

import pytest

from quorum.log import LogConfig, LogError, StoredSnapshot, open_store
from quorum.log.disk import ALLOCATE_STEP
from quorum.log.records import COMMIT_MARK, WAL_MAGIC

SMALL = LogConfig(wal_max_size_bytes=4096, segment_max_entries=16)


def wal_files(d: str) -> list[str]:
    return sorted(os.path.join(d, "wal", f) for f in os.listdir(os.path.join(d, "wal")))


def fill(store, group: str, lo: int, hi: int, term: int = 1, tag: bytes = b"") -> None:
    for i in range(lo, hi + 1):
        store.append(group, [(i, term, tag + b"e%d" % i)])


def test_append_sync_recover(tmp_path):
    d = str(tmp_path)
    s = open_store(d)
    fill(s, "a", 1, 5)
    s.append("b", [(1, 2, b"x"), (2, 2, b"y")])
    s.set_hard_state("a", 4, "n2", 3)
    s.sync()
    s.close()

    r = open_store(d)
    st = r.state("a")
    assert (st.last_index, st.last_term, st.term, st.vote, st.commit) == (5, 1, 4, "n2", 3)
    assert r.entries("a", 2, 4) == [(2, 1, b"e2"), (3, 1, b"e3"), (4, 1, b"e4")]
    assert r.entries("b", 1, 2) == [(1, 2, b"x"), (2, 2, b"y")]
    assert r.group_names() == ["a", "b"]


def test_unsynced_writes_are_not_recovered(tmp_path):
    d = str(tmp_path)
    s = open_store(d)
    fill(s, "a", 1, 3)
    s.sync()
    fill(s, "a", 4, 6)  # queued, never written
    s.close()
    assert open_store(d).state("a").last_index == 3


def test_gap_is_refused(tmp_path):
    s = open_store(str(tmp_path))
    fill(s, "a", 1, 2)
    with pytest.raises(LogError):
        s.append("a", [(4, 1, b"gap")])
    with pytest.raises(LogError):
        s.append("a", [(3, 1, b"x"), (5, 1, b"y")])


def test_overwrite_conflicting_suffix(tmp_path):
    d = str(tmp_path)
    s = open_store(d)
    fill(s, "a", 1, 6, term=1)
    s.append("a", [(4, 2, b"n4"), (5, 2, b"n5")])
    s.truncate("a", 6)  # no-op: already gone
    s.sync()
    s.close()
    r = open_store(d)
    assert r.state("a").last_index == 5
    assert r.entries("a", 3, 5) == [(3, 1, b"e3"), (4, 2, b"n4"), (5, 2, b"n5")]


def test_truncate_marker_survives_restart(tmp_path):
    d = str(tmp_path)
    s = open_store(d)
    fill(s, "a", 1, 6)
    s.sync()
    s.truncate("a", 3)
    s.sync()
    s.close()
    r = open_store(d)
    assert r.state("a").last_index == 2
    assert r.term("a", 3) is None


def _base_and_last_record(tmp_path):
    """A WAL holding 3 synced entries, and the byte range of one more record after them."""
    d = str(tmp_path / "base")
    s = open_store(d)
    fill(s, "g", 1, 3)
    s.sync()
    s.close()  # an open WAL has space allocated ahead; closing cuts it
    base = os.path.getsize(wal_files(d)[0])
    s = open_store(d)
    s.append("g", [(4, 1, b"the last record")])
    s.sync()
    s.close()
    full = os.path.getsize(wal_files(d)[0])
    return d, base, full


def test_torn_tail_truncated_at_every_offset(tmp_path):
    d, base, full = _base_and_last_record(tmp_path)
    original = open(wal_files(d)[0], "rb").read()
    for cut in range(base, full):
        work = str(tmp_path / f"cut{cut}")
        shutil.copytree(d, work)
        with open(wal_files(work)[0], "wb") as f:
            f.write(original[:cut])
        r = open_store(work)
        assert r.state("g").last_index == 3, cut
        # the torn write began with a commit mark (everything before it was synced): when
        # the mark is whole it stays, as part of the intact prefix
        assert original[base:base + len(COMMIT_MARK)] == COMMIT_MARK
        kept = base + len(COMMIT_MARK) if cut >= base + len(COMMIT_MARK) else base
        assert os.path.getsize(wal_files(work)[0]) == kept, cut
        # the log keeps working after the cut: a new record lands where the torn one was
        r.append("g", [(4, 2, b"after")])
        r.sync()
        r.close()
        assert open_store(work).entries("g", 4, 4) == [(4, 2, b"after")]
        shutil.rmtree(work)


def test_space_allocated_ahead_is_not_a_torn_tail(tmp_path, caplog):
    """The open WAL has space allocated ahead of its writes (cheaper fdatasyncs); a crash
    leaves that space as zeros after the last record. Recovery keeps every record, cuts the
    zeros without calling them a torn write, and the log goes on from there."""
    d = str(tmp_path / "live")
    s = open_store(d)
    fill(s, "g", 1, 3)
    s.sync()
    wal = wal_files(d)[0]
    assert os.path.getsize(wal) >= ALLOCATE_STEP
    crashed = str(tmp_path / "crashed")
    shutil.copytree(d, crashed)  # the files as a crash would leave them
    s.close()
    clean = os.path.getsize(wal)
    assert clean < ALLOCATE_STEP  # a clean close cuts the allocated space

    with caplog.at_level(logging.WARNING, logger="quorum.log.recover"):
        r = open_store(crashed)
    assert r.entries("g", 1, 3) == [(i, 1, b"e%d" % i) for i in (1, 2, 3)]
    assert not caplog.records, [rec.getMessage() for rec in caplog.records]
    assert os.path.getsize(wal_files(crashed)[0]) == clean
    r.append("g", [(4, 1, b"after")])
    r.sync()
    r.close()
    assert open_store(crashed).entries("g", 3, 4) == [(3, 1, b"e3"), (4, 1, b"after")]


@pytest.mark.parametrize("where", ["last", "middle"])
def test_corrupt_crc_ends_the_valid_prefix(tmp_path, where):
    d, base, full = _base_and_last_record(tmp_path)
    path = wal_files(d)[0]
    data = bytearray(open(path, "rb").read())
    if where == "last":
        data[full - 2] ^= 0xFF
        expect = 3
    else:
        data[len(WAL_MAGIC) + 12] ^= 0x01  # inside the first record's body
        expect = 0
    open(path, "wb").write(bytes(data))
    r = open_store(d)
    assert r.state("g").last_index == expect
    # the damaged write's leading commit mark is intact, so it stays
    start = base if where == "last" else len(WAL_MAGIC)
    assert data[start:start + len(COMMIT_MARK)] == COMMIT_MARK
    assert os.path.getsize(path) == start + len(COMMIT_MARK)


def test_rollover_moves_entries_to_segments(tmp_path):
    d = str(tmp_path)
    s = open_store(d, SMALL)
    for i in range(1, 201):
        s.append("a", [(i, 1, b"a" * 40)])
        s.append("b", [(i, 2, b"b%d" % i)])
        s.sync()
    before = {g: s.entries(g, 1, 200) for g in ("a", "b")}
    assert len(wal_files(d)) == 1
    assert not wal_files(d)[0].endswith("0000000000000001.wal")  # rolled at least once
    for gdir in os.listdir(os.path.join(d, "groups")):
        for name in os.listdir(os.path.join(d, "groups", gdir)):
            first, last = (int(x) for x in name[:-4].split("-")[1:])
            assert last - first + 1 <= SMALL.segment_max_entries
    s.close()
    r = open_store(d, SMALL)
    assert {g: r.entries(g, 1, 200) for g in ("a", "b")} == before
    assert r.term("a", 7) == 1 and r.term("b", 150) == 2


def test_overwrite_across_segments_and_rollover(tmp_path):
    d = str(tmp_path)
    s = open_store(d, SMALL)
    fill(s, "a", 1, 100, term=1, tag=b"x" * 60)
    s.sync()
    s.sync()
    s.append("a", [(40, 2, b"new40")])
    fill(s, "a", 41, 45, term=2, tag=b"n")
    for _ in range(3):  # push the overwrite itself into segments
        fill(s, "z", s.state("z").last_index + 1, s.state("z").last_index + 60, tag=b"p" * 60)
        s.sync()
    s.close()
    r = open_store(d, SMALL)
    assert r.state("a").last_index == 45
    got = r.entries("a", 38, 45)
    assert [e[1] for e in got] == [1, 1, 2, 2, 2, 2, 2, 2]
    assert got[2] == (40, 2, b"new40")


def test_snapshot_compacts_and_deletes_segments(tmp_path):
    d = str(tmp_path)
    s = open_store(d, SMALL)
    fill(s, "a", 1, 120, tag=b"y" * 50)
    s.sync()
    s.save_snapshot("a", StoredSnapshot(100, 1, b"meta", b"state"))
    for _ in range(2):  # rollovers delete segments below the snapshot
        fill(s, "a", s.state("a").last_index + 1, s.state("a").last_index + 80, tag=b"y" * 50)
        s.sync()
    gdir = os.path.join(d, "groups", "a".encode().hex())
    for name in os.listdir(gdir):
        if name.endswith(".seg"):
            assert int(name[:-4].split("-")[2]) > 100, name
    s.close()
    r = open_store(d, SMALL)
    st = r.state("a")
    assert (st.first_index, st.snapshot_index, st.snapshot_term) == (101, 100, 1)
    assert r.term("a", 100) == 1 and r.term("a", 99) is None
    assert r.read_snapshot("a") == StoredSnapshot(100, 1, b"meta", b"state")
    assert r.entries("a", 101, 102)[0][0] == 101
    with pytest.raises(LogError):
        r.entries("a", 99, 101)


def test_installed_snapshot_discards_the_log(tmp_path):
    d = str(tmp_path)
    s = open_store(d, SMALL)
    fill(s, "a", 1, 30, term=1)
    s.sync()
    s.save_snapshot("a", StoredSnapshot(50, 3, b"", b"leader state"), discard=True)
    s.append("a", [(51, 3, b"next")])
    s.sync()
    s.close()
    r = open_store(d, SMALL)
    st = r.state("a")
    assert (st.first_index, st.last_index, st.last_term) == (51, 51, 3)
    assert r.entries("a", 51, 51) == [(51, 3, b"next")]


def test_append_below_snapshot_is_refused(tmp_path):
    s = open_store(str(tmp_path))
    fill(s, "a", 1, 10)
    s.save_snapshot("a", StoredSnapshot(8, 1))
    with pytest.raises(LogError):
        s.append("a", [(8, 2, b"x")])
    with pytest.raises(LogError):
        s.truncate("a", 5)


def test_segment_max_entries_bounds():
    with pytest.raises(ValueError):
        LogConfig(segment_max_entries=65536)
    assert LogConfig().segment_max_entries == 4096


def test_group_ids_with_odd_characters(tmp_path):
    d = str(tmp_path)
    s = open_store(d, SMALL)
    name = "vhost/%2f queue ünï"
    fill(s, name, 1, 80, tag=b"q" * 60)
    s.sync()
    s.close()
    assert open_store(d, SMALL).entries(name, 80, 80) == [(80, 1, b"q" * 60 + b"e80")]


def test_truncation_survives_the_rollover_that_deletes_its_wal(tmp_path):
    # entries reach segments, get truncated, then the WAL holding the truncation is replaced:
    # only the new WAL's checkpoint still says where the log ends
    d = str(tmp_path)
    s = open_store(d, SMALL)
    fill(s, "a", 1, 10)
    fill(s, "pad", 1, 80, tag=b"p" * 60)
    s.sync()
    s.truncate("a", 5)
    s.sync()
    fill(s, "pad", 81, 160, tag=b"p" * 60)
    s.sync()
    s.close()
    r = open_store(d, SMALL)
    assert r.state("a").last_index == 4
    assert r.entries("a", 1, 4) == [(i, 1, b"e%d" % i) for i in range(1, 5)]


def test_deleted_group_is_gone_after_restart(tmp_path):
    d = str(tmp_path)
    s = open_store(d, SMALL)
    fill(s, "old-queue", 1, 120, tag=b"z" * 50)
    fill(s, "keep", 1, 3)
    s.sync()
    s.save_snapshot("old-queue", StoredSnapshot(50, 1, b"", b"state"))
    s.sync()
    gdir = os.path.join(d, "groups", "old-queue".encode().hex())
    assert os.listdir(gdir)  # segments and a snapshot
    s.delete_group("old-queue")
    with pytest.raises(LogError):
        s.append("old-queue", [(121, 1, b"late")])
    s.sync()
    assert not os.path.exists(gdir)
    assert s.group_names() == ["keep"]
    with pytest.raises(LogError):  # ids are never reused
        s.append("old-queue", [(1, 1, b"again")])
    s.close()
    r = open_store(d, SMALL)
    assert r.group_names() == ["keep"]
    assert r.entries("keep", 1, 3) == [(i, 1, b"e%d" % i) for i in range(1, 4)]


def test_delete_not_yet_durable_survives_a_crash(tmp_path):
    from quorum.log import CrashDisk

    d = str(tmp_path)
    disk = CrashDisk()
    s = open_store(d, SMALL, disk)
    fill(s, "q", 1, 5)
    s.sync()
    s.delete_group("q")  # queued, never synced
    s.close()
    disk.simulate_crash(torn=False)
    r = open_store(d, SMALL)
    assert r.state("q").last_index == 5


def test_delete_recorded_in_wal_removes_files_found_at_recovery(tmp_path):
    d = str(tmp_path)
    s = open_store(d, SMALL)
    fill(s, "q", 1, 100, tag=b"y" * 50)
    s.sync()
    gdir = os.path.join(d, "groups", "q".encode().hex())
    s.delete_group("q")
    batch, upto = s.take_batch()
    s.write_batch(batch)  # the DELETE is durable, then the node dies before removing files
    s.close()
    assert os.path.exists(gdir)
    r = open_store(d, SMALL)
    assert not os.path.exists(gdir)
    assert "q" not in r.group_names()


def test_a_batch_framed_in_pieces_is_the_records_one_after_another():
    """The writer frames entries from (head, payload) pairs: a large payload is a piece of its
    own, small records are joined; the bytes are the records as `encode_entry` makes them."""
    from quorum.log.records import (COMMIT_MARK, EntryRec, encode_entry, encode_truncate,
                                    entry_head, entry_prefix, scan, wal_pieces)

    prefix = entry_prefix(b"grp")
    big, small = b"p" * 70_000, b"s" * 10
    batch = [(entry_head(prefix, 7, 3), big), encode_truncate(b"grp", 9),
             (entry_head(prefix, 8, 3), small), (entry_head(prefix, 9, 3), b"")]
    pieces = wal_pieces(batch, COMMIT_MARK)
    assert any(p is big for p in pieces)  # written from where it is, not copied
    data = b"".join(pieces)
    assert data == COMMIT_MARK + encode_entry(b"grp", 7, 3, big) + encode_truncate(b"grp", 9) \
        + encode_entry(b"grp", 8, 3, small) + encode_entry(b"grp", 9, 3, b"")
    records, end = scan(data)
    assert end == len(data)
    assert [(r.index, bytes(r.payload)) for r in records if type(r) is EntryRec] == [
        (7, big), (8, small), (9, b"")]


def test_a_payload_given_in_pieces_is_written_read_and_recovered_as_its_bytes_joined(tmp_path):
    """An entry's payload may be pieces (`disk.Payload`: the Raft driver leaves a message body
    out of the entry's encoding, `raft.entry_pieces`): the WAL frames and writes them without
    joining (the body is a piece of the write), and the memory table, the segments written at a
    rollover and the recovered WAL give back the joined bytes."""
    from quorum.log.records import (COMMIT_MARK, encode_entry, entry_head, entry_prefix,
                                    wal_pieces)

    body = bytes(range(256)) * 300
    split = (b"\x95\x01", body, b"\x00")
    joined = b"".join(split)
    head = entry_head(entry_prefix(b"grp"), 4, 2)
    pieces = wal_pieces([(head, split)], COMMIT_MARK)
    assert any(p is body for p in pieces)
    assert b"".join(pieces) == COMMIT_MARK + encode_entry(b"grp", 4, 2, joined)

    d = str(tmp_path)
    config = LogConfig(wal_max_size_bytes=1 << 30, segment_max_entries=64, mem_max_bytes=1 << 20)
    s = open_store(d, config)
    s.append("a", [(1, 1, split), (2, 1, b"small"), (3, 1, split)])
    s.sync()
    assert s.entries("a", 1, 3) == [(1, 1, joined), (2, 1, b"small"), (3, 1, joined)]
    s.close()
    r = open_store(d, config)  # from the WAL
    assert r.entries("a", 1, 3) == [(1, 1, joined), (2, 1, b"small"), (3, 1, joined)]
    for i in range(4, 40):  # past mem_max_bytes: the memory table goes to a segment file
        r.append("a", [(i, 1, split)])
        r.sync()
    assert r.groups["a"].segments
    assert r.entries("a", 1, 39) == [(1, 1, joined), (2, 1, b"small"),
                                     *[(i, 1, joined) for i in range(3, 40)]]
    r.close()
    assert open_store(d, config).entries("a", 1, 39)[-1] == (39, 1, joined)

def test_memory_tables_holding_mem_max_bytes_roll_the_wal_over(tmp_path):
    """Memory tables keep every payload until a rollover: past `mem_max_bytes` of entries
    (payloads plus a per-entry overhead) the WAL rolls over, well before its size limit, and
    the entries are then read from segments."""
    d = str(tmp_path)
    config = LogConfig(wal_max_size_bytes=1 << 30, segment_max_entries=64, mem_max_bytes=64 * 1024)
    s = open_store(d, config)
    for i in range(1, 41):
        s.append("a", [(i, 1, bytes([i]) * 4096)])
        s.sync()
    assert s.statistics()["mem_bytes"] <= config.mem_max_bytes
    held = sum(len(p) for m in s.groups["a"].mems for _, p in m.items)
    assert held <= config.mem_max_bytes
    assert s.groups["a"].segments  # rolled over into segment files
    assert [p[0] for _, _, p in s.entries("a", 1, 40)] == list(range(1, 41))
    # many small entries count too: the per-entry overhead rolls them over
    for i in range(41, 2041):
        s.append("a", [(i, 1, b"x")])
        s.sync()
    assert len(s.groups["a"].mems[-1].items) < 1000
    s.close()
    r = open_store(d, config)
    assert len(r.entries("a", 1, 2040)) == 2040


def test_a_torn_write_after_two_commit_marks_is_cut_not_taken_for_damage(tmp_path):
    """Commit marks count as part of the intact prefix: after [entry][mark][mark][torn entry]
    recovery cuts the torn entry. (It used to end the prefix before the marks, take the
    second mark for durable data after damage, and refuse to start.)"""
    from quorum.log.records import COMMIT_MARK, encode_entry, scan

    d = str(tmp_path)
    open_store(d, SMALL).close()
    wal = os.path.join(d, "wal", sorted(os.listdir(os.path.join(d, "wal")))[-1])
    torn = encode_entry(b"q", 2, 1, b"second")[:-3]
    with open(wal, "ab") as f:
        f.write(encode_entry(b"q", 1, 1, b"first") + COMMIT_MARK + COMMIT_MARK + torn)
    data = open(wal, "rb").read()
    assert scan(data, 8)[1] == len(data) - len(torn)
    s = open_store(d, SMALL)
    assert s.entries("q", 1, 1) == [(1, 1, b"first")]
    assert s.state("q").last_index == 1


def test_the_wal_drops_synced_pages_behind_a_trail_from_the_page_cache(tmp_path):
    """What the WAL wrote and synced more than the trail (32 MiB) before its end is dropped from
    the page cache in contiguous page-aligned steps of 4 MiB or more, from the start of each WAL
    file. The entries are all recovered: only clean, synced pages are dropped."""
    from quorum.log.disk import OsDisk

    class Recording(OsDisk):
        def __init__(self) -> None:
            super().__init__()
            self.drops: list[tuple[str, int, int]] = []
            self.sizes: list[int] = []   # the file's size at each drop

        def drop_cached(self, fd: int, start: int, stop: int) -> None:
            self.drops.append((os.readlink(f"/proc/self/fd/{fd}"), start, stop))
            self.sizes.append(os.fstat(fd).st_size)
            super().drop_cached(fd, start, stop)

    disk = Recording()
    d = str(tmp_path)
    config = LogConfig(wal_max_size_bytes=60 << 20, mem_max_bytes=60 << 20)
    s = open_store(d, config, disk)
    body = os.urandom(1 << 20)
    for i in range(1, 101):  # 100 synced batches of 1 MiB: a rollover past 60 MiB
        s.append("a", [(i, 1, body[:-8] + b"%08d" % i)])
        s.sync()
    for (_, _, stop), size in zip(disk.drops, disk.sizes):
        # the newest 32 MiB stay; a drop comes as soon as a 4 MiB step is due (1 MiB batches)
        assert size - (32 << 20) - (4 << 20) - (1 << 20) <= stop <= size - (32 << 20)
    names = sorted({name for name, _, _ in disk.drops})
    assert len(names) == 2   # both WAL files dropped pages
    for name in names:
        drops = [(start, stop) for n, start, stop in disk.drops if n == name]
        assert drops[0][0] == 0   # each file from its start
        assert all(a[1] == b[0] for a, b in zip(drops, drops[1:]))   # contiguous
        assert all(stop % 4096 == 0 and stop - start >= 4 << 20 for start, stop in drops)
    s.close()
    r = open_store(d, config)
    assert [e[2][-8:] for e in r.entries("a", 1, 100)] == [b"%08d" % i for i in range(1, 101)]
    r.close()
