"""A hand-driven Raft cluster for scenario tests: every node persists at once, messages wait in
an in-flight list until the test delivers, drops or cuts them, and time moves only when the test
ticks. Used by the tests in this directory (the random simulator lives in tests/sim/)."""

from __future__ import annotations

import random
from collections.abc import Callable

from quorum.raft import (Entry, EntryKind, KvMachine, KvSet, Meta, Message, Persisted,
                         RaftNode, RaftOptions, Role)

OPTIONS = RaftOptions(election_tick=10, heartbeat_tick=1, max_append_entries=64, max_inflight=8,
                      early_messages=True)


class Store:
    """Durable state of one node; a Ready is persisted in full before anything else."""

    def __init__(self) -> None:
        self.p = Persisted()

    def save(self, rd) -> None:
        p = self.p
        if rd.snapshot is not None:
            p.snapshot, p.entries = rd.snapshot, []
        if rd.entries:
            first = rd.entries[0].index
            p.entries = [e for e in p.entries if e.index < first] + list(rd.entries)
        if rd.hard_state is not None:
            p.hard_state = rd.hard_state

    def compacted(self, snap) -> None:
        self.p.snapshot = snap
        self.p.entries = [e for e in self.p.entries if e.index > snap.meta.index]

    def copy(self) -> Persisted:
        return Persisted(self.p.hard_state, self.p.snapshot, list(self.p.entries))


class Cluster:
    def __init__(self, ids, *, options: RaftOptions = OPTIONS, seed: int = 0,
                 voters=None, start: bool = True) -> None:
        self.ids = list(ids)
        self.voters = list(voters if voters is not None else ids)
        self.options = options
        self.seed = seed
        self.stores = {i: Store() for i in self.ids}
        self.nodes: dict[str, RaftNode | None] = {}
        self.kv = KvMachine()
        self.state: dict[str, dict] = {}
        self.applied: dict[str, list[Entry]] = {}
        self.in_flight: list[Message] = []
        self.cut: dict[tuple[str, str], bool] = {}
        self.delivered: list[Message] = []  # every delivered message, for assertions
        self.reads: dict[str, list] = {i: [] for i in self.ids}  # ReadStates handed out
        if start:
            for i in self.ids:
                self.start(i)

    # ---- nodes -------------------------------------------------------------------------------

    def start(self, node_id: str, voters=None) -> RaftNode:
        voters = self.voters if voters is None else voters
        p = self.stores[node_id].copy()
        rng = random.Random(f"{self.seed}:{node_id}:{len(self.applied.get(node_id, ()))}")
        node = RaftNode(node_id, voters, rng=rng, persisted=p, options=self.options)
        self.nodes[node_id] = node
        if p.snapshot is not None:
            self.state[node_id] = self.kv.restore(p.snapshot.data)
        else:
            self.state[node_id] = self.kv.init()
        self.applied[node_id] = []
        return node

    def add_node(self, node_id: str) -> RaftNode:
        """A brand-new node that knows no members yet (it will join as a learner)."""
        self.ids.append(node_id)
        self.stores[node_id] = Store()
        return self.start(node_id, voters=())

    def crash(self, node_id: str) -> None:
        self.nodes[node_id] = None
        self.in_flight = [m for m in self.in_flight if m.to != node_id]

    def __getitem__(self, node_id: str) -> RaftNode:
        return self.nodes[node_id]

    def leader(self) -> RaftNode | None:
        found = [n for n in self.nodes.values() if n is not None and n.role is Role.LEADER]
        return max(found, key=lambda n: n.term) if found else None

    # ---- the driver loop -----------------------------------------------------------------

    def process(self) -> None:
        for node_id, node in self.nodes.items():
            if node is None:
                continue
            while (rd := node.ready()) is not None:
                self.in_flight.extend(rd.early_messages)  # may go before the persist
                self.stores[node_id].save(rd)
                self.in_flight.extend(rd.messages)
                if rd.snapshot is not None:
                    self.state[node_id] = self.kv.restore(rd.snapshot.data)
                for e in rd.committed:
                    self._apply(node_id, e)
                self.reads.setdefault(node_id, []).extend(rd.read_states)
                node.advance(rd)

    def _apply(self, node_id: str, e: Entry) -> None:
        self.applied[node_id].append(e)
        if e.kind is EntryKind.NORMAL:
            cmd = self.kv.decode(e.data)
            self.state[node_id], _, _ = self.kv.apply(Meta(e.index, e.term, e.timestamp), cmd,
                                                      self.state[node_id])

    def deliver(self, where: Callable[[Message], bool] = lambda m: True) -> int:
        """Deliver in-flight messages matching `where` (in send order); others stay queued."""
        self.process()
        now, keep = [], []
        for m in self.in_flight:
            (now if where(m) else keep).append(m)
        self.in_flight = keep
        for m in now:
            node = self.nodes.get(m.to)
            if node is not None and not self.cut.get((m.frm, m.to)):
                self.delivered.append(m)
                node.step(m)
        self.process()
        return len(now)

    def drop(self, where: Callable[[Message], bool] = lambda m: True) -> int:
        self.process()
        before = len(self.in_flight)
        self.in_flight = [m for m in self.in_flight if not where(m)]
        return before - len(self.in_flight)

    def stabilize(self, rounds: int = 200) -> None:
        for _ in range(rounds):
            if not self.deliver():
                return
        raise AssertionError("messages still flowing after many rounds")

    def tick(self, node_ids=None, times: int = 1) -> None:
        """Tick the given nodes (default: all running) and deliver what follows."""
        for _ in range(times):
            for i in node_ids or self.ids:
                if self.nodes.get(i) is not None:
                    self.nodes[i].tick()
            self.stabilize()

    def isolate(self, node_id: str) -> None:
        for other in self.ids:
            if other != node_id:
                self.cut[(node_id, other)] = self.cut[(other, node_id)] = True

    def heal(self) -> None:
        self.cut.clear()

    # ---- client helpers --------------------------------------------------------------------

    def elect(self, node_id: str, force: bool = False) -> RaftNode:
        """Make `node_id` campaign now. `force` campaigns as after TimeoutNow: no pre-vote, and
        voters still in a leader's lease grant anyway."""
        self.nodes[node_id].campaign(transfer=force)
        self.stabilize()
        assert self.nodes[node_id].role is Role.LEADER, self.nodes[node_id].status()
        return self.nodes[node_id]

    def put(self, node_id: str, key: str, value: str, now_ms: int = 0) -> int:
        return self.nodes[node_id].propose(KvMachine.encode(KvSet(key, value)), now_ms)

    def values(self, node_id: str) -> dict[str, str]:
        return {k: v for k, (v, _) in self.state[node_id].items()}

    def log_terms(self, node_id: str) -> list[int]:
        n = self.nodes[node_id]
        snap = n.snapshot_meta
        lo = (snap.index if snap else 0) + 1
        return [n.log_term(i) for i in range(lo, n.last_index + 1)]
