"""The node's quorum runtime: one Raft `NodeDriver` and one shared, fsynced WAL (`AsyncLog`)
for every quorum queue hosted on this broker node, under ``<data_dir>/quorum``.

Created by `amqp_broker.cluster.install_quorum` when the broker opens (before durable queues
are recovered, so recovered quorum queues find their logs) and run in the node's nursery
(`QuorumRuntime.run`). The quorum queue adapter (`amqp_broker.queues.quorum`) calls:

    runtime.add_group(group, machine, on_effects, on_ready)   # host / restart a queue's group
    runtime.propose(group, data, callback=None)               # no task per proposal
    runtime.remove_group(group)                               # queue deleted

Every queue is a group of one member for now: the node votes for itself and leads. All groups'
proposals made between two driver passes go into one WAL batch and one fdatasync (group commit).
"""

from __future__ import annotations

import logging
import os
import time
import uuid
import weakref
from typing import Any, Callable

import trio

from quorum.driver import NodeDriver
from quorum.log import AsyncLog, LogConfig
from quorum.raft import RaftOptions

from .catalog import GroupCatalog

__all__ = ["QuorumRuntime"]

_log = logging.getLogger(__name__)

ProposalCallback = Callable[[Any, BaseException | None], None]


class _NoPeers:
    """Single-node transport: there is nobody to send to."""

    def send(self, peer: str, group: str, data: bytes) -> bool:
        return False


class QuorumRuntime:
    def __init__(self, directory: str, node: str = "rabbit@localhost", *,
                 tick_interval: float = 0.05, snapshot_every: int = 4096,
                 log_config: LogConfig | None = None) -> None:
        os.makedirs(directory, exist_ok=True)
        self.node = node
        self.directory = directory
        self.catalog = GroupCatalog(directory)
        # log_config: raft.wal_max_size_bytes / raft.segment_max_entries from rabbitmq.conf
        self.log = AsyncLog.open(os.path.join(directory, "log"), log_config)
        # the machine's `compactable` gate keeps compaction from outrunning live bodies
        self.driver = NodeDriver(node, self.log, _NoPeers(), options=RaftOptions(),
                                 tick_interval=tick_interval, snapshot_every=snapshot_every)
        # pids of this process's channels start with the incarnation: anything else in a
        # recovered queue belongs to a process that died with the previous run
        self.incarnation = uuid.uuid4().hex[:12]
        self._pids: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._pid_seq = 0
        self._nursery: trio.Nursery | None = None
        self._deferred: list[Callable[[], Any]] = []
        self._running = False
        # commit latency (propose -> apply on this leader): one sampled proposal in flight per
        # group, a moving average per group; the other proposals stay callback-free
        self._sampling: dict[str, float] = {}
        self._latency: dict[str, float] = {}

    # -- process ids ----------------------------------------------------------------------------
    def pid_of(self, owner: Any) -> str:
        """A stable id for a channel (consumer/publisher process), unique across restarts."""
        pid = self._pids.get(owner)
        if pid is None:
            self._pid_seq += 1
            pid = self._pids[owner] = f"{self.incarnation}.{self._pid_seq}"
        return pid

    def is_current(self, pid: str | None) -> bool:
        return pid is not None and pid.startswith(self.incarnation + ".")

    # -- groups ---------------------------------------------------------------------------------
    def add_group(self, group: str, machine: Any, on_effects: Callable[[str, list], None],
                  on_ready: Callable[[], None]) -> None:
        """Host `group` (replaying its log if it has one), make this node its leader and call
        `on_ready()` once it leads and has applied everything in its log."""
        self.driver.add_group(group, machine, voters=[self.node], on_effects=on_effects)
        self.driver.raft(group).campaign()
        self.driver.wake(group)
        self._spawn(lambda: self._wait_ready(group, on_ready))

    async def _wait_ready(self, group: str, on_ready: Callable[[], None]) -> None:
        driver = self.driver
        delay = 0.002
        while driver.has_group(group):
            st = driver.status(group)
            if st.is_leader and st.applied >= st.last_index:
                on_ready()
                return
            await trio.sleep(delay)
            delay = min(delay * 2, 0.05)  # many groups replaying at start-up: poll less

    def propose(self, group: str, data: bytes, callback: ProposalCallback | None = None) -> None:
        """Raises `quorum.raft.NotLeader` when this node does not lead the group."""
        if group not in self._sampling:
            callback = self._sampled(group, callback)
        try:
            # the driver already logs and swallows a failing callback
            self.driver.propose_nowait(group, data, callback)
        except BaseException:
            self._sampling.pop(group, None)
            raise

    def _sampled(self, group: str, callback: ProposalCallback | None) -> ProposalCallback:
        self._sampling[group] = started = time.monotonic()

        def done(reply: Any, error: BaseException | None) -> None:
            self._sampling.pop(group, None)
            if error is None:
                took = time.monotonic() - started
                old = self._latency.get(group)
                self._latency[group] = took if old is None else 0.8 * old + 0.2 * took
            if callback is not None:
                callback(reply, error)

        return done

    def when_ready(self, group: str, on_ready: Callable[[], None]) -> None:
        """Call `on_ready()` once this node leads `group` again and has applied its log."""
        self._spawn(lambda: self._wait_ready(group, on_ready))

    def remove_group(self, group: str) -> None:
        """Stop hosting `group` and delete its durable state (a DELETE record in the WAL;
        its files go once that is durable). Its pending proposals fail with NotLeader."""
        self.driver.remove_group(group, delete=True)
        self._latency.pop(group, None)

    def _spawn(self, fn: Callable[[], Any]) -> None:
        if self._nursery is None:
            self._deferred.append(fn)
        else:
            self._nursery.start_soon(fn)

    # -- life cycle -----------------------------------------------------------------------------
    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the driver (WAL writer, ticker, ready loop) until cancelled. Once per node:
        two loops over one driver would apply entries twice."""
        if self._running:
            raise RuntimeError("QuorumRuntime.run called twice")
        self._running = True
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(self.driver.run)
                self._nursery = nursery
                deferred, self._deferred = self._deferred, []
                for fn in deferred:
                    nursery.start_soon(fn)
                _log.info("quorum runtime: %d queue group(s) under %s",
                          len(self.catalog.groups()), self.directory)
                task_status.started()
        finally:
            self._nursery = None
            self.log.close()

    def statistics(self) -> dict[str, Any]:
        return self.driver.statistics()

    # -- metrics (mgmt/metrics.py) --------------------------------------------------------------
    def raft_metrics(self, group: str) -> dict[str, Any]:
        """term, commit, applied, last_written (handed to the WAL), snapshot index, commit
        latency in seconds (moving average; 0 before the first sample) and segment bytes."""
        st = self.driver.raft(group).status()
        g = self.log.store.groups.get(group)
        return {"term": st["term"], "commit": st["commit"], "applied": st["applied"],
                "last_written": st["last_index"], "snapshot": st["snapshot_index"],
                "commit_latency": self._latency.get(group, 0.0),
                "segment_bytes": _file_bytes(s.path for s in g.segments) if g else 0}

    def wal_bytes(self) -> int:
        """Size of the node's current WAL file (the log counts what it writes: no stat)."""
        return self.log.store.statistics()["wal_size"]


def _file_bytes(paths: Any) -> int:
    total = 0
    for path in paths:
        try:
            total += os.path.getsize(path)
        except OSError:  # removed by a compaction meanwhile
            pass
    return total
