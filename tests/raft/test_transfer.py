"""Leadership transfer (Raft thesis 3.10): catch the target up, then TimeoutNow."""

from __future__ import annotations

import pytest

from quorum.raft import Append, NotLeader, ProposalDropped, Role, TimeoutNow

from .harness import OPTIONS, Cluster


def test_3_10_transfer_to_an_up_to_date_follower_happens_at_once():
    c = Cluster(["a", "b", "c"])
    c.elect("a")
    c.put("a", "k", "v")
    c.stabilize()
    c["a"].transfer_leadership("b")
    c.stabilize()  # no ticks: b campaigns on TimeoutNow, voters in a's lease still grant
    assert c["b"].is_leader and c["b"].term == 2
    assert c["a"].role is Role.FOLLOWER and c["a"].leader == "b"
    c.put("b", "k2", "v2")
    c.stabilize()
    assert c.values("a") == {"k": "v", "k2": "v2"}


def test_3_10_a_lagging_target_is_caught_up_first_and_proposals_wait():
    c = Cluster(["a", "b", "c"])
    c.elect("a")
    c.isolate("c")
    for i in range(10):
        c.put("a", f"k{i}", "v")
    c.stabilize()
    c.heal()
    c["a"].transfer_leadership("c")
    with pytest.raises(ProposalDropped):
        c.put("a", "during", "transfer")
    c.process()
    assert not any(isinstance(m, TimeoutNow) for m in c.in_flight)  # c is behind
    assert any(isinstance(m, Append) and m.to == "c" for m in c.in_flight)
    c.stabilize()
    assert c["c"].is_leader and c.values("c") == c.values("a")


def test_3_10_a_transfer_that_cannot_finish_is_abandoned_after_an_election_timeout():
    c = Cluster(["a", "b", "c"])
    c.elect("a")
    c.isolate("c")
    c["a"].transfer_leadership("c")
    c.tick(["a"], times=OPTIONS.election_tick)
    assert c["a"].is_leader and c["a"].transfer_target is None
    c.put("a", "k", "v")  # proposals are accepted again


def test_only_a_leader_transfers():
    c = Cluster(["a", "b", "c"])
    c.elect("a")
    with pytest.raises(NotLeader) as e:
        c["b"].transfer_leadership("c")
    assert e.value.leader_hint == "a"
