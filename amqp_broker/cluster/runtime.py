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
import uuid
import weakref
from typing import Any, Callable

import trio

from quorum.driver import NodeDriver
from quorum.log import AsyncLog
from quorum.raft import RaftOptions

from .catalog import GroupCatalog

__all__ = ["QuorumRuntime"]

_log = logging.getLogger(__name__)

ProposalCallback = Callable[[Any, BaseException | None], None]


def _guarded(fn: ProposalCallback) -> ProposalCallback:
    """Callbacks run inside the driver's apply loop: a failing one must not stop the node."""

    def call(reply: Any, error: BaseException | None) -> None:
        try:
            fn(reply, error)
        except Exception:
            _log.exception("quorum proposal callback failed")

    return call


class _NoPeers:
    """Single-node transport: there is nobody to send to."""

    def send(self, peer: str, group: str, data: bytes) -> bool:
        return False


class QuorumRuntime:
    def __init__(self, directory: str, node: str = "rabbit@localhost", *,
                 tick_interval: float = 0.05, snapshot_every: int = 4096) -> None:
        os.makedirs(directory, exist_ok=True)
        self.node = node
        self.directory = directory
        self.catalog = GroupCatalog(directory)
        self.log = AsyncLog.open(os.path.join(directory, "log"))
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
        self.driver.propose_nowait(group, data, _guarded(callback) if callback else None)

    def when_ready(self, group: str, on_ready: Callable[[], None]) -> None:
        """Call `on_ready()` once this node leads `group` again and has applied its log."""
        self._spawn(lambda: self._wait_ready(group, on_ready))

    def remove_group(self, group: str) -> None:
        """Stop hosting `group` and delete its durable state (a DELETE record in the WAL;
        its files go once that is durable). Its pending proposals fail with NotLeader."""
        self.driver.remove_group(group, delete=True)

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
