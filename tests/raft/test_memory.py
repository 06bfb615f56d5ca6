"""Bounded memory: with a LogReader the node keeps only recent entries in memory and reads
older ones back from the durable log, for lagging followers and after restarts."""

from __future__ import annotations

import random

from quorum.raft import HardState, Persisted, RaftNode, RaftOptions

from .harness import Cluster

OPTS = RaftOptions(election_tick=10, heartbeat_tick=1, memory_entries=2)


class _StoreReader:
    """Reads entries back from a harness Store, as quorum/log would from its segments."""

    def __init__(self, store) -> None:
        self.store = store
        self.reads = 0

    def entries(self, lo: int, hi: int):
        self.reads += 1
        out = [e for e in self.store.p.entries if lo <= e.index < hi]
        assert len(out) == hi - lo, (lo, hi)
        return out


def _with_reader(c: Cluster, node_id: str, tail: int | None = None) -> _StoreReader:
    """(Re)start `node_id` with a reader, from only the last `tail` stored entries."""
    store = c.stores[node_id]
    reader = _StoreReader(store)
    p = store.copy()
    if tail is not None:
        p = Persisted(p.hard_state, p.snapshot, p.entries[-tail:])
    c.nodes[node_id] = RaftNode(node_id, c.voters, rng=random.Random(node_id), persisted=p,
                                options=OPTS, reader=reader)
    c.state[node_id] = c.kv.init()
    c.applied[node_id] = []
    return reader


def test_a_leader_with_a_reader_keeps_few_entries_and_still_catches_up_a_lagging_follower():
    c = Cluster(["a", "b", "c"], options=OPTS)
    reader = _with_reader(c, "a")
    c.elect("a", force=True)
    c.isolate("c")
    for i in range(40):
        c.put("a", f"k{i}", str(i))
        c.stabilize()
    assert c["a"].status()["entries_in_memory"] <= 4
    c.heal()
    c.tick(["a"], times=3)
    assert c.values("c") == c.values("a") and len(c.values("c")) == 40
    assert reader.reads > 0


def test_a_node_restarts_from_the_tail_of_its_log_and_repairs_below_it():
    c = Cluster(["a", "b", "c"], options=OPTS)
    c.elect("b")
    for i in range(10):
        c.put("b", f"k{i}", str(i))
    c.stabilize()
    c.isolate("b")  # b, still leader, appends entries 12..16 that nobody else sees
    for i in range(5):
        c.put("b", f"x{i}", "lost")
    c.stabilize()
    c.elect("a", force=True)
    c.put("a", "after", "1")
    c.stabilize()
    c.crash("b")
    _with_reader(c, "b", tail=1)  # only entry 16 in memory; 12..15 must still be replaced
    b = c["b"]
    assert b.last_index == 16 and b.status()["entries_in_memory"] == 1
    c.heal()
    c.tick(["a"], times=3)
    assert c.values("b") == c.values("a") and "x0" not in c.values("b")
    assert c.log_terms("b") == c.log_terms("a")


def test_a_restart_from_the_tail_finds_config_entries_before_it():
    c = Cluster(["a", "b", "c"], options=OPTS)
    c.elect("a")
    c["a"].remove("c", now_ms=0)
    c.stabilize()
    for i in range(5):
        c.put("a", f"k{i}", str(i))
    c.stabilize()
    c.crash("b")
    _with_reader(c, "b", tail=2)
    assert c["b"].config.voters == ("a", "b")


def test_a_restart_with_a_checkpoints_config_history_reads_only_the_entries_after_it():
    c = Cluster(["a", "b", "c"], options=OPTS)
    c.elect("a")
    c["a"].remove("c", now_ms=0)  # a config entry before the checkpoint
    c.stabilize()
    for i in range(5):
        c.put("a", f"k{i}", str(i))
    c.stabilize()
    upto = c["b"].applied_index
    history = c["b"].config_history(upto)
    c["a"].add_learner("d", now_ms=0, auto_promote=False)  # and one after it
    c.put("a", "late", "1")
    c.stabilize()
    expected = c["b"].config
    c.crash("b")
    store = c.stores["b"]
    reads: list[tuple[int, int]] = []

    class Reader(_StoreReader):
        def entries(self, lo, hi):
            reads.append((lo, hi))
            return super().entries(lo, hi)

    p = store.copy()
    hs = p.hard_state
    p = Persisted(HardState(hs.term, hs.vote, 0),  # the commit index was lost with the crash
                  p.snapshot, p.entries[-1:])
    b = RaftNode("b", c.voters, rng=random.Random("b"), persisted=p, options=OPTS,
                 reader=Reader(store), applied=upto, config_history=(upto, history))
    assert b.config == expected and "d" in b.config.learners and "c" not in b.config.voters
    assert reads and min(lo for lo, _ in reads) > upto  # nothing at or before the checkpoint
    assert b.commit_index >= upto  # the checkpoint's entry was committed
    # compacting at the checkpoint (or before it) still names the membership of that point
    assert b.compact(upto, b"state").meta.config.voters == ("a", "b")


def test_a_config_history_that_the_log_does_not_reach_is_ignored():
    c = Cluster(["a", "b", "c"], options=OPTS)
    c.elect("a")
    c["a"].remove("c", now_ms=0)
    c.stabilize()
    history = c["b"].config_history(c["b"].applied_index)
    c.crash("b")
    p = c.stores["b"].copy()
    beyond = p.entries[-1].index + 10
    b = RaftNode("b", c.voters, rng=random.Random("b"), persisted=p, options=OPTS,
                 config_history=(beyond, history))
    assert b.commit_index <= p.entries[-1].index and b.config.voters == ("a", "b")
