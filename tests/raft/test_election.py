"""Leader election (Raft 5.2), pre-vote (thesis 9.6), check-quorum and restarts."""

from __future__ import annotations

import random

from quorum.raft import (PreVote, RaftNode, RaftOptions, Role, Vote)

from .harness import OPTIONS, Cluster


def test_5_2_a_follower_that_hears_nothing_becomes_leader_and_others_follow():
    c = Cluster(["a", "b", "c"])
    c.tick(times=2 * OPTIONS.election_tick)
    leader = c.leader()
    assert leader is not None and leader.term == 1
    assert all(c[i].leader == leader.id and c[i].term == 1 for i in c.ids)
    # the new leader's no-op entry commits everywhere
    assert all(c[i].commit_index == 1 for i in c.ids)


def test_5_2_each_node_votes_once_per_term():
    c = Cluster(["a", "b", "c"], options=RaftOptions(pre_vote=False))
    c["a"].campaign()
    c["b"].campaign()  # both candidates at term 1 vote for themselves
    c.deliver(lambda m: m.to == "c" and m.frm == "a")  # c votes for a first
    c.stabilize()
    assert c["a"].role is Role.LEADER and c["a"].term == 1
    assert c["b"].role is Role.FOLLOWER and c["c"].vote == "a"


def test_5_4_1_a_candidate_with_an_older_log_gets_no_vote():
    c = Cluster(["a", "b", "c"])
    c.elect("a")
    c.isolate("c")
    c.put("a", "k", "v")
    c.stabilize()
    c.heal()
    c.crash("a")
    # c cannot win without b, and b refuses c whose log lacks entry 2; b wins instead
    for _ in range(10 * OPTIONS.election_tick):
        c["c"].campaign()
        c.tick(["b", "c"])
        assert c["c"].role is not Role.LEADER
        if c.leader():
            break
    assert c.leader().id == "b"


def test_9_6_pre_vote_keeps_a_rejoining_node_from_disrupting_the_leader():
    c = Cluster(["a", "b", "c"])
    c.elect("a")
    c.isolate("c")
    c.tick(["c"], times=10 * OPTIONS.election_tick)  # c keeps failing its pre-votes
    assert c["c"].term == 1 and c["c"].role is not Role.LEADER
    c.heal()
    c.tick(times=3)
    assert c["a"].role is Role.LEADER and c["a"].term == 1
    assert c["c"].leader == "a"


def test_without_pre_vote_a_rejoining_node_forces_a_new_term():
    c = Cluster(["a", "b", "c"], options=RaftOptions(pre_vote=False, check_quorum=False))
    c.elect("a")
    c.isolate("c")
    c.tick(["c"], times=3 * OPTIONS.election_tick)
    assert c["c"].term > 1  # it campaigned alone, again and again
    c.heal()
    c.tick(times=3 * OPTIONS.election_tick)
    assert c.leader().term > 1  # the old leader was deposed by c's higher term


def test_leader_lease_vote_requests_are_ignored_while_the_leader_is_alive():
    c = Cluster(["a", "b", "c"])
    c.elect("a")
    # c asks for a vote at a higher term as if transferring, but without TimeoutNow semantics
    c["b"].step(Vote("b", "c", 5, 100, 5, transfer=False))
    assert c["b"].term == 1 and c["b"].vote == "a"
    c["b"].step(PreVote("b", "c", 5, 100, 5))
    assert c["b"].term == 1


def test_6_2_check_quorum_an_isolated_leader_steps_down():
    c = Cluster(["a", "b", "c"])
    c.elect("a")
    c.isolate("a")
    c.tick(["a"], times=2 * OPTIONS.election_tick)
    assert c["a"].role is Role.FOLLOWER
    c.tick(["b", "c"], times=3 * OPTIONS.election_tick)
    leader = c.leader()
    assert leader is not None and leader.id in ("b", "c") and leader.term == 2


def test_a_restarted_node_keeps_its_term_vote_and_log():
    c = Cluster(["a", "b", "c"])
    c.elect("a")
    c.put("a", "x", "1")
    c.stabilize()
    c.crash("b")
    b = c.start("b")
    assert (b.term, b.vote, b.last_index, b.commit_index) == (1, "a", 2, 2)
    c.tick(times=2)
    assert c.values("b") == {"x": "1"}


def test_a_single_node_cluster_commits_as_soon_as_its_own_write_is_durable():
    node = RaftNode("solo", ["solo"], rng=random.Random(1))
    for _ in range(2 * OPTIONS.election_tick):
        node.tick()
    assert node.is_leader
    while (rd := node.ready()) is not None:  # persist the no-op
        node.advance(rd)
    index = node.propose(b"x", now_ms=7)
    rd = node.ready()
    assert [e.index for e in rd.entries] == [index] and rd.committed == []
    node.advance(rd)  # the entry is durable: now it commits
    rd = node.ready()
    assert rd.committed[-1].index == index
    assert rd.committed[-1].data == b"x" and rd.committed[-1].timestamp == 7
    node.advance(rd)
    assert node.ready() is None


def test_randomised_timeouts_come_only_from_the_rng_given():
    def first_campaign_tick(seed):
        n = RaftNode("a", ["a", "b", "c"], rng=random.Random(seed))
        for t in range(1, 100):
            n.tick()
            if n.role is not Role.FOLLOWER:
                return t
    assert first_campaign_tick(3) == first_campaign_tick(3)
    seen = {first_campaign_tick(s) for s in range(30)}
    assert len(seen) > 1 and min(seen) >= OPTIONS.election_tick and max(seen) < 2 * OPTIONS.election_tick


def test_5_2_a_restarted_node_does_not_vote_twice_in_a_term():
    c = Cluster(["a", "b", "c"], options=RaftOptions(pre_vote=False, check_quorum=False))
    c["a"].campaign()
    c["b"].campaign()  # a and b are both candidates in term 1
    c.deliver(lambda m: m.to == "c" and m.frm == "a")  # c votes for a (and persists it)
    c.crash("c")
    c.drop(lambda m: m.frm == "c")
    c.start("c")
    assert c["c"].vote == "a"
    c.deliver(lambda m: m.to == "c" and m.frm == "b")
    assert c["c"].vote == "a"
    c.stabilize()
    leaders = [i for i in c.ids if c[i].is_leader and c[i].term == 1]
    assert leaders == []  # a's vote answer was dropped in the crash; b was refused
    c.tick(times=4 * OPTIONS.election_tick)
    assert len({(n.term, n.id) for n in c.nodes.values() if n.is_leader}) == 1
