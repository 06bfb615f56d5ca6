"""Small durable-file helpers used by the metadata store and the journal.

Who calls it: `metadata.py`, `journal.py`. These run in a worker thread or at startup, never on
the trio thread's hot path. Every failure becomes `StoreFatalError`. The file operations are
`quorum.log.disk.OsDisk`'s (one atomic replace for the whole node), with the store's fsync.
"""

from __future__ import annotations

import os
from typing import Callable

from amqp_broker.store.errors import StoreFatalError
from quorum.log.disk import OsDisk, drop_cached

__all__ = ["FsyncFn", "fsync_dir", "atomic_replace", "read_file", "truncate", "append",
           "drop_cached"]

FsyncFn = Callable[[int], None]


def fsync_dir(directory: str) -> None:
    """Make a create/rename in `directory` durable."""
    try:
        OsDisk().fsync_dir(directory)
    except OSError as exc:
        raise StoreFatalError(f"fsync of directory {directory} failed") from exc


def atomic_replace(path: str, chunks: list[bytes], fsync: FsyncFn) -> int:
    """Write `chunks` to `path` atomically: tmp file, fsync, rename over `path`, fsync the dir.

    A crash at any point leaves either the old or the new file whole. Returns the size written.
    """
    try:
        return OsDisk(fsync).replace_file(path, chunks)
    except OSError as exc:
        raise StoreFatalError(f"rewriting {path} failed") from exc


def append(fd: int, pieces: list, fsync: FsyncFn) -> None:
    """Append the buffers `pieces` and make them durable (vectored writes, one fsync)."""
    try:
        disk = OsDisk(fsync)
        disk.write_pieces(fd, pieces)
        disk.fdatasync(fd)
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
