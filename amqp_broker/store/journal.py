"""The message journal: persistent messages of durable classic queues, with group commit.

Who calls it:
- durable `ClassicQueue`s call `enqueued` / `delivered` / `removed` (the `QueueJournal` protocol);
  these only encode a record into an in-memory batch and return its sequence number;
- the server runs `run()` as one task in its nursery: it writes everything appended since the last
  flush with one write and one fdatasync (a small batch on the trio thread while the disk is
  fast, else in a worker thread: `quorum.log.diskjobs.DiskJobs`), then marks that batch
  durable. Publisher confirms wait for that: `await wait_durable(seq)` or
  `call_when_durable(seq, fn)`; `appended_seq` is the number to wait for after a publish.
  A batch of removals alone (acks) waits up to `REMOVALS_DELAY` for company: nobody waits on
  them, and at a low message rate they would otherwise cost an fsync of their own per message
  (a crash then brings back what was acked in the last few ms, flagged redelivered: RabbitMQ's
  at-least-once too);
- at startup, `open()` recovers: the file is streamed (never loaded whole) to find the live
  records, a torn tail is truncated, and each queue's surviving messages come back in msg-id
  order, flagged redelivered if they had been delivered (as RabbitMQ does for classic queues),
  read from the file as the queue takes them (`RecoveredMessages`: a summary of each, so that a
  backlog the queue pages out again is never decoded whole).

Memory: the journal keeps no message, only which records are live and where (`journal_index`:
12 bytes a message), so a classic queue that pages its messages out of memory really frees
them; `read` gives a paged-out persistent message back (from the file, or from the batch not
yet written).

Compaction: when the file holds more garbage (acked messages) than live records, the flusher
writes a new file instead of appending (tmp + fsync + rename + fsync dir): the live enqueue
records copied from the old file (read at the offsets the index keeps, queue by queue in msg-id
order; garbage is never read), then the pending batch, then one DELIVERED record per queue and a
commit mark; the index then learns the records' new offsets.

A write, fsync, truncate or rename error raises `StoreFatalError` out of `run()` (the server stops
the node) and out of every pending and later `wait_durable`.

Damage: each write after a successful fsync starts with a commit mark (`journal_codec`), so
recovery tells a torn tail (a bad record with no mark after it: cut off, and logged) from a
damaged record that had been confirmed (a mark after it): `open()` then raises
`StoreFatalError` and the node refuses to start rather than serve what is left.
"""

from __future__ import annotations

import logging
import math
import os
from array import array
from functools import partial
from itertools import accumulate
from typing import Any, Callable, Iterable, Iterator, Sequence

import trio

from amqp_broker.queues.message import Message, parse_basic_properties
from amqp_broker.store import files
from amqp_broker.store.errors import StoreFatalError
from amqp_broker.store.journal_codec import (
    COMMIT_MARK,
    DELIVERED,
    REMOVED,
    decode_enqueue,
    encode_drop_queue,
    encode_enqueue,
    encode_ids,
    mark_after,
    peek_enqueue,
)
from amqp_broker.store.journal_index import UNPLACED, JournalIndex, QueueRecords
from amqp_broker.store.records import HEADER_SIZE, FileFrames, Payload, frame_pieces, joined, payload_size
from quorum.log.disk import CacheTrail, OsDisk, is_zero_tail
from quorum.log.diskjobs import DiskJobs

__all__ = ["MessageJournal", "RecoveredMessages", "RecoveredQueues"]

_log = logging.getLogger(__name__)
_FILE = "messages.journal"
# How long a batch of removals alone waits for a record that needs flushing (RabbitMQ's message
# store syncs on a 25 ms interval too).
REMOVALS_DELAY = 0.025
_READ_RUN = 4 << 20   # records read back in runs of up to this many bytes
# The file is read back only for paged-out messages, compaction and recovery, so what was written
# and synced more than _CACHE_TRAIL bytes before the end is dropped from the page cache
# (`CacheTrail`): appending 64 KiB messages to a growing journal ran at ~5,500 msg/s, and at ~9,500
# with this (bench/quorum_notes.md).
_CACHE_TRAIL = 32 << 20
_DROP_STEP = 4 << 20


class _OpenFile:
    """A read-only descriptor of the file as it was recovered; stays valid (the same inode)
    after a compaction renames a new file over the path. Closed when the last user goes."""

    fd = -1

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_RDONLY)

    def __del__(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)


class RecoveredMessages:
    """One queue's recovered messages, read back from the journal file as they are iterated, in
    msg-id order (the `queues.base.Recovered` a classic queue restores from). `len()` is their
    number.

    Iterating gives each message's summary: (msg_id, body size, priority, expiration ms or None,
    redelivered, ref), parsed from its record without copying the body; `message(ref)` decodes
    the whole message, for those the queue keeps in memory (the rest it pages out again, and
    reads back from the journal when their turn comes)."""

    def __init__(self, file: _OpenFile, records: QueueRecords, delivered: set[int]) -> None:
        self._file = file
        self._records = records
        self._delivered = delivered

    def __len__(self) -> int:
        return self._records.count

    def __iter__(self) -> Iterator[tuple[int, int, int, int | None, bool, memoryview]]:
        delivered = self._delivered
        peeked: dict[bytes, tuple] = {}   # properties -> parsed (a few sets are the usual case)
        for batch in self._runs():
            payloads = _read_payloads(self._file.fd, "the message journal",
                                      [(offset, length) for _, length, offset in batch])
            for (msg_id, _, _), payload in zip(batch, payloads):
                properties, size = peek_enqueue(payload)
                parsed = peeked.get(properties)
                if parsed is None:
                    if len(peeked) >= 256:
                        peeked.clear()
                    parsed = peeked[properties] = parse_basic_properties(properties)
                yield msg_id, size, parsed[1], parsed[2], msg_id in delivered, payload

    def _runs(self) -> Iterator[list[tuple[int, int, int]]]:
        """The live records, (msg_id, frame length, offset), up to `_READ_RUN` bytes at a time."""
        batch: list[tuple[int, int, int]] = []
        size = 0
        for rec in self._records.live():
            batch.append(rec)
            size += rec[1]
            if size >= _READ_RUN:
                yield batch
                batch, size = [], 0
        if batch:
            yield batch

    @staticmethod
    def message(ref: memoryview) -> Message:
        return decode_enqueue(ref)[2]


def _read_messages(fd: int, path: str, spans: list[tuple[int, int]]) -> list[Message]:
    """The messages of the enqueue records at `spans` ((offset, frame length), in order) of
    the file `fd`."""
    return [decode_enqueue(payload)[2] for payload in _read_payloads(fd, path, spans)]


def _read_payloads(fd: int, path: str, spans: list[tuple[int, int]]) -> list[memoryview]:
    """The payloads of the records at `spans` ((offset, frame length), in order) of the file
    `fd`: one read per run of adjacent records, up to `_READ_RUN` bytes."""
    out: list[memoryview] = []
    i = 0
    while i < len(spans):
        start, end = spans[i][0], spans[i][0] + spans[i][1]
        j = i + 1
        while j < len(spans) and spans[j][0] == end and end - start < _READ_RUN:
            end += spans[j][1]
            j += 1
        try:
            data = os.pread(fd, end - start, start)
        except OSError as exc:
            raise StoreFatalError(f"reading {path} back failed") from exc
        if len(data) != end - start:
            raise StoreFatalError(f"{path}: a live record is past the end of the file")
        view = memoryview(data)
        for offset, length in spans[i:j]:
            out.append(view[offset - start + HEADER_SIZE:offset - start + length])
        i = j
    return out


# queue key -> its recovered messages; feeds ClassicQueue.restore
RecoveredQueues = dict[str, RecoveredMessages]


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
        self._disk = OsDisk(fsync)
        self._compact_min = compact_min_bytes
        self._fd: int | None = None
        # which enqueue records are live (and their sizes), and the delivered ids
        self._index = JournalIndex()
        self._live_bytes = 0
        self._file_bytes = 0
        self._cache_trail = CacheTrail(_CACHE_TRAIL, _DROP_STEP)
        self._pending: list[Payload | None] = []   # None: an enqueue record cancelled
        self._pending_bytes = 0
        # the pending enqueue records: (their queue's records, msg id) -> place in `_pending`
        self._pending_enqueues: dict[tuple[QueueRecords, int], int] = {}
        self._cancelled = 0   # enqueue records of the pending batch removed before written
        # enqueue records not yet written (pending or being written), for `read`
        self._unwritten: dict[tuple[QueueRecords, int], Payload] = {}
        self._read_fd: int | None = None   # the current file, for `read`
        self._readable = 0                 # bytes of it written
        self._seq = 0
        self._durable_seq = 0
        self._durable_event = trio.Event()
        self._callbacks: list[tuple[int, Callable[[], None]]] = []
        self._wakeup: trio.Event | None = None  # the flusher waits on it for an urgent record
        self._sleep: trio.CancelScope | None = None  # ... in this scope
        self._urgent = False  # the pending batch holds more than removals
        self._failed: StoreFatalError | None = None
        self.fsyncs = 0  # number of flushes done (statistics)
        self.jobs = DiskJobs()  # a small batch is written on the trio thread
        self._mark_next = False  # the next write starts with a commit mark
        self.compactions = 0
        self.cancelled = 0  # enqueue records never written: removed while pending (statistics)

    # -- recovery --------------------------------------------------------------------------------
    def open(self) -> RecoveredQueues:
        """Recover the journal (sync, at startup, before `run`). Returns each queue's messages."""
        try:
            os.makedirs(self._dir, exist_ok=True)
            if os.path.exists(self._path + ".tmp"):
                os.unlink(self._path + ".tmp")  # a compaction that never got renamed
        except OSError as exc:
            raise StoreFatalError(f"cannot prepare {self._dir}") from exc
        try:
            recovered = _OpenFile(self._path) if os.path.exists(self._path) else None
        except OSError as exc:
            raise StoreFatalError(f"reading {self._path} failed") from exc
        index = JournalIndex()
        valid_end = size = 0
        if recovered is not None:
            frames = FileFrames(recovered.fd)
            try:
                for offset, frame in frames:
                    index.apply(frame[HEADER_SIZE:], offset, len(frame))
            except OSError as exc:
                raise StoreFatalError(f"reading {self._path} failed") from exc
            valid_end, size = frames.valid_end, frames.size
        if valid_end < size and _zero_tail(recovered.fd, valid_end, size):  # type: ignore[union-attr]
            files.truncate(self._path, valid_end, self._fsync)  # space allocated ahead, unused
        elif valid_end < size:
            mark = mark_after(recovered.fd, valid_end, size)  # type: ignore[union-attr]
            if mark is not None:
                raise StoreFatalError(
                    f"message journal {self._path}: damaged record at offset {valid_end}, "
                    f"before data that was already durable (a commit mark at offset {mark}); "
                    "refusing to start rather than lose or serve damaged messages. Restore the "
                    "file from a backup, or move it away to start without those messages")
            _log.warning("message journal %s: cut a torn tail of %d bytes at offset %d (a "
                         "write not yet confirmed when the node stopped)", self._path,
                         size - valid_end, valid_end)
            files.truncate(self._path, valid_end, self._fsync)
        self._mark_next = valid_end > 0  # what is on disk now is durable
        out: RecoveredQueues = {}
        for queue, records in list(index.queues.items()):
            if not records.count:
                del index.queues[queue]
                continue
            out[queue] = RecoveredMessages(recovered, records,  # type: ignore[arg-type]
                                           index.delivered.get(queue, set()))
        self._index = JournalIndex()
        self._index.queues = {q: r.copy() for q, r in index.queues.items()}
        self._index.delivered = {q: set(ids) for q, ids in index.delivered.items()
                                 if q in index.queues}
        self._live_bytes = self._index.live_bytes()
        self._file_bytes = valid_end
        if self._file_bytes >= self._compact_min and 2 * self._live_bytes < self._file_bytes:
            self._placed([], self._rewrite_sync(self._frozen(), []))
        else:
            self._open_append()
            self._reopen_read()
        return out

    def _open_append(self) -> None:
        existed = os.path.exists(self._path)
        try:
            self._fd = self._disk.open_log(self._path)  # space allocated ahead: cheaper fsyncs
        except OSError as exc:
            raise StoreFatalError(f"cannot open {self._path}") from exc
        if not existed:
            files.fsync_dir(self._dir)

    def _reopen_read(self) -> None:
        """Read from the file as it is now (after open, or once a compaction replaced it)."""
        if self._read_fd is not None:
            os.close(self._read_fd)
        try:
            self._read_fd = os.open(self._path, os.O_RDONLY)
        except OSError as exc:
            raise StoreFatalError(f"cannot open {self._path}") from exc
        self._readable = self._file_bytes

    def close(self) -> None:
        self._close_append()
        if self._read_fd is not None:
            os.close(self._read_fd)
            self._read_fd = None

    def _close_append(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                self._disk.close(fd)  # cuts the space allocated ahead
            except OSError as exc:
                raise StoreFatalError(f"closing {self._path} failed") from exc

    # -- appends (QueueJournal protocol; trio thread, no IO) ------------------------------------
    @property
    def appended_seq(self) -> int:
        """Sequence number of the last record appended: wait for it to confirm a publish."""
        return self._seq

    @property
    def durable_seq(self) -> int:
        return self._durable_seq

    def _add(self, record: Payload, urgent: bool = True) -> int:
        idle = not self._pending  # a flusher waiting now waits for any record, not company
        self._pending.append(record)
        self._pending_bytes += HEADER_SIZE + payload_size(record)
        self._seq += 1
        if urgent:
            self._urgent = True
            wakeup = self._wakeup
            if wakeup is not None:
                self._wakeup = None
                wakeup.set()
        elif idle and self._sleep is not None:
            # removals alone: the flusher's sleep ends REMOVALS_DELAY from now (no wake-up now)
            self._sleep.deadline = trio.current_time() + REMOVALS_DELAY
        return self._seq

    def enqueued(self, queue: str, msg_id: int, message: Message) -> int:
        record = encode_enqueue(queue, msg_id, message)
        records = self._index.records(queue)
        self._live_bytes += records.add(msg_id, HEADER_SIZE + payload_size(record))
        key = (records, msg_id)
        self._pending_enqueues[key] = len(self._pending)
        self._unwritten[key] = record
        return self._add(record)

    def delivered(self, queue: str, msg_ids: Iterable[int]) -> int:
        ids = list(msg_ids)
        self._index.mark_delivered(queue, ids)
        return self._add(encode_ids(DELIVERED, queue, ids))

    def removed(self, queue: str, msg_ids: Iterable[int]) -> int:
        """Messages acked (or otherwise gone). One whose enqueue record is still in the
        pending batch is cancelled there: neither record is ever written (as RabbitMQ's
        message store skips a message removed before its write), and what waits on the
        batch still waits for it, so a confirm never comes earlier than it would have."""
        ids = list(msg_ids)
        written = ids
        if self._pending_enqueues:
            records = self._index.queues.get(queue)
            if records is not None:
                written = [i for i in ids if not self._cancel(records, i)]
        self._live_bytes -= self._index.remove(queue, ids)
        if not written:
            return self._seq
        return self._add(encode_ids(REMOVED, queue, written), urgent=False)

    def _cancel(self, records: QueueRecords, msg_id: int) -> bool:
        """Take `msg_id`'s enqueue record out of the pending batch, if it is there."""
        slot = self._pending_enqueues.pop((records, msg_id), None)
        if slot is None:
            return False
        record = self._pending[slot]
        self._pending[slot] = None
        self._pending_bytes -= HEADER_SIZE + payload_size(record)  # type: ignore[arg-type]
        del self._unwritten[(records, msg_id)]
        self._cancelled += 1
        self.cancelled += 1
        return True

    def drop_queue(self, queue: str) -> int:
        """A durable queue was deleted: forget all its messages (one record)."""
        self._live_bytes -= self._index.drop(queue)
        return self._add(encode_drop_queue(queue))

    def read(self, queue: str, msg_ids: Sequence[int]) -> list[Message]:
        """The live messages `msg_ids` of `queue`, in that order: from the file (adjacent
        records in one read) or, not yet written, from memory. Raises StoreFatalError if one
        is not live (a caller's bug) or cannot be read."""
        records = self._index.queues.get(queue)
        out: list[Message | None] = [None] * len(msg_ids)
        in_file: list[int] = []                # positions in `out` read from the file
        spans: list[tuple[int, int]] = []      # their (offset, length)
        for n, msg_id in enumerate(msg_ids):
            where = records.locate(msg_id) if records is not None else None
            if where is None:
                raise StoreFatalError(f"journal: message {msg_id} of {queue} is not live")
            length, offset = where
            if offset == UNPLACED or offset + length > self._readable:
                out[n] = decode_enqueue(joined(self._unwritten[(records, msg_id)]))[2]
            else:
                in_file.append(n)
                spans.append((offset, length))
        if spans:
            for n, message in zip(in_file, _read_messages(self._read_fd, self._path, spans)):
                out[n] = message
        return out  # type: ignore[return-value]

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
                if not self._urgent:  # nothing yet, or removals alone: wait for company
                    self._wakeup = trio.Event()
                    removals_due = trio.current_time() + REMOVALS_DELAY if self._pending else math.inf
                    with trio.CancelScope(deadline=removals_due) as sleep:
                        self._sleep = sleep
                        await self._wakeup.wait()
                    self._sleep = self._wakeup = None
                    if not self._pending:
                        continue
                await self._flush_once()
        except StoreFatalError as exc:
            self._fail(exc)
            raise

    async def _flush_once(self) -> None:
        seq, job, done, nbytes = self._take_batch()
        if job is not None:
            done(await self.jobs.run(job, nbytes))
            self.fsyncs += 1
        self._mark_durable(seq)

    def flush_sync(self, compact: bool = False) -> None:
        """Write and sync whatever is pending, from a non-async context (clean shutdown, tests);
        `compact` forces a rewrite of the live set. Never call it while `run()` is active."""
        if self._pending or compact:
            seq, job, done, _ = self._take_batch(compact)
            if job is not None:
                done(job())
                self.fsyncs += 1
            self._mark_durable(seq)

    def _take_batch(self, compact: bool = False) -> tuple[int, Callable[[], Any] | None, Any, int | None]:
        """Detach the pending batch (trio thread); return its seq, the blocking job that makes
        it durable (an append, or a compaction when garbage dominates the file; None when
        every record of the batch was cancelled), what to do with the job's result back
        in this thread, and the bytes an append writes (None for a compaction: `DiskJobs`
        always gives that a worker thread)."""
        seq, size, batch = self._seq, self._pending_bytes, self._pending
        self._urgent = False
        enqueues = _batch_positions(batch, self._pending_enqueues)
        if self._cancelled:
            batch = [record for record in batch if record is not None]
        self._pending, self._pending_bytes, self._pending_enqueues = [], 0, {}
        self._cancelled = 0
        if not batch and not compact:
            return seq, None, None, None
        start = self._file_bytes + (len(COMMIT_MARK) if self._mark_next else 0)
        total = start + size
        if compact or (total >= self._compact_min and 2 * self._live_bytes < total):
            # the new file: the live records of the old one, then this batch
            return seq, partial(self._rewrite_sync, self._frozen(), batch), \
                partial(self._placed, enqueues), None
        self._file_bytes = total  # a failed write stops the node, so counting early is safe
        for records, msg_id, pos in enqueues:   # where they will be once written
            records.place(msg_id, start + pos)
        return (seq, partial(self._write_sync, batch, total),
                partial(self._written, enqueues, total), size)

    def _written(self, enqueues: list[tuple[QueueRecords, int, int]], size: int, _=None) -> None:
        """A batch is in the file (trio thread): `read` finds its records there now."""
        self._readable = size
        unwritten = self._unwritten
        for records, msg_id, _pos in enqueues:
            unwritten.pop((records, msg_id), None)

    def _fail(self, exc: StoreFatalError) -> None:
        self._failed = exc
        self._callbacks.clear()
        self._durable_event.set()  # wake waiters so they see the failure

    # -- worker-thread side ----------------------------------------------------------------------
    def _write_sync(self, batch: list[Payload], end: int) -> None:
        assert self._fd is not None
        # everything before this write was fsynced: it starts with a commit mark
        pieces = frame_pieces(batch, COMMIT_MARK if self._mark_next else b"")
        try:
            self._disk.write_pieces(self._fd, pieces)
            self._disk.fdatasync(self._fd)
            self._mark_next = True
        except OSError as exc:
            raise StoreFatalError(f"message journal {self._path}: append/fsync failed") from exc
        span = self._cache_trail.advance(end)
        if span is not None:
            files.drop_cached(self._fd, *span)

    def _frozen(self) -> tuple[list[tuple[QueueRecords, QueueRecords]], list[tuple[str, list[int]]]]:
        """The live set (each queue's records and a copy of them) and the delivered ids, taken
        in the trio thread for `_rewrite_sync`."""
        live = [(r, r.copy()) for r in self._index.queues.values() if r.count]
        delivered = [(q, sorted(ids)) for q, ids in self._index.delivered.items() if ids]
        return live, delivered

    def _rewrite_sync(self, frozen, batch: list[Payload]):
        """Write the compacted file (worker thread): the old file's live enqueue records, read
        where the index says they are, `batch`, the delivered ids, a commit mark; then swap it
        in. Returns where the copied records now are (for `_placed`) and where `batch` begins."""
        live, delivered = frozen
        tmp = self._path + ".tmp"
        moved = []
        try:
            src = os.open(self._path, os.O_RDONLY) if os.path.exists(self._path) else None
            out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                written = 0
                for records, copy in live:
                    offsets = array("Q", [UNPLACED]) * len(copy.offsets)
                    run: list[tuple[int, int]] = []   # (index, old offset) of adjacent records
                    run_end = 0
                    for msg_id, length, offset in copy.live():
                        if offset == UNPLACED:
                            continue   # in `batch`: written below
                        if run and (offset != run_end or run_end - run[0][1] >= _READ_RUN):
                            written += _copy_run(src, out, run, run_end, offsets, written)
                            run = []
                        run.append((msg_id - copy.base, offset))
                        run_end = offset + length
                    if run:
                        written += _copy_run(src, out, run, run_end, offsets, written)
                    moved.append((records, copy.base, offsets))
                batch_start = written
                tail = [*batch, *(encode_ids(DELIVERED, q, ids) for q, ids in delivered)]
                # the file is fsynced whole before it replaces the old
                written += _write_all(out, b"".join([*frame_pieces(tail), COMMIT_MARK]))
                self._fsync(out)
            finally:
                os.close(out)
                if src is not None:
                    os.close(src)
            self._close_append()
            os.replace(tmp, self._path)
        except OSError as exc:
            raise StoreFatalError(f"rewriting {self._path} failed") from exc
        files.fsync_dir(self._dir)
        self._file_bytes = written
        self._cache_trail.restart()
        self._open_append()
        self.compactions += 1
        return moved, batch_start

    def _placed(self, enqueues: list[tuple[QueueRecords, int, int]], result) -> None:
        """After a compaction (trio thread): the index learns where the records now are, and
        `read` reads the new file."""
        moved, batch_start = result
        for records, base, offsets in moved:
            records.relocate(base, offsets)
        for records, msg_id, pos in enqueues:
            records.place(msg_id, batch_start + pos)
        self._reopen_read()
        self._written(enqueues, self._file_bytes)

    def statistics(self) -> dict[str, int]:
        return {
            "appended_seq": self._seq,
            "durable_seq": self._durable_seq,
            "file_bytes": self._file_bytes,
            "live_bytes": self._live_bytes,
            "live_messages": self._index.live_count(),
            "fsyncs": self.fsyncs,
            "compactions": self.compactions,
            "cancelled": self.cancelled,
        }


def _batch_positions(batch: list[Payload | None], enqueues: dict[tuple[QueueRecords, int], int]
                     ) -> list[tuple[QueueRecords, int, int]]:
    """(records, msg id, offset of its frame in the written batch) of each enqueue record
    of `batch`, whose cancelled records (None) are not written."""
    if not enqueues:
        return []
    offsets = [0, *accumulate(0 if r is None else HEADER_SIZE + payload_size(r) for r in batch)]
    return [(records, msg_id, offsets[slot]) for (records, msg_id), slot in enqueues.items()]


def _copy_run(src: int | None, out: int, run: list[tuple[int, int]], end: int,
              offsets: array, written: int) -> int:
    """Copy the adjacent records `run` ((index, old offset), up to `end`) from `src` to the end
    of `out` (at `written`); note their new offsets. Returns the bytes copied."""
    start = run[0][1]
    data = os.pread(src, end - start, start) if src is not None else b""
    if len(data) != end - start:
        raise OSError(f"the journal ends before a live record at offset {start}")
    _write_all(out, data)
    for i, offset in run:
        offsets[i] = written + offset - start
    return len(data)


def _zero_tail(fd: int, start: int, end: int) -> bool:
    """Whether the file's bytes [start, end) are all zeros (`OsDisk.open_log`'s space)."""
    while start < end:
        chunk = os.pread(fd, min(end - start, 1 << 20), start)
        if not chunk or not is_zero_tail(chunk, 0):
            return False
        start += len(chunk)
    return True


def _write_all(fd: int, data: bytes) -> int:
    view = memoryview(data)
    done = 0
    while done < len(view):
        done += os.write(fd, view[done:])
    return done
