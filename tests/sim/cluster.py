"""A whole Raft cluster in one plain loop: seeded RNG, simulated clock, `SimNetwork`, `SimDisk`
per node, crashes and restarts from durable state, and `SafetyChecker` fed at every step.

`run_seed(seed, size, steps)` is what the tests call. One step handles one event: a message
delivery, a tick, a disk sync, or an injected fault or client proposal; then every node's
Ready is processed following the contract in quorum/raft/ready.py (stage -> sync -> send ->
apply -> advance), with the sync happening a simulated while later so that crashes can hit the
window in between. After the chaos phase the network heals and every node restarts; the run
then requires a leader and a freshly proposed entry applied on every node (liveness).

By default each node's state machine is only a digest chain over the applied entries. With an
`app_factory`, an application runs on top (e.g. `queue_world.QueueWorld`: the real quorum
queue machine with publishing and consuming clients); the cluster then calls its hooks
(`App` below) and carries its snapshot bytes after the digest in every snapshot.
"""

from __future__ import annotations

import random
import struct
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Protocol

from quorum.raft import (ConfigChangeInProgress, EntryKind, NotLeader, ProposalDropped, RaftNode,
                         RaftOptions, Ready, Role, Snapshot, VoteResp)

from .checker import SafetyChecker, SafetyViolation, chain
from .disk import SimDisk
from .network import NetProfile, SimNetwork

TICK_MS = 10
_ZERO = bytes(16)
_HEAD = struct.Struct(">Q16s")  # snapshot data: applied index, digest, then the app's bytes


class App(Protocol):
    """An application on the simulated cluster; every hook is called by the cluster."""

    def marker(self, name: bytes) -> bytes:
        """A harmless command carrying `name` (a unique entry for liveness checks)."""

    def node_started(self, node: SimNode, snapshot: bytes | None) -> None:
        """`node` (re)starts from its durable snapshot's app bytes (None: no snapshot)."""

    def node_crashed(self, node: SimNode) -> None: ...

    def snapshot_received(self, node: SimNode, data: bytes) -> None: ...

    def applied(self, node: SimNode, committed: list, is_leader: bool) -> None:
        """`node` applies these committed entries (after its digest chain did)."""

    def compact(self, node: SimNode, since: int, every: int) -> tuple[int, bytes] | None:
        """(index, the app's snapshot bytes of its state at that applied index) if `node`
        should compact now, else None. The index may be below the applied one (a quorum
        queue's release cursor)."""

    def leader_elected(self, node: SimNode) -> None: ...

    def inject(self) -> None:
        """Client actions of one chaos step."""

    def after_step(self) -> None:
        """Every step: clients retry, act on what they received."""

    def drain(self) -> None:
        """After healing and liveness: finish the clients' work and check the final state."""


@dataclass(frozen=True)
class Faults:
    """Per-step probabilities of injected events during the chaos phase."""

    propose: float = 0.1
    crash: float = 0.004
    restart: float = 0.03
    partition: float = 0.004
    heal: float = 0.01
    membership: float = 0.0  # add a learner (auto-promoted) or remove a member
    crash_after_vote: float = 0.1  # crash and restart at once after granting a vote
    read: float = 0.03  # a client asks a node that believes it leads for a ReadIndex
    compact_every: int = 25  # a node compacts when this many entries were applied since
    max_sync_delay_ms: int = 20
    net: NetProfile = field(default_factory=lambda: NetProfile(1, 15, 0.05, 0.02))


class SimNode:
    """One node's process: the RaftNode plus its disk, state machine digest and pending Ready."""

    def __init__(self, cluster: SimCluster, node_id: str, bootstrap: list[str]) -> None:
        self.c = cluster
        self.id = node_id
        self.bootstrap = bootstrap  # founding members know each other; joiners know nobody
        self.disk = SimDisk()
        self.raft: RaftNode | None = None
        self.applied = 0  # state machine: (applied index, digest chain)
        self.digest = _ZERO
        self.digests: dict[int, bytes] = {}  # with an app: the chain at each applied index
        self.pending: Ready | None = None
        self.sync_at = 0
        self.next_tick = 0
        self.last_commit = 0
        self.starts = 0
        self.retired = False  # removed from the group and shut down, like delete_member

    @property
    def up(self) -> bool:
        return self.raft is not None

    def start(self) -> None:
        # with a reader, restart from only the last few entries and read the rest on demand
        p = self.disk.persisted(tail=self.c.rng.randint(0, 5) if self.c.use_reader else None)
        self.starts += 1
        rng = random.Random(self.c.rng.getrandbits(64))
        reader = _Reader(self.disk) if self.c.use_reader else None
        self.raft = RaftNode(self.id, self.bootstrap, rng=rng, persisted=p, options=self.c.options,
                             applied=p.snapshot.meta.index if p.snapshot else 0, reader=reader)
        self.applied, self.digest, app_data = _restore(p.snapshot)
        self.digests = {}
        self.pending = None
        if self.c.app is not None:
            self.c.app.node_started(self, app_data if p.snapshot else None)
        self.last_commit = self.raft.commit_index
        self.next_tick = self.c.now + self.c.rng.randint(1, TICK_MS)

    def crash(self) -> None:
        self.raft = None
        self.pending = None
        self.disk.crash(self.c.rng)
        if self.c.app is not None:
            self.c.app.node_crashed(self)

    def process(self) -> None:
        """Take the next Ready if none is pending; sync at once or schedule it for later."""
        raft = self.raft
        if raft is None or self.pending is not None:
            return
        rd = raft.ready()
        if rd is None:
            return
        for e in rd.entries:
            self.c.checker.on_entry(self.id, e, raft.log_term(e.index - 1))
        for m in rd.early_messages:  # a leader's appends go out before its own fsync
            self.c.net.send(self.c.now, m)
        for rs in rd.read_states:
            self.c.on_read_state(self.id, rs)
        self.disk.stage(rd)
        self.pending = rd
        self.sync_at = self.c.now + self.c.rng.randint(0, self.c.faults.max_sync_delay_ms)
        if self.sync_at <= self.c.now:
            self.finish()

    def finish(self) -> None:
        """The fsync completed: now send, apply, advance, maybe compact."""
        rd, raft, c = self.pending, self.raft, self.c
        self.pending = None
        self.disk.sync()
        voted = False
        for m in rd.messages:
            c.net.send(c.now, m)
            voted = voted or (isinstance(m, VoteResp) and m.granted)
        app = c.app
        if rd.snapshot is not None:
            self.applied, self.digest, app_data = _restore(rd.snapshot)
            self.digests = {}
            c.checker.on_restore(self.id, self.applied, self.digest)
            if app is not None:
                app.snapshot_received(self, app_data)
        for e in rd.committed:
            if e.index != self.applied + 1:
                raise SafetyViolation(f"{self.id} applies {e.index} after {self.applied}")
            self.digest = chain(self.digest, e)
            self.applied = e.index
            c.checker.on_apply(self.id, e, self.digest)
            if app is not None:
                self.digests[e.index] = self.digest
            if e.kind is EntryKind.NORMAL:
                c.applied_payloads.setdefault(e.data, e.index)
        if app is not None and rd.committed:
            app.applied(self, rd.committed, raft.is_leader)
        raft.advance(rd)
        if voted and c.chaos and c.rng.random() < c.faults.crash_after_vote:
            # the vote must survive this: a restarted node never votes twice in a term
            c.trace.append(f"{c.now}ms {self.id} crashes and restarts after voting")
            self.crash()
            self.start()
            return
        snap = raft.snapshot_meta
        since = self.applied - (snap.index if snap else 0)
        if app is None:
            point = (self.applied, b"") if since >= c.faults.compact_every else None
        else:
            point = app.compact(self, since, c.faults.compact_every)
        if point is not None:
            index, app_data = point
            digest = self.digest if index == self.applied else self.digests[index]
            s = raft.compact(index, _HEAD.pack(index, digest) + app_data)
            self.disk.install_snapshot(s, keep_tail=True)
            self.digests = {i: d for i, d in self.digests.items() if i > index}
        self.process()


class _Reader:
    def __init__(self, disk: SimDisk) -> None:
        self.entries = disk.entries_between


def _restore(snap: Snapshot | None) -> tuple[int, bytes, bytes]:
    """(applied index, digest, app bytes) of a snapshot."""
    if snap is None:
        return 0, _ZERO, b""
    applied, digest = _HEAD.unpack_from(snap.data)
    return applied, digest, snap.data[_HEAD.size:]


class SimCluster:
    def __init__(self, seed: int, size: int, faults: Faults | None = None,
                 options: RaftOptions | None = None,
                 app_factory: Callable[[SimCluster], App] | None = None) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.faults = faults or Faults()
        # odd seeds keep almost nothing in memory and read old entries back from the disk
        self.use_reader = seed % 2 == 1
        # every third seed runs without pre-vote and check-quorum: more real elections
        plain = seed % 3 == 2
        self.options = options or RaftOptions(election_tick=10, heartbeat_tick=2,
                                              max_append_entries=8, max_inflight=4,
                                              memory_entries=2 if self.use_reader else 1024,
                                              pre_vote=not plain, check_quorum=not plain,
                                              early_messages=seed % 4 != 3,
                                              follower_acks=seed // 2 % 2 == 0,
                                              max_snapshot_chunk=10 if seed % 5 == 0 else 4096)
        self.ids = [f"n{i}" for i in range(size)]
        self.now = 0
        self.steps = 0
        self.net = SimNetwork(self.rng, self.faults.net)
        self.checker = SafetyChecker()
        self.nodes = {i: SimNode(self, i, list(self.ids)) for i in self.ids}
        self.size = size
        self.applied_payloads: dict[bytes, int] = {}
        self.proposed = 0
        self.chaos = False
        self.reads_asked = self.reads_done = 0
        self.removals: list[tuple[int, int, str]] = []  # (index, term, node) proposed removals
        self.read_floor: dict[bytes, int] = {}
        self.trace: deque[str] = deque(maxlen=60)
        self._leader_terms: dict[str, int] = {}
        self.app: App | None = None
        if app_factory is not None:
            self.app = app_factory(self)
        for n in self.nodes.values():
            n.start()

    # ---- the loop ----------------------------------------------------------------------------

    def step(self, chaos: bool) -> None:
        self.steps += 1
        self.chaos = chaos
        if chaos:
            self._inject()
        self._next_event()
        for n in self.nodes.values():
            n.process()
        self._check()
        if self.app is not None:
            self.app.after_step()

    def _next_event(self) -> None:
        candidates = []
        t = self.net.next_time()
        if t is not None:
            candidates.append((t, 0, ""))
        for n in self.nodes.values():
            if n.up:
                candidates.append((n.next_tick, 2, n.id))
                if n.pending is not None:
                    candidates.append((n.sync_at, 1, n.id))
        if not candidates:
            self.now += TICK_MS
            return
        at, kind, node_id = min(candidates)
        self.now = max(self.now, at)
        if kind == 0:
            m = self.net.pop_due(self.now)
            if m is not None and self.nodes[m.to].up:
                self.nodes[m.to].raft.step(m)
        elif kind == 1:
            self.nodes[node_id].finish()
        else:
            n = self.nodes[node_id]
            n.next_tick += TICK_MS
            n.raft.tick()

    def _inject(self) -> None:
        f, rng = self.faults, self.rng
        if rng.random() < f.propose:
            self.propose()
        if self.app is not None:
            self.app.inject()
        up = [n for n in self.nodes.values() if n.up]
        down = [n for n in self.nodes.values() if not n.up and not n.retired]
        if up and rng.random() < f.crash and len(down) < self.size // 2 + 1:
            # leaders, and nodes with writes not yet synced, crash more often than others:
            # that is where the hard cases are
            leaders = [n for n in up if n.raft.role is Role.LEADER]
            syncing = [n for n in up if n.pending is not None]
            r = rng.random()
            pool = leaders if leaders and r < 0.3 else syncing if syncing and r < 0.6 else up
            victim = rng.choice(pool)
            self.trace.append(f"{self.now}ms crash {victim.id}")
            victim.crash()
        if down and rng.random() < f.restart:
            n = rng.choice(down)
            self.trace.append(f"{self.now}ms restart {n.id}")
            n.start()
        if rng.random() < f.read:
            self._read()
        if rng.random() < f.partition:
            self._partition()
        if rng.random() < f.membership:
            self._change_membership()
        if rng.random() < f.heal:
            self.net.heal()

    def _partition(self) -> None:
        ids = sorted(self.nodes)
        self.rng.shuffle(ids)
        leaders = [n.id for n in self.nodes.values() if n.up and n.raft.role is Role.LEADER]
        r = self.rng.random()
        if leaders and r < 0.4:
            lead = leaders[0]
            self.net.partition([[lead], [i for i in self.nodes if i != lead]])
            self.trace.append(f"{self.now}ms isolate leader {lead}")
        elif r < 0.6:
            a, b = ids[0], ids[1]
            self.net.cut(a, b)  # one-way
            self.trace.append(f"{self.now}ms cut {a}->{b}")
        else:
            k = self.rng.randint(1, len(ids) - 1)
            self.net.partition([ids[:k], ids[k:]])
            self.trace.append(f"{self.now}ms partition {sorted(ids[:k])} | {sorted(ids[k:])}")

    def _read(self) -> None:
        """ReadIndex on every node that thinks it leads (stale ones included): a read point
        must cover every write already applied anywhere when the read was asked."""
        for n in self.nodes.values():
            if n.up and n.raft.role is Role.LEADER:
                self.reads_asked += 1
                ctx = b"read-%d" % self.reads_asked
                self.read_floor[ctx] = self.checker.max_committed
                n.raft.read_index(ctx)

    def on_read_state(self, node_id: str, rs) -> None:
        floor = self.read_floor.pop(rs.ctx)
        self.reads_done += 1
        if rs.index < floor:
            raise SafetyViolation(f"linearizability: {node_id} answered read {rs.ctx!r} at index"
                                  f" {rs.index}, but index {floor} was already applied")

    def _change_membership(self) -> None:
        """Add a brand-new node as an auto-promoted learner, or remove a member (maybe the
        leader itself), keeping between 3 and size + 1 voters."""
        leaders = [n for n in self.nodes.values() if n.up and n.raft.role is Role.LEADER]
        if not leaders:
            return
        lead = leaders[0].raft
        config = lead.config
        try:
            if len(config.voters) + len(config.learners) <= self.size and self.rng.random() < 0.6:
                new_id = f"n{len(self.nodes)}"
                node = self.nodes[new_id] = SimNode(self, new_id, [])
                node.start()
                lead.add_learner(new_id, self.now)
                self.trace.append(f"{self.now}ms {lead.id} adds learner {new_id}")
            elif len(config.voters) > 3:
                victim = self.rng.choice(list(config.voters) + list(config.learners))
                index = lead.remove(victim, self.now)
                self.removals.append((index, lead.term, victim))
                self.trace.append(f"{self.now}ms {lead.id} removes {victim}")
        except (ConfigChangeInProgress, ProposalDropped, NotLeader):
            pass

    def marker(self, name: bytes) -> bytes:
        """A unique command for the state machine: the name itself, or the app's wrapping."""
        return name if self.app is None else self.app.marker(name)

    def members(self) -> list[str]:
        """Members by the config of the most up-to-date log of a running node, compared as
        Raft's elections do (last entry's term, then index): a longer log of an older term
        (a node whose addition was lost with its leader, left behind) is not the newest."""
        best = max((n.raft for n in self.nodes.values() if n.up),
                   key=lambda r: (r.log_term(r.last_index) or 0, r.last_index))
        return list(best.config.voters) + list(best.config.learners)

    def propose(self) -> int | None:
        """A client sends a unique command to some node, following one leader hint."""
        self.proposed += 1
        data = self.marker(b"cmd-%d" % self.proposed)
        up = [n for n in self.nodes.values() if n.up]
        if not up:
            return None
        target = self.rng.choice(up)
        for _ in range(2):
            try:
                return target.raft.propose(data, self.now)
            except NotLeader as e:
                hint = self.nodes.get(e.leader_hint) if e.leader_hint else None
                if hint is None or not hint.up:
                    return None
                target = hint
            except ProposalDropped:
                return None
        return None

    def _retire_removed(self) -> None:
        """Once a removal is committed, shut the removed node down for good (as an operator's
        delete_member would); until then it runs, and may have missed its own removal."""
        keep = []
        for index, term, node_id in self.removals:
            known = self.checker.committed.get(index)
            if known is None:
                keep.append((index, term, node_id))
            elif known[0] == term:
                n = self.nodes[node_id]
                if n.up:
                    n.crash()
                n.retired = True
                self.trace.append(f"{self.now}ms {node_id} retired")
        self.removals = keep

    def _check(self) -> None:
        if self.removals:
            self._retire_removed()
        ck = self.checker
        for n in self.nodes.values():
            raft = n.raft
            if raft is None:
                continue
            if raft.commit_index < n.last_commit:
                raise SafetyViolation(f"{n.id} commit went back {n.last_commit} -> {raft.commit_index}")
            n.last_commit = raft.commit_index
            if raft.role is Role.LEADER and self._leader_terms.get(n.id) != raft.term:
                self._leader_terms[n.id] = raft.term
                self.trace.append(f"{self.now}ms {n.id} leads term {raft.term}")
                ck.on_leader(n.id, raft.term)
                snap = raft.snapshot_meta
                ck.check_leader_log(n.id, raft.term, snap.index if snap else 0, raft.log_term)
                if self.app is not None:
                    self.app.leader_elected(n)

    # ---- phases ----------------------------------------------------------------------------

    def heal_all(self) -> None:
        self.net.heal()
        self.net.profile = NetProfile(1, 15, 0.0, 0.0)
        for n in self.nodes.values():
            if not n.up and not n.retired:
                n.start()
        self.trace.append(f"{self.now}ms healed")

    def await_liveness(self, max_ms: int = 20_000, max_steps: int = 200_000) -> None:
        """After healing: a leader appears and a new command is applied everywhere. A proposal
        lost with a leader change is made again after a simulated second."""
        deadline = self.now + max_ms
        index = marker = None
        retry_at = 0
        for _ in range(max_steps):
            if self.now >= deadline:
                break
            self.step(chaos=False)
            if index is None or self.now >= retry_at:
                leaders = [n for n in self.nodes.values() if n.up and n.raft.role is Role.LEADER]
                if leaders:
                    marker = self.marker(b"liveness-%d" % self.steps)
                    retry_at = self.now + 1000
                    try:
                        index = leaders[0].raft.propose(marker, self.now)
                    except (NotLeader, ProposalDropped):
                        index = None
            elif all(self.nodes[i].applied >= index for i in self.members()):
                if self.applied_payloads.get(marker) == index:
                    digests = {self.nodes[i].digest for i in self.members()
                               if self.nodes[i].applied == index}
                    if len(digests) == 1:
                        return
        raise SafetyViolation(f"liveness: no committed proposal {max_ms}ms / {max_steps} steps"
                              f" after healing ({self.status()})")

    def settle(self, ms: int = 2000) -> None:
        """Run without faults or proposals for a while (after await_liveness)."""
        end = self.now + ms
        while self.now < end:
            self.step(chaos=False)

    def status(self) -> str:
        parts = []
        for n in self.nodes.values():
            if n.raft is None:
                parts.append(f"{n.id}:down")
            else:
                r = n.raft
                parts.append(f"{n.id}:{r.role.value[0]}{r.term} c{r.commit_index} a{n.applied}"
                             f" l{r.last_index}")
        return " ".join(parts) + f" cuts={self.net.describe_cuts()}"


def run_seed(seed: int, size: int, steps: int, faults: Faults | None = None,
             app_factory: Callable[[SimCluster], App] | None = None) -> SimCluster:
    """Chaos for `steps` steps, then heal and require liveness (and let the app drain and
    check its end state). Raises SafetyViolation with the seed and the last events on
    failure."""
    c = SimCluster(seed, size, faults, app_factory=app_factory)
    try:
        for _ in range(steps):
            c.step(chaos=True)
        c.heal_all()
        c.await_liveness()
        if c.app is not None:
            c.app.drain()
    except Exception as e:
        trail = "\n  ".join(c.trace)
        mode = (" SIM_QUEUE=1" if c.app is not None
                else f" SIM_MEMBERSHIP={c.faults.membership}")
        raise SafetyViolation(
            f"seed={seed} size={size} steps={steps} failed at step {c.steps}, {c.now}ms: {e}\n"
            f"state: {c.status()}\nlast events:\n  {trail}\n"
            f"replay: SIM_SEED={seed} SIM_SIZE={size} SIM_STEPS={steps}{mode}"
            f" python -m pytest tests/sim -k replay") from e
    return c
