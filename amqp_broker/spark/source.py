"""The streaming source: `spark.readStream.format("amqp")` (SPARK.md 3.3 and 5.2).

Spark builds `AmqpStreamReader` in several processes; only the long-lived runner process (the one
that gets `latestOffset`) ever opens a connection, lazily, via `DriverConsumer`.  Rows travel to the
executors inside the `InputPartition`s, so `read()` is pure.  Acks happen only on the driver, for
batches Spark has committed: in `latestOffset(start)` (everything up to `start` is in the commit log)
and in `commit(end)`.  A batch replayed after a restart is empty; the broker redelivers its messages.
"""

from __future__ import annotations

import logging
import threading
from operator import itemgetter

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadMaxRows, SupportsTriggerAvailableNow

from .arrow_rows import from_ipc, record_batch, to_ipc
from .consumer import ConsumerError, DriverConsumer, resolve_queues, total_message_count
from .handoff import SliceServer, fetch
from .ledger import Ledger, offset_json, offset_seq
from .options import SourceOptions
from .rows import COLUMNS

log = logging.getLogger(__name__)


class AmqpPartition(InputPartition):
    """One slice of a batch, as an Arrow IPC stream (the executors cannot reach the driver's
    channel, and a destructive queue cannot be re-read): fetched from the runner
    (`rowTransfer=fetch`, `handoff.py`) or carried inline.  Arrow rather than pickled tuples: a
    compact buffer per task, and `read()` hands Spark record batches with no per-row conversion
    on the executors."""

    def __init__(self, index: int, count: int, ipc: bytes | None = None,
                 fetch_from: tuple | None = None) -> None:
        super().__init__(index)
        self.count = count
        self.ipc = ipc
        self.fetch_from = fetch_from  # (address, secret, slice id) at the runner's SliceServer

    def arrow_ipc(self):
        return self.ipc if self.fetch_from is None else fetch(*self.fetch_from)


def _slices(count: int, parts: int) -> list[slice]:
    """Contiguous slices of `count` items, at most `parts` of them, none empty."""
    parts = max(1, min(parts, count))
    size, extra = divmod(count, parts)
    out, pos = [], 0
    for i in range(parts):
        n = size + (1 if i < extra else 0)
        out.append(slice(pos, pos + n))
        pos += n
    return out


_QUEUE, _HEADERS = COLUMNS.index("queue") - 1, COLUMNS.index("headers") - 1  # in a ledger row


def _stream_of(row: tuple) -> tuple[str, str | None]:
    """Which ordered stream a ledger row belongs to: its queue, and within a partitioned queue
    its partition (the `x-partition` header the broker stamps on every delivery from one)."""
    return row[_QUEUE], dict(row[_HEADERS]).get("x-partition") if row[_HEADERS] else None


def plan_slices(seqs: list[int], rows: list[tuple], parts: int) -> list[tuple[list[int], list[tuple]]]:
    """A batch's input partitions, as (seqs, rows) each, along the queues and along the
    partitions of a partitioned queue: each stream's rows (in seq order) get a share of the
    `parts` in proportion to their number, at least one; no input partition mixes streams, so
    per-queue (per-partition) order holds in each."""
    if not rows:
        return []
    one_queue = len(set(map(itemgetter(_QUEUE), rows))) == 1
    if one_queue and not any(map(itemgetter(_HEADERS), rows)):  # the usual case: no grouping
        groups = [(seqs, rows)]
    else:
        by_stream: dict[tuple[str, str | None], tuple[list[int], list[tuple]]] = {}
        for seq, row in zip(seqs, rows):
            group = by_stream.setdefault(_stream_of(row), ([], []))
            group[0].append(seq)
            group[1].append(row)
        groups = list(by_stream.values())
    out = []
    for group_seqs, group_rows in groups:
        share = max(1, round(parts * len(group_rows) / len(rows)))
        out += [(group_seqs[piece], group_rows[piece]) for piece in _slices(len(group_rows), share)]
    return out


def split_rows(seqs: list[int], rows: list[tuple], parts: int) -> list[AmqpPartition]:
    """The input partitions of `plan_slices`, each carrying its rows (rowTransfer=inline)."""
    return [AmqpPartition(i, len(piece_seqs), ipc=to_ipc(record_batch(piece_seqs, piece_rows)))
            for i, (piece_seqs, piece_rows) in enumerate(plan_slices(seqs, rows, parts))]


class _BatchJob:
    """One batch's input partitions, planned and built on a thread of their own.  Started by
    `latestOffset` as soon as it has fixed the batch, the work overlaps Spark's own between
    the two calls (the offset log write, planning); `partitions` then waits until they are
    `planned`: with rowTransfer=fetch that is before their rows are built (the tasks' fetches
    wait for their slice), inline partitions are planned with their rows in them."""

    def __init__(self, start: int, end: int) -> None:
        self.start, self.end = start, end
        self.found = 0  # rows still in the ledger (a replay after a reconnect has fewer)
        self.partitions: list[AmqpPartition] = []
        self.error: BaseException | None = None
        self.planned = threading.Event()

    def run(self, rt: "_Runtime", parts: int) -> None:
        try:
            with rt.cond:
                seqs, rows = rt.ledger.rows_between(self.start, self.end)
            self.found = len(rows)
            server = rt.slice_server()
            if server is None:  # inline: the partitions carry the rows
                self.partitions = split_rows(seqs, rows, parts)
                return
            pieces = plan_slices(seqs, rows, parts)
            ids = [server.reserve(self.end) for _ in pieces]
            self.partitions = [AmqpPartition(i, len(ps), fetch_from=(server.address, server.secret, sid))
                               for i, (sid, (ps, _)) in enumerate(zip(ids, pieces))]
            self.planned.set()
            for sid, (piece_seqs, piece_rows) in zip(ids, pieces):
                try:
                    server.fill(sid, to_ipc(record_batch(piece_seqs, piece_rows)))
                except Exception as exc:  # noqa: BLE001 - the task that fetches it reports it
                    log.exception("amqp source: building rows (%s, %s] failed", self.start, self.end)
                    server.fill(sid, f"{type(exc).__name__}: {exc}")
        except BaseException as exc:  # noqa: BLE001 - raised in Spark's thread by `result`
            self.error = exc
        finally:
            self.planned.set()

    def result(self) -> list[AmqpPartition]:
        self.planned.wait()
        if self.error is not None:
            raise self.error
        return self.partitions


class _Runtime:
    """Live state of the runner process; never pickled."""

    def __init__(self, opts: SourceOptions) -> None:
        self.cond = threading.Condition()
        self.ledger = Ledger()
        self.queues = resolve_queues(opts)
        self.consumer = DriverConsumer(opts, self.ledger, self.cond, self.queues)
        # basic.qos applies per consumer: the window is prefetch x queues
        self.window = opts.prefetch * len(self.queues)
        self.started = False
        self.job: _BatchJob | None = None  # the batch latestOffset fixed last
        self.slices: SliceServer | None = None  # opened by the first batch (rowTransfer=fetch)
        self._opts = opts

    def slice_server(self) -> SliceServer | None:
        """The runner's slice server, or None when the partitions carry their rows (inline)."""
        if self.slices is None and self._opts.row_transfer == "fetch":
            self.slices = SliceServer(self._opts.row_server_host)
        return self.slices


class AmqpStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: SourceOptions) -> None:
        # No I/O here: this constructor also runs in the planner process (SPARK.md 8.3).
        self._opts = opts
        self._rt: _Runtime | None = None

    def __getstate__(self) -> dict:
        return {"_opts": self._opts, "_rt": None}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)

    def _runtime(self) -> _Runtime:
        if self._rt is None:
            self._rt = _Runtime(self._opts)
        return self._rt

    def _ensure_consuming(self) -> bool:
        rt = self._runtime()
        if rt.started:
            return True
        count = total_message_count(self._opts.urls, rt.queues, self._opts.heartbeat)
        if count is None:
            if self._opts.fail_on_missing_queue:
                raise ConsumerError(f"queue {self._opts.queue!r} does not exist "
                                    "(set failOnMissingQueue=false to wait for it)")
            return False
        rt.consumer.start()
        rt.started = True
        return True

    # -- Spark API ---------------------------------------------------------------------------

    def initialOffset(self) -> dict:
        return offset_json(0)

    def getDefaultReadLimit(self):
        return ReadMaxRows(self._opts.max_messages_per_batch)

    def prepareForTriggerAvailableNow(self) -> None:
        rt = self._runtime()
        count = total_message_count(self._opts.urls, rt.queues, self._opts.heartbeat)
        if count is None and self._opts.fail_on_missing_queue:
            raise ConsumerError(f"queue {self._opts.queue!r} does not exist")
        # The target: the count plus what this runner already holds (not in the count), taken
        # after the count (a delivery in between is counted twice: one idle wait at the end,
        # never a message left behind) and before consuming starts (all that arrives after it
        # is in the count).
        with rt.cond:
            held = len(rt.ledger.pending)
        if count is not None:
            self._ensure_consuming()
        with rt.cond:
            rt.ledger.remaining = (count or 0) + held
        log.info("amqp source: AvailableNow target %s messages", rt.ledger.remaining)

    def latestOffset(self, start: dict, limit=None) -> dict:
        rt = self._runtime()
        start_seq = offset_seq(start)
        self._ack_upto(start_seq)
        if not self._ensure_consuming():
            return offset_json(start_seq)
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        self._recount_after_reconnect(rt)
        with rt.cond:
            rt.consumer.raise_if_failed()
            if rt.ledger.remaining is not None:
                want = rt.ledger.wanted(max_rows)
                if want is not None:  # never more than the prefetch window can hold
                    want = min(want, rt.window - rt.ledger.unacked())
                if want:
                    # AvailableNow ends on the first empty answer: wait for the prefetch window
                    # to refill after the ack above instead of ending early.
                    rt.consumer.wait_for_pending(want, self._opts.idle_wait)
            end = rt.ledger.admit(max_rows, self._opts.max_bytes_per_batch)
        if end > start_seq:
            self._start_job(rt, start_seq, end)
        return offset_json(end)

    def _start_job(self, rt: _Runtime, start: int, end: int) -> _BatchJob:
        job = rt.job = _BatchJob(start, end)
        threading.Thread(target=job.run, args=(rt, self._opts.num_partitions),
                         name="amqp-source-batch", daemon=True).start()
        return job

    def _recount_after_reconnect(self, rt: _Runtime) -> None:
        """AvailableNow after a reconnect: the broker requeued what the old channel held, so the
        target is what the queues hold now plus what is already pending (deliveries between the
        count and the lock are counted twice: an over-count only costs one idle wait at the end,
        an under-count would leave messages behind)."""
        with rt.cond:
            if not rt.ledger.needs_recount:
                return
            rt.consumer.wait_connected(120.0)
            rt.consumer.raise_if_failed()
        count = total_message_count(self._opts.urls, rt.queues, self._opts.heartbeat)
        with rt.cond:
            if count is not None:
                rt.ledger.remaining = count + len(rt.ledger.pending)
            rt.ledger.needs_recount = False
        log.info("amqp source: reconnected; AvailableNow target now %s messages", rt.ledger.remaining)

    def partitions(self, start: dict, end: dict) -> list[AmqpPartition]:
        rt = self._runtime()
        start_seq, end_seq = offset_seq(start), offset_seq(end)
        job = rt.job
        if job is None or (job.start, job.end) != (start_seq, end_seq):  # a replay
            job = self._start_job(rt, start_seq, end_seq)
        parts = job.result()
        if job.found < end_seq - start_seq:
            log.warning("amqp source: replaying (%s, %s] with %s of %s rows; the rest belong to a "
                        "closed channel and are redelivered by the broker",
                        start_seq, end_seq, job.found, end_seq - start_seq)
        return parts

    def read(self, partition: AmqpPartition):
        return iter(from_ipc(partition.arrow_ipc()))

    def commit(self, end: dict) -> None:
        self._ack_upto(offset_seq(end))

    def stop(self) -> None:
        if self._rt is not None:
            self._rt.consumer.stop()
            if self._rt.slices is not None:
                self._rt.slices.close()

    def _ack_upto(self, seq: int) -> None:
        rt = self._runtime()
        with rt.cond:
            rt.ledger.resume_from(seq)
            tag = rt.ledger.ack_upto(seq)
            session = rt.ledger.session
        if rt.slices is not None:
            rt.slices.release_upto(seq)
        if tag is not None:
            rt.consumer.ack(session, tag)
