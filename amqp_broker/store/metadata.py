"""Durable metadata: vhosts, durable exchanges, durable queues (with arguments), bindings, and
later users and policies, kept across restarts.

Who calls it: the server / core registry at startup (`open`, then `items(kind)` to rebuild) and on
every declare/delete of a durable entity (`put` / `delete`). Metadata changes are rare, so each
call appends one framed record (`records.py`) and fsyncs before returning: when `put` returns, the
change survives a crash. The calls block on the disk for about one fsync; call them through
`trio.to_thread.run_sync` from async code.

File: an append-only log of msgspec-msgpack records ``["put", kind, key, value]`` or
``["del", kind, key]``. On `open` the log is replayed (a torn tail is ignored) and rewritten
atomically as one "put" per live entry, so it never holds more than one start's garbage; it is also
rewritten when the dead records outnumber the live ones.

Keys and values are anything msgpack can encode (str, int, float, bool, None, bytes, lists,
dicts with str keys); keys are compared by their encoding, and lists come back as lists.
"""

from __future__ import annotations

import os
from typing import Any

import msgspec

from amqp_broker.store import files
from amqp_broker.store.errors import StoreFatalError
from amqp_broker.store.records import frame, scan

__all__ = ["MetadataStore", "VHOST", "EXCHANGE", "QUEUE", "BINDING", "USER", "POLICY"]

# The kinds the broker stores; any other string works too.
VHOST = "vhost"
EXCHANGE = "exchange"
QUEUE = "queue"
BINDING = "binding"
USER = "user"
POLICY = "policy"

_FILE = "metadata.log"
_encode = msgspec.msgpack.encode
_decode = msgspec.msgpack.decode


class MetadataStore:
    """The metadata log in `directory`. Not thread-safe: one caller at a time."""

    def __init__(
        self, directory: str, *, fsync: files.FsyncFn = os.fsync, compact_min_records: int = 1000
    ) -> None:
        self._dir = directory
        self._path = os.path.join(directory, _FILE)
        self._fsync = fsync
        self._compact_min = compact_min_records
        # kind -> encoded key -> (key, value); insertion order = first declaration order
        self._data: dict[str, dict[bytes, tuple[Any, Any]]] = {}
        self._records = 0
        self._fd: int | None = None

    # -- lifecycle -------------------------------------------------------------------------------
    def open(self) -> None:
        """Load the log (ignoring a torn tail), rewrite it compacted, and open it for appends."""
        try:
            os.makedirs(self._dir, exist_ok=True)
        except OSError as exc:
            raise StoreFatalError(f"cannot create {self._dir}") from exc
        payloads, _ = scan(files.read_file(self._path))
        for payload in payloads:
            self._replay(_decode(payload))
        self._rewrite()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _replay(self, record: list[Any]) -> None:
        op, kind, key = record[0], record[1], record[2]
        table = self._data.setdefault(kind, {})
        k = _encode(key)
        if op == "put":
            table[k] = (key, record[3])
        else:
            table.pop(k, None)

    def _rewrite(self) -> None:
        self.close()
        chunks = [
            frame(_encode(("put", kind, key, value)))
            for kind, table in self._data.items()
            for key, value in table.values()
        ]
        files.atomic_replace(self._path, chunks, self._fsync)
        self._records = len(chunks)
        try:
            self._fd = os.open(self._path, os.O_WRONLY | os.O_APPEND)
        except OSError as exc:
            raise StoreFatalError(f"cannot open {self._path}") from exc

    # -- changes ---------------------------------------------------------------------------------
    def put(self, kind: str, key: Any, value: Any) -> None:
        """Create or replace one entry; durable when this returns."""
        self._append(("put", kind, key, value))
        self._data.setdefault(kind, {})[_encode(key)] = (key, value)
        self._maybe_compact()

    def delete(self, kind: str, key: Any) -> None:
        """Remove one entry (no-op record if absent is skipped); durable when this returns."""
        table = self._data.get(kind)
        k = _encode(key)
        if not table or k not in table:
            return
        self._append(("del", kind, key))
        del table[k]
        self._maybe_compact()

    def _append(self, record: tuple[Any, ...]) -> None:
        if self._fd is None:
            raise RuntimeError("MetadataStore.open() was not called")
        files.append(self._fd, [frame(_encode(record))], self._fsync)
        self._records += 1

    def _maybe_compact(self) -> None:
        if self._records > self._compact_min:
            live = sum(len(t) for t in self._data.values())
            if self._records > 2 * live:
                self._rewrite()

    # -- reads -----------------------------------------------------------------------------------
    def get(self, kind: str, key: Any) -> Any | None:
        entry = self._data.get(kind, {}).get(_encode(key))
        return None if entry is None else entry[1]

    def items(self, kind: str) -> list[tuple[Any, Any]]:
        """(key, value) pairs of one kind, in the order they were first stored."""
        return list(self._data.get(kind, {}).values())

    def statistics(self) -> dict[str, int]:
        return {"records": self._records, **{k: len(t) for k, t in self._data.items()}}
