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
- at startup, `open()` recovers: the segment files are streamed in order (never loaded whole)
  to find the live records, a torn tail is truncated, and each queue's surviving messages come back in msg-id
  order, flagged redelivered if they had been delivered (as RabbitMQ does for classic queues),
  read from the file as the queue takes them (`RecoveredMessages`: a summary of each, so that a
  backlog the queue pages out again is never decoded whole).

Memory: the journal keeps no message, only which records are live and where (`journal_index`:
12 bytes a message), so a classic queue that pages its messages out of memory really frees
them; `read` gives a paged-out persistent message back (from the file, or from the batch not
yet written).

Segments: the journal is a series of files (`messages.journal`, then `messages.journal.1`, .2,
...); appends go to the newest, and a batch starts a new one once that holds `SEGMENT_BYTES`.
Nothing is rewritten in place. Once the write of a batch is durable, the flusher deletes the
oldest segment files that hold no live message, oldest first (a newer file's removal records
keep an older file's removed messages from coming back, so only a prefix may go). A consumer that
keeps up, or a backlog drained in order, thus frees its files whole, and nothing is copied. A
message left behind (never acked, or in a queue nobody reads) pins its file: when all files hold
`compact_min_bytes` and more garbage than live records, a batch starts with the live records of
the oldest file, read back from it (with a DELIVERED record for those delivered), the write is
followed by a commit mark of its own (the copies were confirmed long ago: damage to them must not
pass for a torn tail), and the old file goes. One file at a time, so no write waits for a whole live
set to be copied, as it did when the journal was one file rewritten whole (a 1 GB backlog drained
while another publisher waited 2.8 s for a confirm; `bench/quorum_notes.md`, session 27). Each
record's position is its segment and offset (`journal_index.position`); the index counts live
bytes per segment.

A write, fsync, truncate or unlink error raises `StoreFatalError` out of `run()` (the server stops
the node) and out of every pending and later `wait_durable`.

Damage: each write after a successful fsync starts with a commit mark (`journal_codec`), so
recovery tells a torn tail (a bad record with no mark after it, in the newest file: cut off, and
logged) from a damaged record that had been confirmed (a mark after it, or a newer file): `open()`
then raises `StoreFatalError` and the node refuses to start rather than serve what is left.
"""

from __future__ import annotations

import logging
import math
import os
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
    as_delivered,
    decode_enqueue,
    encode_drop_queue,
    encode_enqueue,
    encode_ids,
    mark_after,
    peek_enqueue,
)
from amqp_broker.store.journal_index import (UNPLACED, JournalIndex, QueueRecords, position,
                                              segment_of)
from amqp_broker.store.records import HEADER_SIZE, FileFrames, Payload, frame_pieces, joined, payload_size
from quorum.log.disk import CacheTrail, OsDisk, is_zero_tail
from quorum.log.diskjobs import DiskJobs
from quorum.signal import Signal

__all__ = ["MessageJournal", "RecoveredMessages", "RecoveredQueues"]

_log = logging.getLogger(__name__)
_FILE = "messages.journal"
# How long a batch of removals alone waits for a record that needs flushing (RabbitMQ's message
# store syncs on a 25 ms interval too).
REMOVALS_DELAY = 0.025
_READ_RUN = 4 << 20   # records read back in runs of up to this many bytes
# appends go to a new segment file once the newest holds this much (RabbitMQ's message store
# files are 16 MB)
SEGMENT_BYTES = 32 << 20
# The file is read back only for paged-out messages, compaction and recovery, so what was written
# and synced more than _CACHE_TRAIL bytes before the end is dropped from the page cache
# (`CacheTrail`): appending 64 KiB messages to a growing journal ran at ~5,500 msg/s, and at ~9,500
# with this (bench/quorum_notes.md).
_CACHE_TRAIL = 32 << 20
_DROP_STEP = 4 << 20


class _OpenFile:
    """A read-only descriptor of a segment file as it was recovered; stays valid (the same
    inode) after the journal deletes the file. Closed when the last user goes."""

    fd = -1

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_RDONLY)

    def __del__(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)


class RecoveredMessages:
    """One queue's recovered messages, read back from the journal's segment files as they are
    iterated, in msg-id order (the `queues.base.Recovered` a classic queue restores from).
    `len()` is their number.

    Iterating gives each message's summary: (msg_id, body size, priority, expiration ms or None,
    redelivered, ref), parsed from its record without copying the body; `message(ref)` decodes
    the whole message, for those the queue keeps in memory (the rest it pages out again, and
    reads back from the journal when their turn comes)."""

    def __init__(self, files: dict[int, _OpenFile], records: QueueRecords,
                 delivered: set[int]) -> None:
        self._fds = {seg: f.fd for seg, f in files.items()}
        self._files = files   # kept open while this is
        self._records = records
        self._delivered = delivered

    def __len__(self) -> int:
        return self._records.count

    def __iter__(self) -> Iterator[tuple[int, int, int, int | None, bool, memoryview]]:
        delivered = self._delivered
        peeked: dict[bytes, tuple] = {}   # properties -> parsed (a few sets are the usual case)
        for batch in self._runs():
            payloads = _read_payloads(self._fds, "the message journal",
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
        """The live records, (msg_id, frame length, position), up to `_READ_RUN` bytes at a time."""
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


def _read_messages(fds: dict[int, int], path: str, spans: list[tuple[int, int]]) -> list[Message]:
    """The messages of the enqueue records at `spans` ((position, frame length), in order)."""
    return [decode_enqueue(payload)[2] for payload in _read_payloads(fds, path, spans)]


def _read_payloads(fds: dict[int, int], path: str, spans: list[tuple[int, int]]) -> list[memoryview]:
    """The payloads of the records at `spans` ((position, frame length), in order), each read
    from its segment's descriptor in `fds`: one read per run of adjacent records, up to
    `_READ_RUN` bytes."""
    return [view[HEADER_SIZE:] for view in _read_frames(fds, path, spans)]


def _read_frames(fds: dict[int, int], path: str, spans: list[tuple[int, int]]) -> list[memoryview]:
    out: list[memoryview] = []
    i = 0
    while i < len(spans):
        start, end = spans[i][0], spans[i][0] + spans[i][1]
        j = i + 1
        while j < len(spans) and spans[j][0] == end and end - start < _READ_RUN:
            end += spans[j][1]
            j += 1
        segment, offset = segment_of(start)
        try:
            data = os.pread(fds[segment], end - start, offset)
        except (OSError, KeyError) as exc:
            raise StoreFatalError(f"reading {path} back failed") from exc
        if len(data) != end - start:
            raise StoreFatalError(f"{path}: a live record is past the end of its file")
        view = memoryview(data)
        for pos, length in spans[i:j]:
            out.append(view[pos - start:pos - start + length])
        i = j
    return out


# queue key -> its recovered messages; feeds ClassicQueue.restore
RecoveredQueues = dict[str, RecoveredMessages]


class MessageJournal:
    """The segment files of the journal in `directory`, shared by every durable classic queue
    of the node.

    `fsync` is injectable (tests count calls or inject failures); `compact_min_bytes` is the
    size of all segment files below which compaction is never worth it; `segment_bytes` is the
    size past which appends go to a new segment file.
    """

    def __init__(
        self,
        directory: str,
        *,
        fsync: files.FsyncFn = os.fdatasync,
        compact_min_bytes: int = 64 << 20,
        segment_bytes: int = SEGMENT_BYTES,
    ) -> None:
        self._dir = directory
        self._fsync = fsync
        self._disk = OsDisk(fsync)
        self._compact_min = compact_min_bytes
        self._segment_bytes = segment_bytes
        self._fd: int | None = None   # the segment appended to
        self._segment = 0             # ... its number
        self._sizes: dict[int, int] = {}   # bytes of each segment file, oldest first
        # which enqueue records are live (and their sizes), and the delivered ids
        self._index = JournalIndex()
        self._live_bytes = 0
        self._file_bytes = 0   # of the segment appended to
        self._cache_trail = CacheTrail(_CACHE_TRAIL, _DROP_STEP)
        self._pending: list[Payload | None] = []   # None: an enqueue record cancelled
        self._pending_bytes = 0
        # the pending enqueue records: (their queue's records, msg id) -> (place in `_pending`,
        # offset of its frame in the batch while no record before it is cancelled)
        self._pending_enqueues: dict[tuple[QueueRecords, int], tuple[int, int]] = {}
        self._cancelled = 0   # enqueue records of the pending batch removed before written
        # enqueue records not yet written (pending or being written), for `read`
        self._unwritten: dict[tuple[QueueRecords, int], Payload] = {}
        self._read_fds: dict[int, int] = {}   # segment -> a descriptor to read it, for `read`
        self._readable = 0                    # bytes of the segment appended to written
        self._seq = 0
        self._durable_seq = 0
        self._durable = Signal()   # fired at each mark (`wait_durable`)
        self._callbacks: list[tuple[int, Callable[[], None]]] = []
        self._wakeup: trio.Event | None = None  # the flusher waits on it for an urgent record
        self._sleep: trio.CancelScope | None = None  # ... in this scope
        self._urgent = False  # the pending batch holds more than removals
        self._removals_since = 0.0  # trio time the pending batch's first removal came, alone
        self._running = False       # `run()` is active (the clock above is trio's)
        self._failed: StoreFatalError | None = None
        # Set by the owner: `defer_wakeup(fn)` promises to call `fn()` at the end of the
        # synchronous batch of work running now (True), or declines (False). An urgent record
        # added in such a batch then does not wake the flusher: `fn` writes the batch there
        # and then, sparing the flusher's task step and a pass of the run loop per message.
        self.defer_wakeup: Callable[[Callable[[], None]], bool] | None = None
        self.fsyncs = 0  # number of flushes done (statistics)
        self.jobs = DiskJobs()  # a small batch is written on the trio thread
        self._mark_next = False  # the next write starts with a commit mark
        self.compactions = 0   # segments whose live records were copied forward
        self.deleted_segments = 0
        self.cancelled = 0  # enqueue records never written: removed while pending (statistics)

    def _segment_path(self, segment: int) -> str:
        return os.path.join(self._dir, _FILE if segment == 0 else f"{_FILE}.{segment}")

    def _list_segments(self) -> list[int]:
        found = []
        for name in os.listdir(self._dir):
            if name == _FILE:
                found.append(0)
            elif name.startswith(_FILE + ".") and name[len(_FILE) + 1:].isdigit():
                found.append(int(name[len(_FILE) + 1:]))
        return sorted(found)

    # -- recovery --------------------------------------------------------------------------------
    def open(self) -> RecoveredQueues:
        """Recover the journal (sync, at startup, before `run`). Returns each queue's messages."""
        try:
            os.makedirs(self._dir, exist_ok=True)
            legacy_tmp = os.path.join(self._dir, _FILE + ".tmp")
            if os.path.exists(legacy_tmp):
                os.unlink(legacy_tmp)  # an older version's compaction that never got renamed
            segments = self._list_segments()
        except OSError as exc:
            raise StoreFatalError(f"cannot prepare {self._dir}") from exc
        index = JournalIndex()
        opened: dict[int, _OpenFile] = {}
        valid_end = 0
        for n, segment in enumerate(segments):
            path = self._segment_path(segment)
            try:
                opened[segment] = recovered = _OpenFile(path)
                frames = FileFrames(recovered.fd)
                for offset, frame in frames:
                    index.apply(frame[HEADER_SIZE:], position(segment, offset), len(frame))
            except OSError as exc:
                raise StoreFatalError(f"reading {path} failed") from exc
            valid_end, size = frames.valid_end, frames.size
            if valid_end < size:
                self._cut_tail(path, recovered.fd, valid_end, size, last=n == len(segments) - 1)
            self._sizes[segment] = valid_end
        self._segment = segments[-1] if segments else 0
        self._file_bytes = valid_end
        self._mark_next = valid_end > 0  # what is on disk now is durable
        out: RecoveredQueues = {}
        for queue, records in list(index.queues.items()):
            if not records.count:
                del index.queues[queue]
                continue
            out[queue] = RecoveredMessages(opened, records.copy(),
                                           set(index.delivered.get(queue, ())))
        index.delivered = {q: ids for q, ids in index.delivered.items() if q in index.queues}
        self._index = index
        self._live_bytes = index.live_bytes()
        self._open_append()
        self._sizes.setdefault(self._segment, self._file_bytes)
        self._readable = self._file_bytes
        dead = self._dead_prefix(())
        if dead:
            self._delete_segments(dead)
            self._forget_segments(dead)
        return out

    def _cut_tail(self, path: str, fd: int, valid_end: int, size: int, last: bool) -> None:
        """A segment's bytes past its last intact record: space allocated ahead (zeros: cut),
        a torn write of the newest segment (cut, logged), else damage (refuse to start)."""
        if _zero_tail(fd, valid_end, size):
            files.truncate(path, valid_end, self._fsync)  # space allocated ahead, unused
            return
        mark = mark_after(fd, valid_end, size)
        if mark is not None or not last:
            where = f"a commit mark at offset {mark}" if mark is not None else "a newer segment"
            raise StoreFatalError(
                f"message journal {path}: damaged record at offset {valid_end}, "
                f"before data that was already durable ({where}); "
                "refusing to start rather than lose or serve damaged messages. Restore the "
                "file from a backup, or move it away to start without those messages")
        _log.warning("message journal %s: cut a torn tail of %d bytes at offset %d (a "
                     "write not yet confirmed when the node stopped)", path,
                     size - valid_end, valid_end)
        files.truncate(path, valid_end, self._fsync)

    def _open_append(self) -> None:
        path = self._segment_path(self._segment)
        existed = os.path.exists(path)
        try:
            self._fd = self._disk.open_log(path)  # space allocated ahead: cheaper fsyncs
        except OSError as exc:
            raise StoreFatalError(f"cannot open {path}") from exc
        if not existed:
            files.fsync_dir(self._dir)

    def _read_fd(self, segment: int) -> int:
        fd = self._read_fds.get(segment)
        if fd is None:
            path = self._segment_path(segment)
            try:
                fd = self._read_fds[segment] = os.open(path, os.O_RDONLY)
            except OSError as exc:
                raise StoreFatalError(f"cannot open {path}") from exc
        return fd

    def close(self) -> None:
        self._close_append()
        for fd in self._read_fds.values():
            os.close(fd)
        self._read_fds.clear()

    def _close_append(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                self._disk.close(fd)  # cuts the space allocated ahead
            except OSError as exc:
                raise StoreFatalError(f"closing {self._segment_path(self._segment)} failed") from exc

    # -- appends (QueueJournal protocol; trio thread, no IO) ------------------------------------
    @property
    def appended_seq(self) -> int:
        """Sequence number of the last record appended: wait for it to confirm a publish."""
        return self._seq

    def _wake_flusher(self) -> None:
        wakeup, self._wakeup = self._wakeup, None
        if wakeup is not None:
            wakeup.set()

    def _end_of_batch(self) -> None:
        """The end of the batch of work that added urgent records (`defer_wakeup`)."""
        if self._urgent and self._wakeup is not None and not self._flush_here():
            self._wake_flusher()

    def _flush_here(self) -> bool:
        """Write and sync the pending batch now, on the trio thread, if the flusher is idle
        and `DiskJobs` would write it inline anyway (the flusher's own way at a low rate):
        the same write and fdatasync, without a task switch. False if it is the flusher's
        to do (busy; a large batch, or one that may start, empty or delete a segment: the
        flusher takes it later, with what else comes meanwhile)."""
        if (self._wakeup is None or self._failed is not None or not self._pending
                or len(self._sizes) > 1 or self._file_bytes >= self._segment_bytes
                or not self.jobs.takes_inline(self._pending_bytes + len(COMMIT_MARK))):
            return False
        seq, job, done, _ = self._take_batch()
        try:
            result = self.jobs.run_inline(job) if job is not None else None
        except StoreFatalError as exc:
            self._fail(exc)   # the flusher raises it, which stops the node
            return False
        self._batch_written(seq, done, result)
        return True

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
            if self._wakeup is not None and (self.defer_wakeup is None
                                             or not self.defer_wakeup(self._end_of_batch)):
                self._wake_flusher()
        elif idle and self._running:
            # Removals alone: they are due REMOVALS_DELAY from now, and the flusher's sleep ends
            # then at the latest (no wake-up now). A deadline set for earlier removals that
            # were written meanwhile is left: the flusher wakes then and sleeps on until these
            # are due. (At a low rate each ack's removal is written with the next publish:
            # moving a trio deadline twice a message cost more than the early wake-ups.)
            self._removals_since = now = trio.current_time()
            if self._sleep is not None and self._sleep.deadline == math.inf:
                self._sleep.deadline = now + REMOVALS_DELAY
        return self._seq

    def enqueued(self, queue: str, msg_id: int, message: Message) -> int:
        record = encode_enqueue(queue, msg_id, message)
        records = self._index.records(queue)
        self._live_bytes += records.add(msg_id, HEADER_SIZE + payload_size(record))
        key = (records, msg_id)
        self._pending_enqueues[key] = (len(self._pending), self._pending_bytes)
        self._unwritten[key] = record
        return self._add(record)

    def delivered(self, queue: str, msg_ids: Iterable[int]) -> int:
        ids = list(msg_ids)
        self._index.mark_delivered(queue, ids)
        if self._pending_enqueues:
            # delivered before their enqueue records were written: those say so themselves
            records = self._index.queues.get(queue)
            if records is not None:
                ids = [i for i in ids if not self._deliver_pending(records, i)]
                if not ids:
                    return self._seq
        return self._add(encode_ids(DELIVERED, queue, ids))

    def _deliver_pending(self, records: QueueRecords, msg_id: int) -> bool:
        """Make `msg_id`'s enqueue record, if it is in the pending batch, an
        ENQUEUE_DELIVERED one."""
        key = (records, msg_id)
        entry = self._pending_enqueues.get(key)
        if entry is None:
            return False
        slot = entry[0]
        self._pending[slot] = self._unwritten[key] = as_delivered(self._pending[slot])
        return True

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
        entry = self._pending_enqueues.pop((records, msg_id), None)
        if entry is None:
            return False
        slot = entry[0]
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
        """The live messages `msg_ids` of `queue`, in that order: from the segment files
        (adjacent records in one read) or, not yet written, from memory. Raises StoreFatalError
        if one is not live (a caller's bug) or cannot be read."""
        records = self._index.queues.get(queue)
        out: list[Message | None] = [None] * len(msg_ids)
        in_file: list[int] = []                # positions in `out` read from the files
        spans: list[tuple[int, int]] = []      # their (position, length)
        fds = self._read_fds
        for n, msg_id in enumerate(msg_ids):
            where = records.locate(msg_id) if records is not None else None
            if where is None:
                raise StoreFatalError(f"journal: message {msg_id} of {queue} is not live")
            length, pos = where
            segment, offset = segment_of(pos)
            if pos == UNPLACED or (segment == self._segment and offset + length > self._readable):
                out[n] = decode_enqueue(joined(self._unwritten[(records, msg_id)]))[2]
            else:
                if segment not in fds:
                    self._read_fd(segment)
                in_file.append(n)
                spans.append((pos, length))
        if spans:
            for n, message in zip(in_file, _read_messages(fds, self._dir, spans)):
                out[n] = message
        return out  # type: ignore[return-value]

    # -- waiting for durability ------------------------------------------------------------------
    async def wait_durable(self, seq: int) -> None:
        """Return once every record up to `seq` is fdatasync'ed; raise StoreFatalError if the
        journal failed."""
        while self._durable_seq < seq:
            if self._failed is not None:
                raise self._failed
            await self._durable.wait()

    def call_when_durable(self, seq: int, fn: Callable[[], None]) -> None:
        """Call `fn()` (from the flusher task) once `seq` is durable; at once if it already is.
        Callbacks must not block; on journal failure they are never called."""
        if seq <= self._durable_seq:
            fn()
        else:
            self._callbacks.append((seq, fn))  # seqs only grow, so the list stays sorted

    def _mark_durable(self, seq: int) -> None:
        self._durable_seq = seq
        self._durable.fire()
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
        self._running = True
        try:
            while True:
                if self._failed is not None:
                    raise self._failed
                if not self._urgent:  # nothing yet, or removals alone: wait for company
                    self._wakeup = trio.Event()
                    removals_due = (self._removals_since + REMOVALS_DELAY if self._pending
                                    else math.inf)
                    with trio.CancelScope(deadline=removals_due) as sleep:
                        self._sleep = sleep
                        await self._wakeup.wait()
                    self._sleep = self._wakeup = None
                    if not self._pending or (not self._urgent and trio.current_time()
                                             < self._removals_since + REMOVALS_DELAY):
                        continue   # written meanwhile, or not due yet (see `_add`)
                await self._flush_once()
        except StoreFatalError as exc:
            self._fail(exc)
            raise
        finally:
            self._running = False

    async def _flush_once(self) -> None:
        seq, job, done, nbytes = self._take_batch()
        result = await self.jobs.run(job, nbytes) if job is not None else None
        self._batch_written(seq, done, result)

    def flush_sync(self, compact: bool = False) -> None:
        """Write and sync whatever is pending, from a non-async context (clean shutdown, tests);
        `compact` forces a rewrite of the live set. Never call it while `run()` is active."""
        if self._pending or compact:
            seq, job, done, _ = self._take_batch(compact)
            self._batch_written(seq, done, job() if job is not None else None)

    def _batch_written(self, seq: int, done: Any, result: Any) -> None:
        """A batch taken by `_take_batch` is durable: `done` (None when nothing was written)
        gets the job's result, and what waits for `seq` is released."""
        if done is not None:
            done(result)
            self.fsyncs += 1
        self._mark_durable(seq)

    def _take_batch(self, compact: bool = False) -> tuple[int, Callable[[], Any] | None, Any, int | None]:
        """Detach the pending batch (trio thread); return its seq, the blocking job that makes
        it durable (None when every record of the batch was cancelled), what to do with the
        job's result back in this thread, and the bytes it writes (None when it also starts a
        segment file, copies records forward or deletes segments: `DiskJobs` always gives that
        a worker thread).

        The batch goes to the newest segment file, or to a new one once that holds
        `segment_bytes`. Before it come the live records of the segments being compacted:
        `compact` forces all of them (and a new segment); else the oldest segment, once the
        files hold `compact_min_bytes` and more garbage than live records. After the write is
        durable, the job deletes the oldest segments that hold nothing live, oldest first
        (their removal records are needed as long as an older segment is kept)."""
        seq, size, batch = self._seq, self._pending_bytes, self._pending
        self._urgent = False
        enqueues = _batch_positions(batch, self._pending_enqueues, self._cancelled)
        if self._cancelled:
            batch = [record for record in batch if record is not None]
        self._pending, self._pending_bytes, self._pending_enqueues = [], 0, {}
        self._cancelled = 0
        if not batch and not compact:
            return seq, None, None, None
        roll = compact or self._file_bytes >= self._segment_bytes
        if roll:
            self._segment += 1
            self._sizes[self._segment] = self._file_bytes = 0
            self._mark_next = False   # a new file: nothing before this write to vouch for
            self._readable = 0
            self._cache_trail.restart()
        segment = self._segment
        mark = COMMIT_MARK if self._mark_next else b""
        start = self._file_bytes + len(mark)
        moves: list[tuple[QueueRecords, int, int, int]] = []
        dead: list[int] = []
        prefix = trailer = 0   # the copies (and their DELIVERED records) before the batch
        if len(self._sizes) > 1:   # older segments: one to empty, some to delete?
            victims = [s for s in self._sizes if s != segment] if compact else self._victims()
            moves = self._moves(victims)
            if moves:
                delivered = self._delivered_of(moves)
                batch = delivered + batch
                prefix = sum(length for _, _, length, _ in moves) + \
                    sum(HEADER_SIZE + payload_size(r) for r in delivered)
                trailer = len(COMMIT_MARK)
            dead = self._dead_prefix(victims)
        batch_start = start + prefix
        total = batch_start + size + trailer
        self._file_bytes = self._sizes[segment] = total  # a failed write stops the node
        for records, msg_id, pos in enqueues:   # where they will be once written
            records.place(msg_id, position(segment, batch_start + pos))
        if not (moves or dead or roll):   # the common case: an append, nothing more
            return (seq, partial(self._write_sync, batch, total, mark),
                    partial(self._written, enqueues, total, (), 0, ()), size + len(mark))
        sources = {segment_of(pos)[0] for *_, pos in moves}
        job = partial(self._write_sync, batch, total, mark, moves,
                      {s: self._read_fd(s) for s in sources}, dead,
                      self._segment_path(segment) if roll else None)
        done = partial(self._written, enqueues, total, moves, position(segment, start), dead)
        return seq, job, done, None

    def _victims(self) -> list[int]:
        """The oldest segment, if it is worth copying its live records forward."""
        oldest = next(iter(self._sizes))
        if oldest == self._segment:
            return []
        on_disk = sum(self._sizes.values())
        if on_disk < self._compact_min or 2 * self._live_bytes >= on_disk:
            return []
        return [oldest]

    def _moves(self, victims: list[int]) -> list[tuple[QueueRecords, int, int, int]]:
        """(records, msg id, frame length, position) of the live records of `victims`."""
        moves = []
        live = self._index.segment_live
        for segment in victims:
            if not live.get(segment):
                continue
            for records in self._index.queues.values():
                if records.by_segment.get(segment):
                    moves.extend((records, msg_id, length, pos)
                                 for msg_id, length, pos in records.live_in(segment))
        moves.sort(key=lambda m: m[3])   # file order: adjacent records are read together
        return moves

    def _delivered_of(self, moves: list[tuple[QueueRecords, int, int, int]]) -> list[Payload]:
        """DELIVERED records for the moved records that had been delivered: a record that
        marked them may be in a segment deleted after the move."""
        if not moves:
            return []
        names = {id(r): q for q, r in self._index.queues.items()}
        ids: dict[str, list[int]] = {}
        for records, msg_id, _, _ in moves:
            queue = names[id(records)]
            if msg_id in self._index.delivered.get(queue, ()):
                ids.setdefault(queue, []).append(msg_id)
        return [encode_ids(DELIVERED, q, sorted(i)) for q, i in ids.items()]

    def _dead_prefix(self, victims: Iterable[int]) -> list[int]:
        """The oldest segments, before the one appended to, that hold nothing live once
        `victims` are copied forward. Only a prefix: a newer segment's removal records keep
        the removed messages of an older one from coming back at recovery."""
        dead = []
        live = self._index.segment_live
        victims = set(victims)
        for segment in self._sizes:
            if segment == self._segment or (live.get(segment) and segment not in victims):
                break
            dead.append(segment)
        return dead

    def _written(self, enqueues: list[tuple[QueueRecords, int, int]], size: int,
                 moves: Sequence[tuple[QueueRecords, int, int, int]], moved_to: int,
                 dead: Sequence[int], _=None) -> None:
        """A batch is in the file (trio thread): `read` finds its records there now, the
        records copied forward are read from their new place, and the deleted segments are
        forgotten."""
        self._readable = size
        unwritten = self._unwritten
        for records, msg_id, _pos in enqueues:
            unwritten.pop((records, msg_id), None)
        pos = moved_to
        for records, msg_id, length, old in moves:
            if records.locate(msg_id) == (length, old):   # still live where it was copied from
                records.place(msg_id, pos)
            pos += length
        if moves:
            self.compactions += 1
        if dead:
            self._forget_segments(dead)

    def _forget_segments(self, dead: list[int]) -> None:
        for segment in dead:
            self._sizes.pop(segment, None)
            fd = self._read_fds.pop(segment, None)
            if fd is not None:
                os.close(fd)
        self.deleted_segments += len(dead)

    def _fail(self, exc: StoreFatalError) -> None:
        self._failed = exc
        self._callbacks.clear()
        self._durable.fire()  # wake waiters so they see the failure

    # -- worker-thread side ----------------------------------------------------------------------
    def _write_sync(self, batch: list[Payload], end: int, mark: bytes,
                    moves: Sequence[tuple[QueueRecords, int, int, int]] = (),
                    sources: dict[int, int] | None = None, dead: Sequence[int] = (),
                    new_path: str | None = None) -> None:
        """Append (to a new segment file first, if `new_path`): the commit mark, the records
        copied forward (read back from their segments), `batch`; fdatasync; then delete the
        `dead` segments."""
        try:
            if new_path is not None:
                self._close_append()
                self._fd = self._disk.open_log(new_path)
            pieces: list = [mark] if mark else []
            if moves:
                pieces.extend(_read_frames(sources, self._dir, [(pos, length)
                                                                for _, _, length, pos in moves]))
            pieces.extend(frame_pieces(batch))
            assert self._fd is not None
            self._disk.write_pieces(self._fd, pieces)
            self._disk.fdatasync(self._fd)
            if new_path is not None:
                files.fsync_dir(self._dir)   # the new file's name is durable too
            self._mark_next = True
            if moves:
                # The copies were durable before (their old segment is deleted next): a mark
                # after them at once, so that damage to them is never taken for a torn tail.
                self._disk.write_pieces(self._fd, [COMMIT_MARK])
                self._disk.fdatasync(self._fd)
                self._mark_next = False
        except OSError as exc:
            raise StoreFatalError(f"message journal {self._segment_path(self._segment)}: "
                                  "append/fsync failed") from exc
        span = self._cache_trail.advance(end)
        if span is not None:
            files.drop_cached(self._fd, *span)
        self._delete_segments(dead)

    def _delete_segments(self, dead: list[int]) -> None:
        """Delete the segment files `dead` (oldest first), durably: a newer one is deleted
        only once the deletion of the older ones is on disk."""
        if not dead:
            return
        try:
            for segment in dead:
                os.unlink(self._segment_path(segment))
            files.fsync_dir(self._dir)
        except OSError as exc:
            raise StoreFatalError(f"message journal {self._dir}: deleting a segment failed") from exc

    def statistics(self) -> dict[str, int]:
        return {
            "appended_seq": self._seq,
            "durable_seq": self._durable_seq,
            "file_bytes": sum(self._sizes.values()),   # all segment files
            "segments": len(self._sizes),
            "deleted_segments": self.deleted_segments,
            "live_bytes": self._live_bytes,
            "live_messages": self._index.live_count(),
            "fsyncs": self.fsyncs,
            "compactions": self.compactions,
            "cancelled": self.cancelled,
        }


def _batch_positions(batch: list[Payload | None],
                     enqueues: dict[tuple[QueueRecords, int], tuple[int, int]], cancelled: int
                     ) -> list[tuple[QueueRecords, int, int]]:
    """(records, msg id, offset of its frame in the written batch) of each enqueue record
    of `batch`, whose `cancelled` records (None) are not written."""
    if not cancelled:
        return [(records, msg_id, offset) for (records, msg_id), (_, offset) in enqueues.items()]
    offsets = [0, *accumulate(0 if r is None else HEADER_SIZE + payload_size(r) for r in batch)]
    return [(records, msg_id, offsets[slot]) for (records, msg_id), (slot, _) in enqueues.items()]


def _zero_tail(fd: int, start: int, end: int) -> bool:
    """Whether the file's bytes [start, end) are all zeros (`OsDisk.open_log`'s space)."""
    while start < end:
        chunk = os.pread(fd, min(end - start, 1 << 20), start)
        if not chunk or not is_zero_tail(chunk, 0):
            return False
        start += len(chunk)
    return True
