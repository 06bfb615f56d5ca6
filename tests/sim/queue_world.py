"""The real quorum queue on the simulated cluster: an `App` for `cluster.SimCluster`.

Every node holds a replica of one quorum queue: the broker's `QuorumMachine` (the pure
`quorum.fifo` machine, bodies read back from the node's Raft log, amqp_broker/queues/quorum_machine.py) driven by
`quorum.replica`, the same IO-free functions `quorum/driver.py` uses to apply committed
entries (leader at apply time: every effect; follower: only `LocalEffect`s), to install a
snapshot received from the leader (with the deliveries it covers) and to decide when and where
to compact (every `Faults.compact_every` entries, to the machine's release cursor: never past
a live message, whose body the checker reads back from the log at every delivery); a
restart restores the durable snapshot with plain `machine.restore`, as the driver's `_load`.
Snapshots carry the machine's own snapshot bytes after the cluster's digest.

Effects are run as `amqp_broker/queues/quorum_effects.py` runs them (mirrored, since that one
talks to broker channels): a Deliver only where `quorum.fifo.should_run` says (the consumer's
node: every node is a replica here), handed to the consumer process if it is still alive;
Confirm by the replica on the publisher's own node (a local effect, as the broker answers it); Monitor to the simulated
monitor; SetTimer, ReleaseCursor and ConsumerActive need nothing (no TTL, no x-expires, no
single active consumer). The queue has no length limit and no dead-letter exchange, so any
RejectPublish or DeadLetter is a failure. Even seeds use an unlimited delivery limit (returns
become Requeue entries), odd seeds a high one (plain Return).

Clients (clients.py) live on fixed "slots" (publisher or consumer on a node); a dead one is
replaced by a new process on the same node, at random during chaos and at once when draining.
`drain` (called by `cluster.run_seed` after healing and liveness) lets publishers resend until
confirmed and consumers settle everything, then `QueueChecker.check_end` asks that every
confirmed message was settled and nothing is left. Run it with `run_queue_seed`.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace

from amqp_broker.queues.quorum_machine import DeadLettered, QuorumMachine
from quorum.fifo import (ConsumerKey, Confirm, Deliver, Monitor, QueueConfig, QueueExpired,
                         RejectPublish, Settle, encode_command, leader_effects, should_run)
from quorum.raft import EntryKind, NotLeader, ProposalDropped, Role
from quorum.replica import apply_entries, compaction_point, install_snapshot, unwrap_forward

from .clients import Consumer, Monitor as ProcessMonitor, Publisher
from .cluster import Faults, SimCluster, SimNode, run_seed
from .queue_checker import COMPACTED, QueueChecker, QueueViolation

_FAILURES = (RejectPublish, DeadLettered, QueueExpired)
_DIGEST_EVERY = 8  # compare replica states at every index divisible by this


class _Replica:
    """One node's copy of the queue."""

    def __init__(self, config: QueueConfig, snapshot: bytes | None, node: SimNode) -> None:
        self.node = node
        self.machine = QuorumMachine(config, reader=self._read, cache_count=4)
        # a restart restores its durable snapshot as the driver's _load does: no effects
        self.state = (self.machine.init() if snapshot is None
                      else self.machine.restore(snapshot))

    def _read(self, index: int) -> bytes | None:
        """The node's Raft log as the driver's `entry_data`: None once compacted away."""
        raft = self.node.raft
        if raft is None or raft.snapshot_meta is not None and index <= raft.snapshot_meta.index:
            return None
        got = raft.entries(index, index + 1)
        if not got:
            return None
        e = got[0]
        return unwrap_forward(e.data) if e.kind is EntryKind.FORWARDED else e.data

    def body(self, index: int):
        snap = self.node.raft.snapshot_meta if self.node.raft is not None else None
        if snap is not None and index <= snap.index and self.machine.cache.get(index) is None:
            return COMPACTED
        return self.machine.body(self.state, index, keep=True)

    def payload(self, index: int) -> bytes:
        return self.machine.payload(self.state, index)

    def digest(self) -> bytes:
        return _digest(self.machine.snapshot(self.state))


def _digest(snapshot: bytes) -> bytes:
    return hashlib.blake2b(snapshot, digest_size=16).digest()


class QueueWorld:
    PUBLISH_P = (0.2, 0.01)  # chaos step: a publisher publishes (busy, quiet traffic)
    WAVE_P = 0.004  # chaos step: traffic turns from busy to quiet or back; quiet spells let
    #                 the queue drain, so that compaction (gated by live bodies) can happen
    CONSUMER_DEATH_P = 0.002
    PUBLISHER_DEATH_P = 0.001
    REFILL_P = 0.02  # chaos step: an empty slot on a running node gets a new process

    def __init__(self, cluster: SimCluster) -> None:
        self.c = cluster
        self.rng = cluster.rng
        limit = None if cluster.seed % 2 == 0 else 1000
        self.config = QueueConfig(name="q", delivery_limit=limit)
        self.checker = QueueChecker()
        self.monitor = ProcessMonitor(self)
        self.replicas: dict[str, _Replica] = {}
        ids = cluster.ids
        self.pub_slots: list[list] = [[ids[0], None], [ids[-1], None]]
        self.con_slots: list[list] = [[ids[1], None], [ids[2], None], [ids[-1], None]]
        self.consumers: dict[str, Consumer] = {}  # pid -> every consumer process ever
        self.publishers: dict[str, Publisher] = {}
        self.calm = False
        self._busy = True
        self._pids = 0

    @property
    def now(self) -> int:
        return self.c.now

    # -- what clients use ------------------------------------------------------------------
    def propose(self, origin: str | None, data: bytes) -> tuple[int, int, str] | None:
        """Propose through the leader `origin`'s node knows (None: whichever node leads);
        (index, term, leader) of the new entry, or None when no leader is known or
        reachable."""
        c = self.c
        if origin is None:
            leaders = [n for n in c.nodes.values() if n.up and n.raft.role is Role.LEADER]
            if not leaders:
                return None
            lead = max(leaders, key=lambda n: n.raft.term)
        else:
            home = c.nodes[origin]
            lid = home.raft.leader if home.up else None
            if lid is None or (lid != origin and c.net.is_cut(origin, lid)):
                return None
            lead = c.nodes[lid]
            if not lead.up:
                return None
        try:
            return lead.raft.propose(data, c.now), lead.raft.term, lead.id
        except (NotLeader, ProposalDropped):
            return None

    def still_leads(self, node: str, term: int) -> bool:
        n = self.c.nodes[node]
        return n.up and n.raft.role is Role.LEADER and n.raft.term == term

    def leader_view(self, node: str) -> tuple | None:
        n = self.c.nodes[node]
        return (n.raft.leader, n.raft.term) if n.up else None

    def committed_term(self, index: int) -> int | None:
        seen = self.c.checker.committed.get(index)
        return seen[0] if seen else None

    # -- App hooks: the replicas -----------------------------------------------------------
    def marker(self, name: bytes) -> bytes:
        return encode_command(Settle(ConsumerKey(name.decode(), "sim", "-"), ()))

    def node_started(self, node: SimNode, snapshot: bytes | None) -> None:
        rep = self.replicas[node.id] = _Replica(self.config, snapshot, node)
        if snapshot is not None:
            self.checker.stats["restarts_from_snapshot"] += 1
            self.checker.on_digest(node.id, node.applied, rep.digest(), record=False)

    def node_crashed(self, node: SimNode) -> None:
        for slot in [*self.pub_slots, *self.con_slots]:
            if slot[0] == node.id and slot[1] is not None and slot[1].alive:
                slot[1].die()

    def snapshot_received(self, node: SimNode, data: bytes) -> None:
        rep = self.replicas[node.id]
        rep.state, effects = install_snapshot(rep.machine, data)
        self.checker.stats["snapshots_received"] += 1
        self.checker.on_digest(node.id, node.applied, rep.digest(), record=False)
        self._run(node, None, effects, node.raft.is_leader, False)

    def applied(self, node: SimNode, committed: list, is_leader: bool) -> None:
        rep = self.replicas[node.id]
        ck = self.checker
        for e in committed:
            first = ck.first_to_apply(e.index)
            if first:  # the ledger follows the command through the driver's reply hook
                cmd = rep.machine.decode(e.data) if e.kind is EntryKind.NORMAL else None
                ck.before(e.index, cmd, rep.state.fifo)
                rep.state, effects = apply_entries(rep.machine, rep.state, [e], is_leader,
                                                   lambda entry, reply, _fw: ck.after(entry.index,
                                                                                 cmd, reply))
            else:
                rep.state, effects = apply_entries(rep.machine, rep.state, [e], is_leader)
            if effects:
                self._run(node, e.index, effects, is_leader, first)
            if e.index % _DIGEST_EVERY == 0:
                ck.on_digest(node.id, e.index, rep.digest(), record=True)

    def compact(self, node: SimNode, since: int, every: int) -> tuple[int, bytes] | None:
        rep = self.replicas[node.id]
        point = compaction_point(rep.machine, rep.state, node.applied, since, every)
        if point is None:
            return None
        self.checker.stats["compactions"] += 1
        index, data = point
        # whoever restores it must come back to the state every replica had at `index`
        self.checker.on_digest(node.id, index, _digest(data), record=True)
        return point

    def leader_elected(self, node: SimNode) -> None:
        """What the adapter runs when its replica starts leading (re-monitor every pid)."""
        self._run(node, None, leader_effects(self.replicas[node.id].state.fifo), True, False)

    def _run(self, node: SimNode, index: int | None, effects: list, is_leader: bool,
             first: bool) -> None:
        """Run the effects of one entry (index None: not from an entry) on `node`."""
        ck = self.checker
        members = None
        for eff in effects:
            t = type(eff)
            if t is Deliver:
                if index is not None:
                    ck.on_decision(node.id, index, eff, self.replicas[node.id].body,
                                   first)
                if members is None:
                    config = node.raft.config
                    members = (*config.voters, *config.learners)
                if should_run(eff, node.id, is_leader, members):
                    ck.on_run(node.id, eff)
                    con = self.consumers.get(eff.consumer.pid)
                    if con is not None and con.alive and con.key == eff.consumer:
                        con.deliver(eff.msgs)
            elif t is Confirm:  # local: the publisher's own node's replica answers it
                pub = self.publishers.get(eff.publisher)
                if pub is not None and pub.alive and pub.node == node.id:
                    pub.on_confirm(eff.seqs)
            elif t is Monitor:
                if eff.pid is not None:
                    self.monitor.on_monitor(eff.pid)
            elif t in _FAILURES:
                raise QueueViolation(f"{node.id} runs an unexpected {eff!r}")

    # -- App hooks: the clients ------------------------------------------------------------
    def inject(self) -> None:
        rng = self.rng
        if rng.random() < self.WAVE_P:
            self._busy = not self._busy
        if rng.random() < self.PUBLISH_P[0 if self._busy else 1]:
            live = [s[1] for s in self.pub_slots if s[1] is not None and s[1].alive]
            if live:
                rng.choice(live).publish()
        if rng.random() < self.CONSUMER_DEATH_P:
            self._kill(self.con_slots)
        if rng.random() < self.PUBLISHER_DEATH_P:
            self._kill(self.pub_slots)
        if rng.random() < self.REFILL_P:
            self._refill()

    def after_step(self) -> None:
        if self.calm:
            self._refill()
        for slot in self.pub_slots:
            p = slot[1]
            if p is not None and p.alive:
                p.poll()
        returns = not self.calm
        for slot in self.con_slots:
            con = slot[1]
            if con is not None and con.alive:
                con.poll(returns)
        self.monitor.outbox.poll()

    def _kill(self, slots: list[list]) -> None:
        live = [s[1] for s in slots if s[1] is not None and s[1].alive]
        if live:
            victim = self.rng.choice(live)
            self.c.trace.append(f"{self.now}ms client {victim.pid} dies")
            victim.die()

    def _refill(self) -> None:
        for slots, make in ((self.pub_slots, self._publisher), (self.con_slots, self._consumer)):
            for slot in slots:
                if (slot[1] is None or not slot[1].alive) and self.c.nodes[slot[0]].up:
                    slot[1] = make(slot[0])

    def _publisher(self, node: str) -> Publisher:
        self._pids += 1
        p = self.publishers[f"pub{self._pids}"] = Publisher(self, f"pub{self._pids}", node)
        return p

    def _consumer(self, node: str) -> Consumer:
        self._pids += 1
        pid = f"con{self._pids}"
        con = self.consumers[pid] = Consumer(self, pid, node, self.rng.randint(2, 16))
        return con

    # -- the end -----------------------------------------------------------------------------
    def drain(self, max_ms: int = 60_000) -> None:
        """No more chaos, publishing or returns: run until publishers hold no unconfirmed
        message, consumers nothing unsettled, and every replica is caught up and empty."""
        self.calm = True
        c = self.c
        end = c.now + max_ms
        while not self._drained():
            if c.now >= end:
                raise QueueViolation(f"not drained {max_ms}ms after healing: {self.describe()}")
            c.step(chaos=False)
        self.checker.check_end()

    def _drained(self) -> bool:
        for slot in self.pub_slots:
            p = slot[1]
            if p is None or (p.alive and p.pending):
                return False
        for slot in self.con_slots:
            con = slot[1]
            if con is None or (con.alive and (con.unacked or not con.outbox.idle)):
                return False
        if not self.monitor.outbox.idle:
            return False
        top = self.c.checker.max_committed
        for n in self.c.nodes.values():
            if not n.up or n.applied != top:
                return False
            if self.replicas[n.id].state.fifo.messages_total():
                return False
        return True

    def describe(self) -> str:
        parts = []
        for n in self.c.nodes.values():
            if n.up:
                f = self.replicas[n.id].state.fifo
                parts.append(f"{n.id}: a{n.applied} ready={len(f.ready)}"
                             f" out={f.messages_checked_out()} consumers={list(f.consumers)}")
        pend = {s[1].pid: list(s[1].pending) for s in self.pub_slots
                if s[1] is not None and s[1].pending}
        return "; ".join(parts) + f"; unconfirmed={pend}; stats={dict(self.checker.stats)}"


def queue_faults(base: Faults | None = None) -> Faults:
    """The chaos of a queue run: the clients make every proposal, membership stays fixed."""
    return replace(base or Faults(), propose=0.0, membership=0.0)


def run_queue_seed(seed: int, size: int, steps: int, faults: Faults | None = None) -> SimCluster:
    """`cluster.run_seed` with the quorum queue and its clients on every node."""
    return run_seed(seed, size, steps, queue_faults(faults), app_factory=QueueWorld)
