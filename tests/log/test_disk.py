"""`OsDisk.replace_file`, the node's one atomic write-and-fsync (log segments, snapshots, WAL
heads, the broker's store and quorum catalog), under the crash model of `CrashDisk`."""

import os

from quorum.log.disk import CrashDisk, OsDisk


def _read(path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def test_replace_writes_all_chunks_and_returns_the_size(tmp_path):
    path = str(tmp_path / "f")
    assert OsDisk().replace_file(path, (b"ab", b"", b"cde")) == 5
    assert _read(path) == b"abcde"
    assert OsDisk().replace_file(path, [b"x"]) == 1
    assert _read(path) == b"x" and os.listdir(tmp_path) == ["f"]


def test_a_stale_tmp_file_is_not_appended_to(tmp_path):
    path = str(tmp_path / "f")
    with open(path + ".tmp", "wb") as f:
        f.write(b"left by a crash")
    OsDisk().replace_file(path, (b"new",))
    assert _read(path) == b"new"


def test_crash_keeps_old_or_new_never_a_mix(tmp_path):
    path = str(tmp_path / "f")
    disk = CrashDisk()
    disk.replace_file(path, (b"old",))
    disk.replace_file(path, (b"new",), sync_dir=False)  # rename not durable yet
    disk.simulate_crash()
    assert _read(path) == b"old"
    disk.replace_file(path, (b"new",))
    disk.simulate_crash()
    assert _read(path) == b"new"


def test_the_injected_fsync_is_used_once(tmp_path):
    calls = []
    OsDisk(fdatasync=lambda fd: calls.append(fd)).replace_file(str(tmp_path / "f"), (b"x",))
    assert len(calls) == 1
