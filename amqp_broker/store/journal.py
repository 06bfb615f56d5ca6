"""The message journal: persistent messages of durable classic queues, with group commit.

Who calls it:
- durable `ClassicQueue`s call `enqueued` / `delivered` / `removed` (the `QueueJournal` protocol);
  these only encode a record into an in-memory batch and return its sequence number;
- the server runs `run()` as one task in its nursery: it writes everything appended since the last
  flush with one write and one fdatasync (in `trio.to_thread.run_sync`), then marks that batch
  durable. Publisher confirms wait for that: `await wait_durable(seq)` or
  `call_when_durable(seq, fn)`; `appended_seq` is the number to wait for after a publish;
- at startup, `open()` recovers: intact records are replayed, a torn tail is truncated, and each
  queue's surviving messages come back in msg-id order, flagged redelivered if they had been
  delivered (as RabbitMQ does for classic queues).

Compaction: when the file holds more garbage (acked messages) than live records, the flusher
rewrites the live messages to a new file (tmp + fsync + rename + fsync dir) instead of appending.
The live set snapshot taken at that moment already reflects every record still in the batch, so
that batch is covered by the new file and is simply dropped.

A write, fsync, truncate or rename error raises `StoreFatalError` out of `run()` (the server stops
the node) and out of every pending and later `wait_durable`.

Damage: each write after a successful fsync starts with a commit mark (`journal_codec`), so
recovery tells a torn tail (a bad record with no mark after it: cut off, and logged) from a
damaged record that had been confirmed (a mark after it): `open()` then raises
`StoreFatalError` and the node refuses to start rather than serve what is left.
"""

from __future__ import annotations

import logging
import os
from functools import partial
from typing import Callable, Iterable

import trio

from amqp_broker.queues.message import Message
from amqp_broker.store import files
from amqp_broker.store.errors import StoreFatalError
from amqp_broker.store.journal_codec import (
    COMMIT_MARK,
    DELIVERED,
    REMOVED,
    encode_drop_queue,
    encode_enqueue,
    encode_ids,
    mark_after,
    replay,
)

__all__ = ["MessageJournal", "RecoveredQueues"]

_log = logging.getLogger(__name__)
_FILE = "messages.journal"
_RECORD_OVERHEAD = 40  # framing + msgpack overhead estimate for recovered messages

# queue key -> [(msg_id, message, redelivered)] in msg-id order; feeds ClassicQueue.restore
RecoveredQueues = dict[str, list[tuple[int, Message, bool]]]


class MessageJournal:
    """One journal file in `directory`, shared by every durable classic queue of the node.

    `fsync` is injectable (tests count calls or inject failures); `compact_min_bytes` is the file
    size below which compaction is never worth it.
    """

    def __init__(
        self,
        directory: str,
        *,
        fsync: files.FsyncFn = os.fdatasync,
        compact_min_bytes: int = 64 << 20,
    ) -> None:
        self._dir = directory
        self._path = os.path.join(directory, _FILE)
        self._fsync = fsync
        self._compact_min = compact_min_bytes
        self._fd: int | None = None
        # live persistent messages: queue -> msg_id -> (message, record size); delivered ids
        self._live: dict[str, dict[int, tuple[Message, int]]] = {}
        self._delivered: dict[str, set[int]] = {}
        self._live_bytes = 0
        self._file_bytes = 0
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._seq = 0
        self._durable_seq = 0
        self._durable_event = trio.Event()
        self._callbacks: list[tuple[int, Callable[[], None]]] = []
        self._wakeup: trio.Event | None = None
        self._failed: StoreFatalError | None = None
        self.fsyncs = 0  # number of flushes done (statistics)
        self._mark_next = False  # the next write starts with a commit mark
        self.compactions = 0

    # -- recovery --------------------------------------------------------------------------------
    def open(self) -> RecoveredQueues:
        """Recover the journal (sync, at startup, before `run`). Returns each queue's messages."""
        try:
            os.makedirs(self._dir, exist_ok=True)
            if os.path.exists(self._path + ".tmp"):
                os.unlink(self._path + ".tmp")  # a compaction that never got renamed
        except OSError as exc:
            raise StoreFatalError(f"cannot prepare {self._dir}") from exc
        data = files.read_file(self._path)
        state, valid_end = replay(data)
        if valid_end < len(data):
            mark = mark_after(data, valid_end)
            if mark is not None:
                raise StoreFatalError(
                    f"message journal {self._path}: damaged record at offset {valid_end}, "
                    f"before data that was already durable (a commit mark at offset {mark}); "
                    "refusing to start rather than lose or serve damaged messages. Restore the "
                    "file from a backup, or move it away to start without those messages")
            _log.warning("message journal %s: cut a torn tail of %d bytes at offset %d (a "
                         "write not yet confirmed when the node stopped)", self._path,
                         len(data) - valid_end, valid_end)
            files.truncate(self._path, valid_end, self._fsync)
        self._mark_next = valid_end > 0  # what is on disk now is durable
        del data
        out: RecoveredQueues = {}
        for queue, msgs in state.items():
            live = self._live[queue] = {}
            delivered = self._delivered[queue] = set()
            for msg_id, (msg, was_delivered) in msgs.items():
                size = len(msg.body) + len(msg.properties) + len(queue) + _RECORD_OVERHEAD
                live[msg_id] = (msg, size)
                self._live_bytes += size
                if was_delivered:
                    delivered.add(msg_id)
            out[queue] = [(i, msgs[i][0], msgs[i][1]) for i in sorted(msgs)]
        self._file_bytes = valid_end
        if self._file_bytes >= self._compact_min and 2 * self._live_bytes < self._file_bytes:
            self._rewrite_sync(self._snapshot())
        else:
            self._open_append()
        return out

    def _open_append(self) -> None:
        existed = os.path.exists(self._path)
        try:
            self._fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StoreFatalError(f"cannot open {self._path}") from exc
        if not existed:
            files.fsync_dir(self._dir)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    # -- appends (QueueJournal protocol; trio thread, no IO) ------------------------------------
    @property
    def appended_seq(self) -> int:
        """Sequence number of the last record appended: wait for it to confirm a publish."""
        return self._seq

    @property
    def durable_seq(self) -> int:
        return self._durable_seq

    def _add(self, record: bytes) -> int:
        self._pending.append(record)
        self._pending_bytes += len(record)
        self._seq += 1
        wakeup = self._wakeup
        if wakeup is not None:
            self._wakeup = None
            wakeup.set()
        return self._seq

    def enqueued(self, queue: str, msg_id: int, message: Message) -> int:
        record = encode_enqueue(queue, msg_id, message)
        msgs = self._live.get(queue)
        if msgs is None:
            msgs = self._live[queue] = {}
        msgs[msg_id] = (message, len(record))
        self._live_bytes += len(record)
        return self._add(record)

    def delivered(self, queue: str, msg_ids: Iterable[int]) -> int:
        ids = list(msg_ids)
        self._delivered.setdefault(queue, set()).update(ids)
        return self._add(encode_ids(DELIVERED, queue, ids))

    def removed(self, queue: str, msg_ids: Iterable[int]) -> int:
        ids = list(msg_ids)
        msgs = self._live.get(queue)
        if msgs is not None:
            delivered = self._delivered.get(queue)
            for msg_id in ids:
                entry = msgs.pop(msg_id, None)
                if entry is not None:
                    self._live_bytes -= entry[1]
                if delivered:
                    delivered.discard(msg_id)
        return self._add(encode_ids(REMOVED, queue, ids))

    def drop_queue(self, queue: str) -> int:
        """A durable queue was deleted: forget all its messages (one record)."""
        for _, size in self._live.pop(queue, {}).values():
            self._live_bytes -= size
        self._delivered.pop(queue, None)
        return self._add(encode_drop_queue(queue))

    # -- waiting for durability ------------------------------------------------------------------
    async def wait_durable(self, seq: int) -> None:
        """Return once every record up to `seq` is fdatasync'ed; raise StoreFatalError if the
        journal failed."""
        while self._durable_seq < seq:
            if self._failed is not None:
                raise self._failed
            await self._durable_event.wait()

    def call_when_durable(self, seq: int, fn: Callable[[], None]) -> None:
        """Call `fn()` (from the flusher task) once `seq` is durable; at once if it already is.
        Callbacks must not block; on journal failure they are never called."""
        if seq <= self._durable_seq:
            fn()
        else:
            self._callbacks.append((seq, fn))  # seqs only grow, so the list stays sorted

    def _mark_durable(self, seq: int) -> None:
        self._durable_seq = seq
        event, self._durable_event = self._durable_event, trio.Event()
        event.set()
        callbacks = self._callbacks
        if callbacks:
            n = 0
            while n < len(callbacks) and callbacks[n][0] <= seq:
                n += 1
            if n:
                due, self._callbacks = callbacks[:n], callbacks[n:]
                for _, fn in due:
                    fn()

    # -- the flusher task ------------------------------------------------------------------------
    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Group-commit loop; runs until cancelled. Raises StoreFatalError on any disk error."""
        if self._fd is None:
            raise RuntimeError("MessageJournal.open() was not called")
        task_status.started()
        try:
            while True:
                while not self._pending:
                    self._wakeup = trio.Event()
                    await self._wakeup.wait()
                await self._flush_once()
        except StoreFatalError as exc:
            self._fail(exc)
            raise

    async def _flush_once(self) -> None:
        seq, job = self._take_batch()
        await trio.to_thread.run_sync(job)
        self.fsyncs += 1
        self._mark_durable(seq)

    def flush_sync(self, compact: bool = False) -> None:
        """Write and sync whatever is pending, from a non-async context (clean shutdown, tests);
        `compact` forces a rewrite of the live set. Never call it while `run()` is active."""
        if self._pending or compact:
            seq, job = self._take_batch(compact)
            job()
            self.fsyncs += 1
            self._mark_durable(seq)

    def _take_batch(self, compact: bool = False) -> tuple[int, Callable[[], None]]:
        """Detach the pending batch (trio thread); return its seq and the blocking job that makes
        it durable: an append, or a compaction when garbage dominates the file."""
        seq, size, batch = self._seq, self._pending_bytes, self._pending
        self._pending, self._pending_bytes = [], 0
        total = self._file_bytes + size + (len(COMMIT_MARK) if self._mark_next else 0)
        if compact or (total >= self._compact_min and 2 * self._live_bytes < total):
            # the snapshot covers every record in the batch, so the batch is dropped
            return seq, partial(self._rewrite_sync, self._snapshot())
        self._file_bytes = total  # a failed write stops the node, so counting early is safe
        return seq, partial(self._write_sync, batch)

    def _fail(self, exc: StoreFatalError) -> None:
        self._failed = exc
        self._callbacks.clear()
        self._durable_event.set()  # wake waiters so they see the failure

    # -- worker-thread side ----------------------------------------------------------------------
    def _write_sync(self, batch: list[bytes]) -> None:
        assert self._fd is not None
        data = b"".join(batch)
        if self._mark_next:  # everything before this write was fsynced
            data = COMMIT_MARK + data
        try:
            files.append(self._fd, data, self._fsync)
            self._mark_next = True
        except StoreFatalError as exc:  # say which file
            raise StoreFatalError(f"message journal {self._path}: append/fsync failed") \
                from exc.__cause__

    def _snapshot(self) -> list[tuple[str, list[tuple[int, Message]], list[int]]]:
        """Copy of the live set (trio thread); messages are immutable so this is shallow."""
        return [
            (queue, [(i, m) for i, (m, _) in msgs.items()], sorted(self._delivered.get(queue, ())))
            for queue, msgs in self._live.items()
            if msgs
        ]

    def _rewrite_sync(self, snapshot: list[tuple[str, list[tuple[int, Message]], list[int]]]) -> None:
        chunks: list[bytes] = []
        for queue, msgs, delivered in snapshot:
            chunks.extend(encode_enqueue(queue, msg_id, msg) for msg_id, msg in msgs)
            if delivered:
                chunks.append(encode_ids(DELIVERED, queue, delivered))
        chunks.append(COMMIT_MARK)  # the file is fsynced whole before it replaces the old one
        self.close()
        self._file_bytes = files.atomic_replace(self._path, chunks, self._fsync)
        self._open_append()
        self.compactions += 1

    def statistics(self) -> dict[str, int]:
        return {
            "appended_seq": self._seq,
            "durable_seq": self._durable_seq,
            "file_bytes": self._file_bytes,
            "live_bytes": self._live_bytes,
            "live_messages": sum(len(m) for m in self._live.values()),
            "fsyncs": self.fsyncs,
            "compactions": self.compactions,
        }
