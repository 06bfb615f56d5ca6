"""Log compaction and InstallSnapshot (Raft section 7), and restarts from a snapshot."""

from __future__ import annotations

from quorum.raft import InstallSnapshot

from .harness import Cluster


def _compact(c: Cluster, node_id: str):
    node = c[node_id]
    snap = node.compact(node.applied_index, c.kv.snapshot(c.state[node_id]))
    c.stores[node_id].compacted(snap)
    return snap


def test_7_a_lagging_follower_gets_the_snapshot_then_the_rest():
    c = Cluster(["a", "b", "c"])
    c.elect("a")
    c.isolate("c")
    for i in range(30):
        c.put("a", f"k{i}", str(i))
    c.stabilize()
    snap = _compact(c, "a")
    assert snap.meta.index == c["a"].applied_index and c["a"].log_term(5) is None
    for i in range(30, 35):
        c.put("a", f"k{i}", str(i))
    c.stabilize()
    c.heal()
    c.tick(["a"])
    sent = [m for m in c.delivered if isinstance(m, InstallSnapshot) and m.to == "c"]
    assert len(sent) == 1
    assert c["c"].snapshot_meta == snap.meta
    assert c.values("c") == c.values("a") and len(c.values("c")) == 35
    # entries 2..31 came inside the snapshot: c never applied them one by one
    assert not [e.index for e in c.applied["c"] if 1 < e.index <= snap.meta.index]


def test_7_a_follower_that_has_the_entries_is_not_sent_a_snapshot():
    c = Cluster(["a", "b", "c"])
    c.elect("a")
    for i in range(10):
        c.put("a", f"k{i}", str(i))
    c.stabilize()
    _compact(c, "a")
    c.put("a", "more", "x")
    c.tick(["a"], times=3)
    assert not any(isinstance(m, InstallSnapshot) for m in c.delivered)
    assert c.values("c") == c.values("a")


def test_a_node_restarts_from_its_snapshot_and_the_entries_after_it():
    c = Cluster(["a", "b", "c"])
    c.elect("a")
    for i in range(10):
        c.put("a", f"k{i}", str(i))
    c.stabilize()
    _compact(c, "b")
    c.put("a", "after", "snap")
    c.stabilize()
    c.crash("b")
    b = c.start("b")
    assert b.snapshot_meta is not None and b.commit_index == c["a"].commit_index
    c.tick(["a"])
    assert c.values("b") == c.values("a")


def test_a_lost_snapshot_is_sent_again():
    c = Cluster(["a", "b", "c"])
    c.elect("a")
    c.isolate("c")
    for i in range(10):
        c.put("a", f"k{i}", str(i))
    c.stabilize()
    _compact(c, "a")
    c.heal()
    c.cut[("a", "c")] = True  # the first InstallSnapshot is lost
    c.tick(["a"])
    c.heal()
    c.tick(["a"], times=12)
    sent = [m for m in c.delivered if isinstance(m, InstallSnapshot) and m.to == "c"]
    assert len(sent) == 1  # the one delivered, after the retry
    assert c.values("c") == c.values("a")


def test_snapshot_carries_the_membership_at_its_index():
    c = Cluster(["a", "b", "c"])
    c.elect("a")
    c["a"].remove("c", now_ms=0)
    c.stabilize()
    c.put("a", "k", "v")
    c.stabilize()
    snap = _compact(c, "a")
    assert snap.meta.config.voters == ("a", "b")


def test_7_a_large_snapshot_goes_in_chunks_and_a_lost_chunk_means_a_resend():
    from quorum.raft import RaftOptions

    opts = RaftOptions(election_tick=10, heartbeat_tick=1, max_snapshot_chunk=64,
                       early_messages=True)
    c = Cluster(["a", "b", "c"], options=opts)
    c.elect("a")
    c.isolate("c")
    for i in range(20):
        c.put("a", f"key-{i}", "value-%d" % i)
    c.stabilize()
    snap = _compact(c, "a")
    assert len(snap.data) > 3 * 64
    c.heal()
    c["a"].tick()  # a heartbeat, then a probe that c rejects: a finds it must send a snapshot
    for _ in range(5):
        c.deliver(lambda m: not isinstance(m, InstallSnapshot))
    chunks = [m for m in c.in_flight if isinstance(m, InstallSnapshot)]
    assert len(chunks) == -(-len(snap.data) // 64) and chunks[-1].done
    assert [m.offset for m in chunks] == list(range(0, len(snap.data), 64))
    c.drop(lambda m: m is chunks[1])  # ...in chunks, and one of them is lost
    c.stabilize()
    assert c["c"].snapshot_meta is None  # c threw the incomplete snapshot away
    c.tick(["a"], times=12)  # no answer for an election timeout: a sends it all again
    assert c["c"].snapshot_meta == snap.meta
    assert c.values("c") == c.values("a")


def test_a_restart_hands_committed_entries_out_in_bounded_batches():
    from quorum.raft import RaftOptions

    c = Cluster(["a", "b", "c"], options=RaftOptions(max_committed_per_ready=4))
    c.elect("a")
    for i in range(10):
        c.put("a", f"k{i}", "v")
    c.stabilize()
    c.crash("b")
    b = c.start("b")
    sizes = []
    while (rd := b.ready()) is not None:
        sizes.append(len(rd.committed))
        b.advance(rd)
    assert sizes == [4, 4, 3]  # the no-op and ten commands


def test_7_snapshot_chunks_reordered_or_duplicated_by_the_network_still_assemble():
    """Regression (found by the quorum queue simulation, tests/sim/queue_world.py): all chunks
    of a snapshot are sent at once, so a network that reorders messages hands them over out of
    order. The follower used to accept only the next offset in sequence and threw the rest
    away, so a snapshot of a few dozen chunks never got through and the follower never caught
    up. Chunks in reverse order, with duplicates, must now assemble."""
    from quorum.raft import RaftOptions

    opts = RaftOptions(election_tick=10, heartbeat_tick=1, max_snapshot_chunk=32,
                       early_messages=True)
    c = Cluster(["a", "b", "c"], options=opts)
    c.elect("a")
    c.isolate("c")
    for i in range(20):
        c.put("a", f"key-{i}", "value-%d" % i)
    c.stabilize()
    snap = _compact(c, "a")
    c.heal()
    c["a"].tick()
    for _ in range(5):
        c.deliver(lambda m: not isinstance(m, InstallSnapshot))
    chunks = [m for m in c.in_flight if isinstance(m, InstallSnapshot)]
    assert len(chunks) > 6
    c.in_flight = [m for m in c.in_flight if not isinstance(m, InstallSnapshot)]
    c.in_flight += chunks[::-1] + chunks[2:4]  # last chunk first, and two of them twice
    c.stabilize()
    assert c["c"].snapshot_meta == snap.meta
    assert c.values("c") == c.values("a")
