"""`AsyncLog`: the trio face of the node's durable log, with the single WAL writer task.

Used by `quorum.driver` (one per node, shared by every Raft group on it). Writes are plain
calls that return a token at once; `await wait_durable(token)` returns once the WAL batch that
holds the write has been written and fdatasynced. The writer task takes everything queued by
every group since its last batch and does one write + one fdatasync, so while one batch is on
its way to disk the next one fills up (group commit, like ra's WAL). A large batch is written
in a worker thread, a small one on the trio thread while the disk is fast (`DiskJobs`).

If the disk fails, the writer stores the error, wakes every waiter with `LogFailed` and
raises it, which cancels the node's nursery: a node with a broken disk stops.
"""

from __future__ import annotations

from functools import partial
from typing import Callable, Iterable

import trio

from .disk import OsDisk
from .diskjobs import DiskJobs
from .recover import open_store
from .snapshot import StoredSnapshot
from .store import GroupState, LogConfig, LogFailed, LogStore

__all__ = ["AsyncLog"]


class AsyncLog:
    def __init__(self, store: LogStore) -> None:
        self.store = store
        self._wake = trio.Event()
        self._durable_ev = trio.Event()
        self._rolling: trio.Event | None = None  # a rollover under way; set when it is done
        self.on_durable: Callable[[int], None] | None = None  # called after each batch
        self.jobs = DiskJobs()  # a small batch is written on the trio thread
        self._busy = False  # the writer task is between batches' wake-up and its next wait

    @classmethod
    def open(cls, directory: str, config: LogConfig | None = None, disk: OsDisk | None = None) -> "AsyncLog":
        """Recover the log in `directory` (blocking; call before the node starts serving)."""
        return cls(open_store(directory, config, disk))

    # -- writes: in memory at once, durable after the writer's next batch -------------------
    def append(self, group: str, entries: Iterable[tuple[int, int, bytes]], flush: bool = True) -> int:
        """Queue `entries`; returns the token to wait for. `flush=False`: the caller calls
        `flush` once it has queued everything of its pass."""
        token = self.store.append(group, entries)
        if flush:
            self._wake.set()
        return token

    def truncate(self, group: str, from_index: int) -> int:
        token = self.store.truncate(group, from_index)
        self._wake.set()
        return token

    def set_hard_state(self, group: str, term: int, vote: str | None, commit: int,
                       flush: bool = True) -> int:
        token = self.store.set_hard_state(group, term, vote, commit)
        if flush:
            self._wake.set()
        return token

    def delete_group(self, group: str) -> int:
        """Delete the group's durable state (see `LogStore.delete_group`); returns a token."""
        token = self.store.delete_group(group)
        self._wake.set()
        return token

    async def save_snapshot(self, group: str, snap: StoredSnapshot, discard: bool = False) -> int:
        """Write the snapshot file (worker thread), then compact and queue its WAL record."""
        await trio.to_thread.run_sync(self.store.write_snapshot_file, group, snap)
        token = self.store.note_snapshot(group, snap.index, snap.term, discard)
        self._wake.set()
        return token

    async def save_checkpoint(self, group: str, snap: StoredSnapshot) -> None:
        """Write a checkpoint file of the group (worker thread): a snapshot at `snap.index`
        that leaves the log as it is (`LogStore.checkpoint_indexes`, `read_checkpoint`).
        Durable on return."""
        await trio.to_thread.run_sync(self.store.write_snapshot_file, group, snap, True)

    async def drop_checkpoints(self, group: str, indexes: list[int]) -> None:
        await trio.to_thread.run_sync(self.store.drop_checkpoints, group, indexes)

    def drop_checkpoints_now(self, group: str, indexes: list[int]) -> None:
        """`drop_checkpoints`, blocking (when a group starts)."""
        self.store.drop_checkpoints(group, indexes)

    # -- reads ------------------------------------------------------------------------------
    def entries(self, group: str, lo: int, hi: int) -> list[tuple[int, int, bytes]]:
        return self.store.entries(group, lo, hi)

    def term(self, group: str, index: int) -> int | None:
        return self.store.term(group, index)

    def state(self, group: str) -> GroupState:
        return self.store.state(group)

    def hard_state(self, group: str) -> tuple[int, str | None, int]:
        return self.store.hard_state(group)

    def read_snapshot(self, group: str) -> StoredSnapshot | None:
        return self.store.read_snapshot(group)

    def checkpoint_indexes(self, group: str) -> list[int]:
        return self.store.checkpoint_indexes(group)

    def read_checkpoint(self, group: str, index: int) -> StoredSnapshot | None:
        return self.store.read_checkpoint(group, index)

    @property
    def durable(self) -> int:
        return self.store.durable

    def is_durable(self, token: int) -> bool:
        return self.store.durable >= token

    async def wait_durable(self, token: int) -> None:
        """Return once `token` is durable; raise `LogFailed` if the log failed first."""
        while self.store.durable < token:
            if self.store.failed is not None:
                raise self.store.failed_error()
            await self._durable_ev.wait()

    # -- the writer task --------------------------------------------------------------------
    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The single WAL writer. Run it in the node's nursery for the life of the node.

        A rollover does not stall the WAL: the writer starts the next WAL file in its own
        sequence, and the frozen memory tables go to segment files in a second task while
        batches go on being written to the new file."""
        task_status.started()
        async with trio.open_nursery() as nursery:
            await self._write(nursery)

    async def _write(self, nursery: trio.Nursery) -> None:
        store = self.store
        try:
            while True:
                self._busy = False
                await self._wake.wait()
                self._wake = trio.Event()
                self._busy = True
                while store.last_token > store.durable:
                    nbytes = store.pending_bytes
                    batch, upto = store.take_batch()
                    # not abandoned on cancel: a write in flight is waited for
                    await self.jobs.run(partial(store.write_batch, batch), nbytes)
                    batch = []  # this frame outlives the loop: hold no batch (payloads)
                    store.mark_durable(upto)
                    self._notify()
                    await self._housekeep(nursery)
                await self._housekeep(nursery)
        except LogFailed:
            self._notify()  # waiters see the failure
            raise

    def flush(self) -> None:
        """Have what is queued written and fdatasynced: here and now, on the calling task, when
        the writer task is idle and the batch is small enough that it would write it on the
        trio thread too; else by the writer task. At a low rate writing here saves a Raft
        round three task switches (the writer's wake-up, then its waiter's, and a wake-up of
        the writer with nothing left to do). Raises `LogFailed` as the writer does (the node
        stops)."""
        store = self.store
        if store.last_token <= store.durable:
            return
        if self._busy or not self.jobs.takes_inline(store.pending_bytes):
            self._wake.set()
            return
        batch, upto = store.take_batch()
        try:
            self.jobs.run_inline(partial(store.write_batch, batch))
        except LogFailed:
            self._notify()
            raise
        store.mark_durable(upto)
        self._notify()
        if store.housekeeping_due:
            self._wake.set()  # rollovers and file removals are the writer task's

    async def _housekeep(self, nursery: trio.Nursery) -> None:
        """Unless a rollover is under way (it writes into group directories): remove deleted
        groups' files, and start a rollover if one is due: the next WAL file now, in the
        writer's sequence; the segments in `_roll`, beside the batches that follow."""
        store = self.store
        if self._rolling is not None:
            if not self._rolling.is_set():
                return
            self._rolling = None
        dead = store.take_deletions()
        if dead:
            await trio.to_thread.run_sync(store.remove_files, dead)
        if store.needs_rollover():
            plan = store.begin_rollover()
            await trio.to_thread.run_sync(store.switch_wal, plan)
            self._rolling = trio.Event()
            nursery.start_soon(self._roll, plan, self._rolling)

    async def _roll(self, plan, done: trio.Event) -> None:
        """The rest of a rollover, beside the writer: segments, then the old WAL goes. The
        plan's frozen memory tables hold every payload of the old WAL until it returns."""
        store = self.store
        try:
            await trio.to_thread.run_sync(store.write_segments, plan)
            store.finish_rollover(plan)
            await trio.to_thread.run_sync(store.drop_old_wal, plan)
        except LogFailed:
            self._notify()
            raise
        done.set()
        self._wake.set()  # another rollover may be due

    def _notify(self) -> None:
        ev, self._durable_ev = self._durable_ev, trio.Event()
        ev.set()
        if self.on_durable is not None:
            self.on_durable(self.store.durable)

    def close(self) -> None:
        self.store.close()

    def statistics(self) -> dict[str, int]:
        return self.store.statistics()
