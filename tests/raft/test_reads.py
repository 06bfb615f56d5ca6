"""ReadIndex (Raft thesis 6.4): linearizable reads confirmed by a heartbeat round, no log write."""

from __future__ import annotations

import pytest

from quorum.raft import Append, NotLeader, ReadState

from .harness import OPTIONS, Cluster


def test_6_4_a_read_is_released_once_a_majority_confirms_the_leader():
    c = Cluster(["a", "b", "c"])
    c.elect("a")
    index = c.put("a", "k", "v")
    c.stabilize()
    c["a"].read_index(b"r1")
    c.process()
    assert c.reads["a"] == []  # heartbeats with the read's ctx are on their way
    c.stabilize()
    assert c.reads["a"] == [ReadState(index, b"r1")]
    assert c["a"].applied_index >= index  # so the read can be served now


def test_6_4_a_deposed_leader_cut_off_never_confirms_a_read():
    c = Cluster(["a", "b", "c"])
    c.elect("a")
    c.isolate("a")
    c["a"].read_index(b"stale")
    c.stabilize()
    c.elect("b", force=True)
    c.put("b", "k", "new")
    c.stabilize()
    assert c.reads["a"] == []  # a cannot prove it still leads, so it serves nothing
    c.tick(["a"], times=2 * OPTIONS.election_tick)  # it steps down; the read is dropped
    c.heal()
    c.stabilize()
    assert c.reads["a"] == [] and not c["a"].is_leader


def test_6_4_a_new_leader_waits_for_its_first_commit_before_answering():
    c = Cluster(["a", "b", "c"])
    c["a"].campaign()
    for _ in range(4):  # a wins, but its no-op has not committed yet
        c.deliver(lambda m: not isinstance(m, Append))
        c.drop(lambda m: isinstance(m, Append))
    assert c["a"].is_leader and c["a"].commit_index == 0
    c["a"].read_index(b"early")
    c.tick(["a"])
    assert c.reads["a"] == [ReadState(1, b"early")]  # released after the no-op (index 1)


def test_reads_come_out_in_order_and_followers_refuse():
    c = Cluster(["a", "b", "c"])
    c.elect("a")
    c["a"].read_index(b"1")
    c["a"].read_index(b"2")
    c.stabilize()
    assert [r.ctx for r in c.reads["a"]] == [b"1", b"2"]
    with pytest.raises(NotLeader):
        c["b"].read_index(b"x")


def test_a_single_voter_answers_at_once():
    c = Cluster(["solo"])
    c.tick(times=3 * OPTIONS.election_tick)
    c["solo"].read_index(b"r")
    c.process()
    assert c.reads["solo"] == [ReadState(c["solo"].commit_index, b"r")]
