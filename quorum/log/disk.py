"""The file operations the durable log uses, behind one small object so tests can inject faults.

`quorum.log.store`, `segment`, `snapshot` and `recover` do all their IO through a `Disk`.
`OsDisk` is the real thing. Its `replace_file` is the node's one atomic write-and-fsync: the
broker's metadata store and journal (`amqp_broker/store/files.py`) and its quorum queue catalog
(`amqp_broker/cluster/catalog.py`) use it too, through a plain `OsDisk`. `CrashDisk` is the test hook from the design: it remembers how much of each file
has been fsynced and which new names have not had their directory fsynced, so
`simulate_crash()` can throw away exactly what a power cut would; it also has fault points
(fsync raises EIO, fails after N more fsyncs, slow fsync). All of it is off unless a test
builds a `CrashDisk` and passes it to `open_store` / `AsyncLog.open`.
"""

from __future__ import annotations

import errno
import os
import random
import threading
import time
from typing import Callable, Iterable

__all__ = ["Disk", "OsDisk", "CrashDisk", "CacheTrail", "Pieces", "drop_cached", "is_zero_tail"]

_IOV_MAX = 1024  # buffers per writev call (Linux's IOV_MAX)
ALLOCATE_STEP = 1 << 20  # a log file's space is allocated this far ahead of its writes


def is_zero_tail(data: bytes, start: int) -> bool:
    """Whether `data[start:]` is all zero bytes: a log file's allocated space never written
    (`OsDisk.open_log`), not a torn write."""
    return data.count(0, start) == len(data) - start


def drop_cached(fd: int, start: int, stop: int) -> None:
    """Ask the kernel to drop the file's cached pages in [start, stop) (written and synced:
    clean, so nothing is lost). Best effort: a platform without it keeps them."""
    try:
        os.posix_fadvise(fd, start, stop - start, os.POSIX_FADV_DONTNEED)
    except (OSError, AttributeError):
        pass


class CacheTrail:
    """Which pages of a growing append-only file to drop from the page cache: what was written
    and synced more than `trail` bytes before the end, `step` bytes or more at a time, page
    aligned. The kernel then reuses those pages for the next writes instead of taking fresh
    ones; on this VM a page the guest has not used recently costs a host fault when first
    touched, and appending to a growing file ran 2.5x faster with this (bench/quorum_notes.md).
    Used by the WAL (never read back but at recovery) and the classic journal."""

    def __init__(self, trail: int = 32 << 20, step: int = 4 << 20) -> None:
        self.trail = trail
        self.step = step
        self.dropped_to = 0   # the file's pages below this were dropped

    def advance(self, end: int) -> tuple[int, int] | None:
        """The file is synced up to `end`: the range to drop now, if one is due."""
        stop = (end - self.trail) & ~0xFFF
        if stop - self.dropped_to < self.step:
            return None
        span = (self.dropped_to, stop)
        self.dropped_to = stop
        return span

    def restart(self) -> None:
        """A new file (a rollover, a compaction): nothing of it was dropped."""
        self.dropped_to = 0


# A record's payload as the log and the classic journal hold it: its bytes, or pieces whose
# bytes joined are the payload (a message body among them, referenced, never copied into it).
Payload = bytes | tuple[bytes, ...]


def payload_size(payload: Payload) -> int:
    if type(payload) is tuple:
        return sum(map(len, payload))
    return len(payload)  # type: ignore[arg-type]


def joined(payload: Payload) -> bytes:
    """The payload's bytes (a copy of a split one: for the rare reader of a record in memory)."""
    return b"".join(payload) if type(payload) is tuple else payload  # type: ignore[return-value]


class Pieces:
    """The buffers of one vectored write (`OsDisk.write_pieces`), built a record at a time:
    small parts are joined into runs, a part of `OWN_PIECE` bytes or more (a message body)
    becomes a piece of its own and is never copied."""

    OWN_PIECE = 4096

    def __init__(self, first: bytes = b"") -> None:
        self._pieces: list[bytes | bytearray] = []
        self._run = bytearray(first)

    def put(self, data: bytes) -> None:
        if len(data) < self.OWN_PIECE:
            self._run += data
        else:
            self._pieces.append(self._run)
            self._pieces.append(data)
            self._run = bytearray()

    def put_payload(self, payload: Payload) -> None:
        if type(payload) is tuple:
            for piece in payload:
                self.put(piece)
        else:
            self.put(payload)  # type: ignore[arg-type]

    def done(self) -> list[bytes | bytearray]:
        if self._run:
            self._pieces.append(self._run)
            self._run = bytearray()
        return self._pieces


class OsDisk:
    """Plain POSIX file operations. `fdatasync` may be injected (tests count calls with it)."""

    def __init__(self, fdatasync: Callable[[int], None] | None = None) -> None:
        self._fdatasync = fdatasync or os.fdatasync
        self._paths: dict[int, str] = {}
        self._logs: dict[int, list[int]] = {}  # open_log fds: [end written, end allocated]

    # -- files written by the log ----------------------------------------------------------
    def open_append(self, path: str) -> int:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._paths[fd] = path
        return fd

    def open_log(self, path: str) -> int:
        """Open a log file (the WAL, the classic journal) to append to, with its space
        allocated `ALLOCATE_STEP` ahead of the writes. An append that grows the file makes
        each fdatasync write the inode's new size too (a journal commit on ext4); into space
        already allocated it writes the data alone. Measured here, a small write + fdatasync:
        64 -> 35 us of CPU, 152 -> 97 us of wall time. Past what was written the file reads as
        zeros (`is_zero_tail`); `close` cuts that tail."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        end = os.lseek(fd, 0, os.SEEK_END)  # writes go on at the file position
        self._paths[fd] = path
        self._logs[fd] = [end, end]
        return fd

    def write_pieces(self, fd: int, pieces: list) -> int:
        """Write the buffers `pieces` one after another (vectored writes, no joining copy);
        returns the bytes written."""
        views = [memoryview(p) for p in pieces if len(p)]
        total = sum(len(v) for v in views)
        log = self._logs.get(fd)
        if log is not None:
            if log[0] + total > log[1]:
                step = max(ALLOCATE_STEP, total)
                try:
                    os.posix_fallocate(fd, log[1], step)
                    log[1] += step
                except OSError as e:
                    if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                        raise  # ENOSPC: the write would fail too
                    log[1] = 1 << 62  # a file system without it: plain appends
            log[0] += total
        i = 0
        while i < len(views):
            n = os.writev(fd, views[i:i + _IOV_MAX])
            while n:  # skip what went; a short write resumes inside a buffer
                if n >= len(views[i]):
                    n -= len(views[i])
                    i += 1
                else:
                    views[i] = views[i][n:]
                    n = 0
        return total

    def fdatasync(self, fd: int) -> None:
        self._fdatasync(fd)

    def drop_cached(self, fd: int, start: int, stop: int) -> None:
        drop_cached(fd, start, stop)

    def close(self, fd: int) -> None:
        self._paths.pop(fd, None)
        log = self._logs.pop(fd, None)
        try:
            if log is not None and log[0] < log[1] < 1 << 62:
                os.ftruncate(fd, log[0])  # the unused space goes (a crash may leave it: zeros)
        finally:
            os.close(fd)

    def fsync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def replace_file(self, path: str, chunks: Iterable[bytes], sync_dir: bool = True) -> int:
        """Make `path` hold `chunks`, atomically: write ``path.tmp``, fdatasync, rename over
        `path`, fsync the directory. A crash leaves the old or the new file whole, never a mix.

        `sync_dir=False` leaves the rename undurable until the caller fsyncs the directory
        (one fsync for several files). Returns the bytes written. Raises OSError.
        """
        tmp = path + ".tmp"
        self.remove(tmp)  # a crash may have left one; never append to it
        fd = self.open_append(tmp)
        try:
            size = self.write_pieces(fd, list(chunks))
            self.fdatasync(fd)
        finally:
            self.close(fd)
        self.rename(tmp, path)
        if sync_dir:
            self.fsync_dir(os.path.dirname(path) or ".")
        return size

    # -- names ------------------------------------------------------------------------------
    def rename(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def remove(self, path: str) -> None:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def listdir(self, path: str) -> list[str]:
        try:
            return sorted(os.listdir(path))
        except FileNotFoundError:
            return []

    def size(self, path: str) -> int:
        return os.path.getsize(path)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def truncate(self, path: str, size: int) -> None:
        os.truncate(path, size)

    # -- reads ------------------------------------------------------------------------------
    def read_file(self, path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    def pread(self, path: str, offset: int, size: int) -> bytes:
        fd = os.open(path, os.O_RDONLY)
        try:
            return os.pread(fd, size, offset)
        finally:
            os.close(fd)


Disk = OsDisk


class CrashDisk(OsDisk):
    """An `OsDisk` that can forget everything not made durable, and fail or slow down fsync.

    Tracking: for each file written through `open_append`, the size at the last fdatasync; for
    each name created or renamed into place, whether its directory has been fsynced since.
    `simulate_crash()` cuts every file back to its synced size (keeping a random part of the
    unsynced bytes when `torn=True`, like a torn sector write), deletes unsynced new names and
    undoes unsynced renames. Removing a file is treated as durable at once (a removed file that
    reappeared after a crash must be harmless anyway, and the log's recovery makes it so).
    """

    def __init__(
        self,
        fdatasync: Callable[[int], None] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(fdatasync)
        self.fail_fsync = False  # fault point: the next fsyncs raise EIO
        self.fail_after: int | None = None  # fault point: fsyncs that still succeed, then EIO
        self.fsync_delay = 0.0  # fault point: seconds each fsync sleeps (a slow disk)
        self.fsync_count = 0
        self._rng = rng or random.Random(0)
        self._lock = threading.Lock()  # fsync runs in a worker thread
        self._size: dict[str, int] = {}
        self._synced: dict[str, int] = {}
        self._new_names: dict[str, str] = {}  # path -> directory, not yet dir-fsynced
        self._renamed: dict[str, tuple[str, str, bytes | None]] = {}  # dst -> (dir, src, old dst)

    def open_append(self, path: str) -> int:
        existed = os.path.exists(path)
        fd = super().open_append(path)
        self._track(path, existed)
        return fd

    def _track(self, path: str, existed: bool) -> None:
        with self._lock:
            size = os.path.getsize(path)
            self._size[path] = size
            self._synced.setdefault(path, size if existed else 0)
            if not existed:
                self._new_names[path] = os.path.dirname(path)

    def open_log(self, path: str) -> int:
        existed = os.path.exists(path)
        fd = super().open_log(path)
        self._track(path, existed)
        return fd

    def write_pieces(self, fd: int, pieces: list) -> int:
        n = super().write_pieces(fd, pieces)
        self._grew(fd, n)
        return n

    def _grew(self, fd: int, n: int) -> None:
        with self._lock:
            path = self._paths[fd]
            self._size[path] = self._size.get(path, 0) + n

    def _fault(self) -> None:
        if self.fail_after is not None:
            if self.fail_after <= 0:
                self.fail_fsync = True
            self.fail_after -= 1
        if self.fail_fsync:
            raise OSError(errno.EIO, "injected fsync failure")

    def fdatasync(self, fd: int) -> None:
        if self.fsync_delay:
            time.sleep(self.fsync_delay)
        self._fault()
        super().fdatasync(fd)
        with self._lock:
            self.fsync_count += 1
            path = self._paths[fd]
            self._synced[path] = self._size.get(path, 0)

    def fsync_dir(self, path: str) -> None:
        self._fault()
        super().fsync_dir(path)
        with self._lock:
            for name, d in list(self._new_names.items()):
                if d == path:
                    del self._new_names[name]
            for dst, (d, _src, _old) in list(self._renamed.items()):
                if d == path:
                    del self._renamed[dst]

    def rename(self, src: str, dst: str) -> None:
        old = super().read_file(dst) if os.path.exists(dst) else None
        super().rename(src, dst)
        with self._lock:
            for table in (self._size, self._synced):
                if src in table:
                    table[dst] = table.pop(src)
            self._new_names.pop(src, None)
            self._renamed[dst] = (os.path.dirname(dst), src, old)

    def remove(self, path: str) -> None:
        super().remove(path)
        with self._lock:
            for table in (self._size, self._synced, self._new_names, self._renamed):
                table.pop(path, None)

    def truncate(self, path: str, size: int) -> None:
        super().truncate(path, size)
        with self._lock:
            self._size[path] = size
            self._synced[path] = min(self._synced.get(path, size), size)

    def simulate_crash(self, torn: bool = True) -> None:
        """Forget what was not durable. Call only after closing the log that used this disk."""
        with self._lock:
            for dst, (_d, src, old) in self._renamed.items():
                if os.path.exists(dst):
                    os.replace(dst, src)
                if old is not None:
                    with open(dst, "wb") as f:
                        f.write(old)
            for path in self._new_names:
                if os.path.exists(path):
                    os.remove(path)
            for path, synced in self._synced.items():
                if not os.path.exists(path):
                    continue
                size = os.path.getsize(path)
                keep = synced
                if torn and size > synced:
                    keep = synced + self._rng.randrange(0, size - synced + 1)
                os.truncate(path, keep)
            self._size.clear()
            self._synced.clear()
            self._new_names.clear()
            self._renamed.clear()
