"""Small durable-file helpers used by the metadata store and the journal.

Who calls it: `metadata.py`, `journal.py`. These run in a worker thread or at startup, never on
the trio thread's hot path. Every failure becomes `StoreFatalError`.
"""

from __future__ import annotations

import os
from typing import Callable

from amqp_broker.store.errors import StoreFatalError

__all__ = ["FsyncFn", "fsync_dir", "atomic_replace", "read_file", "truncate", "append"]

FsyncFn = Callable[[int], None]


def fsync_dir(directory: str) -> None:
    """Make a create/rename in `directory` durable."""
    try:
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise StoreFatalError(f"fsync of directory {directory} failed") from exc


def atomic_replace(path: str, chunks: list[bytes], fsync: FsyncFn) -> int:
    """Write `chunks` to `path` atomically: tmp file, fsync, rename over `path`, fsync the dir.

    A crash at any point leaves either the old or the new file whole. Returns the size written.
    """
    tmp = path + ".tmp"
    size = 0
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            for chunk in chunks:
                _write_all(fd, chunk)
                size += len(chunk)
            fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        raise StoreFatalError(f"rewriting {path} failed") from exc
    fsync_dir(os.path.dirname(path) or ".")
    return size


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def append(fd: int, data: bytes, fsync: FsyncFn) -> None:
    """Append `data` and make it durable (one write, one fsync)."""
    try:
        _write_all(fd, data)
        fsync(fd)
    except OSError as exc:
        raise StoreFatalError("append/fsync failed") from exc


def read_file(path: str) -> bytes:
    """The whole file, or b"" when it does not exist."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return b""
    except OSError as exc:
        raise StoreFatalError(f"reading {path} failed") from exc


def truncate(path: str, size: int, fsync: FsyncFn) -> None:
    """Cut a torn tail off `path` and make the new length durable."""
    try:
        fd = os.open(path, os.O_WRONLY)
        try:
            os.ftruncate(fd, size)
            fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise StoreFatalError(f"truncating {path} failed") from exc
