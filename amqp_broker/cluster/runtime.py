"""The node's quorum runtime: one Raft `NodeDriver` and one shared, fsynced WAL (`AsyncLog`)
for every quorum queue hosted on this broker node, under ``<data_dir>/quorum``.

Created by `amqp_broker.cluster.install_quorum` when the broker opens (before durable queues
are recovered, so recovered quorum queues find their logs) and run in the node's nursery
(`QuorumRuntime.run`). The quorum queue adapter (`amqp_broker.queues.quorum`) calls:

    runtime.add_group(group, machine, on_effects, on_ready,   # host / restart a queue's group
                      voters=..., learners=..., on_leader=...)
    runtime.propose(group, data, callback=None)               # on any replica; no task each
    runtime.remove_group(group)                               # queue deleted

Alone (no peers), a group has one member: the node votes for itself and leads. Every node runs
the inter-node `quorum.transport.Transport` (cookie-authenticated, one link per node pair, every
group on it; alone it only listens, so that another node can join it); a proposal made on a
replica that does not lead is forwarded to the leader by the driver (`NodeDriver.submit`). All
groups' proposals made between two driver passes go into one WAL batch and one fdatasync
(group commit).

The node list (`nodes`) changes at run time (`set_node`, `drop_node`: the metadata's node
records). The leader of every group brings its Raft membership in line with it, one change at a
time (`_reconcile`): a node that joined becomes a learner (of the metadata group: a voter once
caught up), a forgotten node is removed.
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
from quorum.raft import RaftError, RaftOptions
from quorum.transport import Transport

from amqp_broker.queues.remote_wire import RPC_GROUP

from .metadata import META_GROUP
from .nodes import ClusterConfig

__all__ = ["QuorumRuntime"]

_log = logging.getLogger(__name__)

ProposalCallback = Callable[[Any, BaseException | None], None]


class _NoPeers:
    """Single-node transport: there is nobody to send to."""

    def send(self, peer: str, group: str, data: bytes) -> bool:
        return False


class QuorumRuntime:
    def __init__(self, directory: str, cluster: ClusterConfig | str = "rabbit@localhost", *,
                 tick_interval: float = 0.05, snapshot_every: int = 4096,
                 log_config: LogConfig | None = None) -> None:
        os.makedirs(directory, exist_ok=True)
        if isinstance(cluster, str):  # a lone node by name (tests, tools)
            cluster = ClusterConfig(cluster, ("127.0.0.1", 0), {}, b"")
        self.cluster = cluster
        self.node = node = cluster.node
        self.directory = directory
        # log_config: raft.wal_max_size_bytes / raft.segment_max_entries from rabbitmq.conf
        self.log = AsyncLog.open(os.path.join(directory, "log"), log_config)
        self.on_rpc: Callable[[str, bytes], None] | None = None  # the server's RPC_GROUP frames
        # the server's answer to a node that asks to join or leave (`quorum.transport.ask`)
        self.on_request: Callable[[str, bytes], Any] | None = None
        # group -> the voters its metadata record wants (quorum queues' members), or None
        self.wanted_voters: Callable[[str], Any] | None = None
        # every node of the cluster (this one too) -> where it is dialled
        self.nodes: dict[str, tuple[str, int]] = {node: cluster.advertise, **cluster.peers}
        self.transport: Transport | None = None
        sender: Any = _NoPeers()
        if cluster.listen[1] <= 65535:
            self.transport = sender = Transport(node, cluster.peers, cluster.cookie,
                                                self._on_frame, listen=cluster.listen,
                                                on_request=self._answer, tls=cluster.tls,
                                                ticktime=cluster.ticktime)
        # the machine's `compactable` gate keeps compaction from outrunning live bodies
        # early messages: a leader's Appends leave before its own fsync, which then runs in
        # parallel with the followers' (thesis 10.2.1); the leader counts itself once durable.
        # follower acks: a follower (where consumers of other nodes are served) commits from
        # its peers' acks, without waiting for the leader to pass the commit index on
        # election_tick 20 (ticks of 50 ms): a follower campaigns after 1-2 s without its
        # leader. At 0.5-1 s, a node starved of CPU for a moment (three nodes and a JVM on two
        # cores in CI) lost a healthy leader to a needless election.
        # heartbeat_tick 5: an idle leader tells its followers every 250 ms, 4 to 8 times per
        # election timeout. Every 50 ms, each idle queue of a 3-node cluster cost its leader
        # 0.05% of a core in heartbeats and their answers (200 idle queues: 17.5%, now 8%).
        options = RaftOptions(early_messages=True, follower_acks=True, election_tick=20,
                              heartbeat_tick=5)
        self.driver = NodeDriver(node, self.log, sender, options=options,
                                 tick_interval=tick_interval, snapshot_every=snapshot_every)
        # pids of this process's channels start with the incarnation: anything else in a
        # recovered queue belongs to a process that died with the previous run
        self.incarnation = uuid.uuid4().hex[:12]
        self.pid_prefix = f"{node}/"  # every pid names its node: "<node>/<incarnation>.<n>"
        self._current = f"{node}/{self.incarnation}."
        self._watchers: set = set()  # clustered quorum queues told about links (`watch`)
        self._links: dict[str, bool] = {p: False for p in cluster.peers}
        self._down_since: dict[str, float] = {p: time.monotonic() for p in cluster.peers}
        self._changing: set[str] = set()  # groups with a membership change under way
        self._pids: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._pid_seq = 0
        self._nursery: trio.Nursery | None = None
        self._deferred: list[Callable[[], Any]] = []
        self._running = False
        # commit latency (propose -> apply on this leader): one sampled proposal in flight per
        # group, a moving average per group; the other proposals stay callback-free
        self._sampling: dict[str, float] = {}
        self._latency: dict[str, float] = {}
        self._replaying: set[str] = set()  # groups added whose `on_ready` has not run yet
        self._replayed = trio.Event()
        self._replayed.set()

    # -- process ids ----------------------------------------------------------------------------
    def pid_of(self, owner: Any) -> str:
        """A stable id for a channel (consumer/publisher process), unique across restarts."""
        pid = self._pids.get(owner)
        if pid is None:
            self._pid_seq += 1
            pid = self._pids[owner] = f"{self._current}{self._pid_seq}"
        return pid

    def is_current(self, pid: str | None) -> bool:
        return pid is not None and pid.startswith(self._current)

    # -- cluster --------------------------------------------------------------------------------
    @property
    def peers(self) -> list[str]:
        """The other nodes of the cluster, sorted."""
        return sorted(n for n in self.nodes if n != self.node)

    def down_for(self, node: str) -> float:
        """Seconds since this node last saw `node` up (since start if never): 0 if it is up."""
        if self.is_running(node):
            return 0.0
        return time.monotonic() - self._down_since.get(node, time.monotonic())

    def set_node(self, name: str, addr: tuple[str, int]) -> None:
        """`name` is (now) a node of the cluster, dialled at `addr`."""
        if name == self.node or self.nodes.get(name) == tuple(addr):
            return
        self.nodes[name] = tuple(addr)
        self._links.setdefault(name, False)
        self._down_since.setdefault(name, time.monotonic())
        if self.transport is not None:
            self.transport.add_peer(name, tuple(addr))
        _log.info("node %s: %s is a node of the cluster (%s:%d)", self.node, name, *addr)

    def drop_node(self, name: str) -> None:
        """`name` left the cluster (forgotten or reset): no link to it any more."""
        if name == self.node or self.nodes.pop(name, None) is None:
            return
        if self.transport is not None:
            self.transport.remove_peer(name)
        self._down_since.pop(name, None)
        if self._links.pop(name, False):
            for q in list(self._watchers):
                q.node_changed(name, False)
        _log.info("node %s: %s is no longer a node of the cluster", self.node, name)

    async def _answer(self, peer: str, question: bytes) -> bytes:
        if self.on_request is None:
            return b""
        return await self.on_request(peer, question)

    def _reconcile(self) -> None:
        """On every group this node leads (in a cluster), one membership change towards the
        node list and the wanted voters (`wanted_voters(group)`: a quorum queue's members as
        its metadata record names them): remove a node that left; add a node that joined as a
        learner (the metadata group's learners become voters once caught up); promote a
        learner that should vote once it holds every committed entry; demote a voter that
        should not (removed, it comes back as a learner on the next pass). Looked at from
        here; a change is made inside the driver's loop (`NodeDriver.control`)."""
        if not self.cluster.clustered:
            return
        nodes = set(self.nodes)
        for group in self.driver.groups():
            raft = self.driver.raft(group)
            if not raft.is_leader or group in self._changing:
                continue
            if self._reconcile_group(group, raft, nodes, 0, apply=False):
                self._changing.add(group)
                self.spawn(lambda g=group: self._change(g, lambda r, now, g=g: (
                    self._reconcile_group(g, r, set(self.nodes), now, apply=True))))

    async def _change(self, group: str, fn: Callable[[Any, int], Any]) -> None:
        try:
            await self.driver.control(group, fn)
        except (RaftError, ValueError, KeyError) as err:  # a change in flight, leader moving
            _log.debug("group %s: membership change deferred: %s", group, err)
        finally:
            self._changing.discard(group)

    def _reconcile_group(self, group: str, raft: Any, nodes: set, now: int,
                         apply: bool) -> bool:
        """Is a change due (`apply` False), or make it (True: inside the loop)?"""
        if not raft.is_leader:
            return False
        config = raft.config
        voters, learners = set(config.voters), set(config.learners)
        gone = sorted((voters | learners) - nodes)
        if gone:
            if gone[0] in voters and len(voters) == 1:
                return False  # never remove the last voter
            if apply:
                raft.remove(gone[0], now)
            return True
        new = sorted(nodes - voters - learners)
        if new:
            if apply:
                raft.add_learner(new[0], now, auto_promote=group == META_GROUP)
            return True
        wanted = self.wanted_voters(group) if self.wanted_voters is not None else None
        if not wanted:
            return False
        wanted = set(wanted) & nodes
        for node in sorted(wanted & learners):
            if raft.caught_up(node):
                if apply:  # caught up: it counts towards the quorum from now on
                    raft.promote(node, now)
                return True
        extra = sorted(voters - wanted)
        if extra and len(voters) > 1:
            if apply:
                raft.remove(extra[0], now)
            return True
        return False

    def transfer_leadership(self, group: str, to: str) -> bool:
        """Hand `group`'s leadership to voter `to` if this node leads it (rebalance); done
        inside the driver's loop."""
        if not self.driver.has_group(group) or to == self.node:
            return False
        if not self.driver.raft(group).is_leader:
            return False

        def hand_over(raft: Any, _now: int) -> None:
            if raft.is_leader:
                raft.transfer_leadership(to)

        self.spawn(lambda: self._change(group, hand_over))
        return True

    @staticmethod
    def _now_ms() -> int:
        return int(time.time() * 1000)

    def _on_frame(self, peer: str, group: str, data: bytes) -> None:
        if group == RPC_GROUP:
            if self.on_rpc is not None:
                self.on_rpc(peer, data)
            return
        self.driver.deliver(peer, group, data)

    def send_rpc(self, peer: str, data: bytes) -> bool:
        """A frame for the server's handler on `peer` (`on_rpc`); False if it was dropped."""
        return self.transport is not None and self.transport.send(peer, RPC_GROUP, data)

    def is_running(self, node: str) -> bool:
        """This node, or a peer with a live authenticated link."""
        if node == self.node:
            return True
        return self.transport is not None and self.transport.is_connected(node)

    def new_group_id(self) -> str:
        """A Raft group id never used before, anywhere (a deleted queue's log is never met)."""
        return f"qq:{uuid.uuid4().hex}"

    def leaders_per_node(self) -> dict[str, int]:
        """How many groups each node leads, as this node knows (the balanced locator)."""
        out: dict[str, int] = {}
        for group in self.driver.groups():
            leader = self.driver.status(group).leader
            if leader is not None:
                out[leader] = out.get(leader, 0) + 1
        return out

    def watch(self, queue: Any) -> None:
        """Tell `queue` when links go down or come back (`node_changed`), and let it check its
        own commands every few seconds (`audit`)."""
        self._watchers.add(queue)

    def unwatch(self, queue: Any) -> None:
        self._watchers.discard(queue)

    async def _watch_links(self, period: float = 0.2, audit_every: int = 10) -> None:
        """A dropped link is a node down (as Erlang distribution's nodedown): a killed node's
        sockets close at once. Links are looked at every `period` seconds."""
        n = 0
        while True:
            await trio.sleep(period)
            n += 1
            for peer, was_up in list(self._links.items()):
                up = self.is_running(peer)
                if up != was_up:
                    self._links[peer] = up
                    if up:
                        self._down_since.pop(peer, None)
                    else:
                        self._down_since[peer] = time.monotonic()
                    _log.info("node %s is %s", peer, "up" if up else "down")
                    for q in list(self._watchers):
                        q.node_changed(peer, up)
            if n % audit_every == 0:
                for q in list(self._watchers):
                    q.audit()
            if n % 5 == 0:
                self._reconcile()

    # -- groups ---------------------------------------------------------------------------------
    def add_group(self, group: str, machine: Any, on_effects: Callable[[str, list], None],
                  on_ready: Callable[[], None], *, voters: list[str] | None = None,
                  learners: list[str] = (), on_leader: Callable[[str | None], None] | None = None,
                  first: bool = False) -> None:
        """Host `group` (replaying its log if it has one) and call `on_ready()` once this
        replica has applied what its log held. Alone (`voters` None or just this node) the node
        campaigns at once and `on_ready` waits for it to lead; in a cluster the members elect
        a leader among themselves (`first`: this node asks for votes at once when the group is
        new, so the locator's choice usually leads). `learners` replicate without voting."""
        # None: alone; []: a node that joined, learning the members from the leader
        voters = [self.node] if voters is None else list(voters)
        alone = voters == [self.node] and not learners
        self.driver.add_group(group, machine, voters=voters, learners=learners,
                              on_effects=on_effects, on_leader=on_leader)
        if alone or (first and self.driver.status(group).last_index == 0):
            self.driver.raft(group).campaign()
        self.driver.wake(group)
        st = self.driver.status(group)
        target = st.last_index if alone else self.log.state(group).commit
        if not self._replaying:
            self._replayed = trio.Event()
        self._replaying.add(group)
        self.spawn(lambda: self._replay(group, on_ready, alone, target))

    async def _replay(self, group: str, on_ready: Callable[[], None], alone: bool,
                      target: int) -> None:
        try:
            await self._wait_ready(group, on_ready, alone, target)
        finally:
            self._replaying.discard(group)
            if not self._replaying:
                self._replayed.set()

    async def _wait_ready(self, group: str, on_ready: Callable[[], None], alone: bool = True,
                          target: int = 0) -> None:
        driver = self.driver
        delay = 0.002
        while driver.has_group(group):
            st = driver.status(group)
            if (st.is_leader and st.applied >= st.last_index) if alone else st.applied >= target:
                on_ready()
                return
            await trio.sleep(delay)
            delay = min(delay * 2, 0.05)  # many groups replaying at start-up: poll less

    async def replayed(self, report_every: float = 10.0) -> None:
        """Return once every group added so far has replayed its local log (`on_ready` ran,
        or the group went): the node opens its listeners only then, as RabbitMQ recovers its
        queues before it starts networking, so that a client never sees a recovered queue
        half replayed (a passive declare counting part of its backlog). Logs who it waits for
        every `report_every` seconds."""
        while self._replaying:
            with trio.move_on_after(report_every):
                await self._replayed.wait()
                return
            _log.info("waiting for %d Raft group(s) to replay their logs", len(self._replaying))

    def propose(self, group: str, data: bytes, callback: ProposalCallback | None = None) -> None:
        """Propose on this replica, leader or not (`NodeDriver.submit`): `callback(reply,
        None)` once applied here, `callback(None, error)` when the outcome is unknown."""
        if group not in self._sampling:
            callback = self._sampled(group, callback)
        try:
            # the driver already logs and swallows a failing callback
            self.driver.submit(group, data, callback)
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
        self.spawn(lambda: self._wait_ready(group, on_ready))

    def remove_group(self, group: str) -> None:
        """Stop hosting `group` and delete its durable state (a DELETE record in the WAL;
        its files go once that is durable). Its pending proposals fail with NotLeader."""
        self.driver.remove_group(group, delete=True)
        self._latency.pop(group, None)

    def spawn(self, fn: Callable[[], Any]) -> None:
        """Run the async `fn()` in the runtime's nursery (once it runs)."""
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
                if self.transport is not None:
                    await self._start_transport(nursery)
                nursery.start_soon(self._watch_links)
                await nursery.start(self.driver.run)
                self._nursery = nursery
                deferred, self._deferred = self._deferred, []
                for fn in deferred:
                    nursery.start_soon(fn)
                _log.info("quorum runtime: %d Raft group(s) under %s",
                          len(self.driver.groups()), self.directory)
                task_status.started()
        finally:
            self._nursery = None
            self.log.close()

    async def _start_transport(self, nursery: trio.Nursery) -> None:
        try:
            port = await nursery.start(self.transport.run)
        except (OSError, BaseExceptionGroup) as err:
            if self.cluster.clustered or not _only_os_errors(err):
                raise
            # alone, the node serves without it; only joining it is not possible
            _log.warning("node %s: inter-node listener not started on %s:%d (%s): other nodes "
                         "cannot join this one", self.node, *self.cluster.listen, err)
            self.transport = None
            return
        if self.cluster.clustered:
            _log.info("node %s: cluster links on port %d to %s", self.node, port,
                      ", ".join(self.peers))

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

    def raft_status(self, group: str) -> dict[str, Any] | None:
        """This replica of `group` as the management API's queue status shows it (None if the
        node does not host it): role, membership, term and indexes; on the leader also every
        replica's match index (what it has durably, as the leader knows) and next index."""
        if not self.driver.has_group(group):
            return None
        st = self.driver.raft(group).status()
        out = {"node": self.node, "state": st["role"], "leader": st["leader"],
               "membership": "learner" if self.node in st["learners"] else "voter",
               "term": st["term"], "last_index": st["last_index"], "commit_index": st["commit"],
               "applied_index": st["applied"], "snapshot_index": st["snapshot_index"],
               "voters": sorted(st["voters"]), "learners": sorted(st["learners"])}
        if "progress" in st:
            out["replicas"] = {peer: {"match_index": p["match"], "next_index": p["next"],
                                      "replication": p["state"]}
                               for peer, p in sorted(st["progress"].items())}
        return out

    def wal_bytes(self) -> int:
        """Size of the node's current WAL file (the log counts what it writes: no stat)."""
        return self.log.store.statistics()["wal_size"]


def _only_os_errors(err: BaseException) -> bool:
    if isinstance(err, BaseExceptionGroup):
        return all(_only_os_errors(e) for e in err.exceptions)
    return isinstance(err, OSError)


def _file_bytes(paths: Any) -> int:
    total = 0
    for path in paths:
        try:
            total += os.path.getsize(path)
        except OSError:  # removed by a compaction meanwhile
            pass
    return total
