"""Log replication (Raft 5.3), repair after leader changes, and the commit rule (5.4.2)."""

from __future__ import annotations

from quorum.raft import Append, AppendResp, RaftOptions, Role

from .harness import OPTIONS, Cluster


def test_5_3_entries_replicate_and_commit_on_a_majority():
    c = Cluster(["a", "b", "c"])
    c.elect("a")
    c.isolate("c")
    index = c.put("a", "k", "v")
    c.stabilize()
    assert c["a"].commit_index == index  # a and b are a majority
    assert c.values("a") == c.values("b") == {"k": "v"}
    assert c.values("c") == {}
    c.heal()
    c.tick(["a"])  # a heartbeat shows c is behind; the leader catches it up
    assert c.values("c") == {"k": "v"}


def test_5_3_followers_learn_the_commit_index_from_the_leader():
    c = Cluster(["a", "b", "c"])
    c.elect("a")
    c.put("a", "k", "v")
    c.deliver(lambda m: isinstance(m, Append))  # followers append
    c.deliver(lambda m: isinstance(m, AppendResp))  # leader commits
    assert c["a"].commit_index == 2 and c["b"].commit_index == 1
    c.stabilize()  # the leader's next Append carries commit 2
    assert c["b"].commit_index == 2 and c.values("b") == {"k": "v"}


def test_5_3_log_repair_replaces_an_old_leaders_uncommitted_tail():
    c = Cluster(["a", "b", "c"])
    c.elect("a")
    c.put("a", "base", "1")  # index 2, everywhere
    c.stabilize()
    c.isolate("a")  # a keeps appending entries 3..22 in term 1 that nobody else sees
    for i in range(20):
        c.put("a", f"lost{i}", "x")
    c.stabilize()
    c.elect("b", force=True)  # b leads term 2 with c: no-op 3, entries 4..8
    for i in range(5):
        c.put("b", f"kept{i}", "y")
    c.stabilize()
    c.elect("c", force=True)  # c leads term 3 and expects a to have its entries up to 9
    c.heal()
    c.tick(["c"])
    assert c["a"].role is Role.FOLLOWER and c["a"].leader == "c"
    assert c.log_terms("a") == c.log_terms("c") == [1, 1] + [2] * 6 + [3]
    assert c.values("a") == c.values("c") and "lost0" not in c.values("a")
    # one rejection was enough: a's hint (first index of its conflicting term 1) let c skip
    # back from 9 to 3 at once instead of one index per round trip
    rejects = [m for m in c.delivered if isinstance(m, AppendResp) and m.reject and m.frm == "a"]
    assert len(rejects) == 1


def test_5_4_2_figure_8_an_old_term_entry_is_not_committed_by_counting():
    opts = RaftOptions(election_tick=10, heartbeat_tick=1, max_append_entries=1, pre_vote=False,
                       check_quorum=False)
    c = Cluster(["s1", "s2", "s3", "s4", "s5"], options=opts)
    c.elect("s1")  # term 1; the no-op is index 1
    c.put("s1", "a", "1")  # index 2, everywhere
    c.stabilize()
    # (a) s1 appends index 3 in term 1 and only s2 gets it
    c.put("s1", "b", "2")
    c.deliver(lambda m: isinstance(m, Append) and m.to == "s2")
    c.drop()
    c.crash("s1")
    # (b) s5 wins term 2 with s3 and s4, appends index 3 in its own log only, and dies
    c["s5"].campaign()
    c.deliver(lambda m: m.to in ("s3", "s4", "s5"))
    c.deliver(lambda m: m.to == "s5")
    assert c["s5"].role is Role.LEADER and c["s5"].term == 2
    c.drop()
    c.crash("s5")
    # (c) s1 returns and wins term 3; it sends its index-3 entry (term 1) on to s3 and s4
    c.start("s1")
    for _ in range(2):  # term 2 is taken (s3 and s4 voted for s5), so it takes two tries
        c["s1"].campaign()
        c.deliver(lambda m: m.to in ("s2", "s3", "s4"))
        c.deliver(lambda m: m.to == "s1")
    assert c["s1"].role is Role.LEADER and c["s1"].term == 3
    c.drop(lambda m: m.to not in ("s3", "s4"))

    def but_not_index_4(m):
        holds_3 = m.to in ("s3", "s4") and c[m.to].log_term(3) == 1
        return not (isinstance(m, Append) and m.prev_index == 3 and holds_3)

    for _ in range(4):  # probe s3 and s4 back to index 2, then send them index 3 alone
        c.deliver(but_not_index_4)
        c.drop(lambda m: m.to not in ("s1", "s3", "s4"))
    assert c["s3"].log_term(3) == c["s4"].log_term(3) == 1 and c["s3"].last_index == 3
    # index 3 is now on s1, s3 and s4, a majority, but it is from term 1: not committed
    assert c["s1"].commit_index == 2
    # (d) s1 dies again; s5 can win term 4 and overwrite index 3 everywhere: that is allowed,
    # because index 3 was never committed
    c.crash("s1")
    c.drop()
    c.start("s5")
    for _ in range(2):  # term 3 is taken too
        c["s5"].campaign()
        c.stabilize()
    assert c["s5"].role is Role.LEADER and c["s5"].term == 4
    assert all(c[i].log_term(3) == 2 for i in ("s2", "s3", "s4", "s5"))
    assert "b" not in c.values("s2")


def test_5_4_2_an_old_term_entry_commits_with_the_leaders_first_own_entry():
    c = Cluster(["a", "b", "c"])
    c.elect("a")
    c.isolate("c")
    c.put("a", "k", "v")
    c.deliver(lambda m: False)  # b does not get it either: index 2 is only on a
    c.drop()
    c.heal()
    c.deliver(lambda m: False)
    c.elect("a") if c["a"].role is not Role.LEADER else None
    c.stabilize()
    c.crash("a")
    c.start("a")
    c.tick(times=3 * OPTIONS.election_tick)
    leader = c.leader()
    assert leader.term >= 2
    # whoever leads, the state is the same everywhere once the new term's no-op commits
    assert c.values("b") == c.values("c") == c.values(leader.id)


def test_pipelining_sends_several_batches_before_any_answer():
    opts = RaftOptions(election_tick=10, heartbeat_tick=1, max_append_entries=2, max_inflight=3)
    c = Cluster(["a", "b", "c"], options=opts)
    c.elect("a")
    for i in range(10):
        c.put("a", f"k{i}", "v")
    c.process()
    to_b = [m for m in c.in_flight if isinstance(m, Append) and m.to == "b"]
    # one Append per batch of 2 entries, at most 3 unanswered
    assert [len(m.entries) for m in to_b] == [2, 2, 2]
    c.stabilize()
    assert c.values("b") == c.values("a") and len(c.values("a")) == 10


def test_batching_respects_the_byte_limit_but_sends_at_least_one_entry():
    opts = RaftOptions(election_tick=10, heartbeat_tick=1, max_append_bytes=100, max_inflight=64)
    c = Cluster(["a", "b"], options=opts)
    c.elect("a")
    c.put("a", "big", "x" * 500)
    c.put("a", "s1", "y")
    c.put("a", "s2", "z")
    c.process()
    sizes = [len(m.entries) for m in c.in_flight if isinstance(m, Append) and m.to == "b"]
    assert sizes[0] == 1 and sum(sizes) == 3
    c.stabilize()
    assert c.values("b") == c.values("a")


def test_a_lost_append_is_resent_after_a_heartbeat():
    c = Cluster(["a", "b", "c"])
    c.elect("a")
    c.cut[("a", "c")] = True  # everything a sends to c is lost for a while
    c.put("a", "k", "v")
    c.stabilize()
    assert c.values("c") == {} and c.values("b") == {"k": "v"}
    c.heal()
    c.tick(["a"], times=2)
    assert c.values("c") == {"k": "v"}


def test_entries_carry_the_leaders_timestamp_which_never_goes_back():
    c = Cluster(["a", "b", "c"])
    c.elect("a")
    i1 = c.put("a", "k1", "v", now_ms=5000)
    i2 = c.put("a", "k2", "v", now_ms=4000)  # a clock step back on the leader
    c.stabilize()
    stamps = {e.index: e.timestamp for e in c.applied["c"]}
    assert stamps[i1] == 5000 and stamps[i2] == 5000
    assert c.state["c"]["k1"] == ("v", 5000)


def test_10_2_1_the_leader_sends_before_its_own_fsync_but_counts_itself_only_after():
    c = Cluster(["a", "b", "c"])
    c.elect("a")
    a = c["a"]
    c.put("a", "k", "v")
    rd = a.ready()  # the driver is still writing this batch to a's disk...
    assert [e.index for e in rd.entries] == [2]
    assert [m.to for m in rd.early_messages] == ["b", "c"]  # ...but may already send these
    b = c["b"]
    b.step(rd.early_messages[0])
    b_rd = b.ready()
    b.advance(b_rd)  # b persisted entry 2 and acknowledges it
    for m in b_rd.messages:
        a.step(m)
    assert a.commit_index == 1  # a's own copy is not durable yet: only b has entry 2
    a.advance(rd)  # a's fsync finished
    assert a.commit_index == 2



def test_only_commits_ready_is_a_lone_leaders_commit_after_its_write_and_nothing_else():
    c = Cluster(["s1"])
    node = c.elect("s1")
    assert not node.only_commits_ready() and not node.has_ready()
    index = c.put("s1", "a", "1")
    assert not node.only_commits_ready()  # the entry is still to be written
    rd = node.ready()
    assert [e.index for e in rd.entries] == [index] and not rd.committed
    c.stores["s1"].save(rd)
    node.advance(rd)  # durable: a lone leader commits it at once
    assert node.only_commits_ready()
    rd = node.ready()
    assert [e.index for e in rd.committed] == [index]
    assert not rd.entries and not rd.messages and rd.hard_state.commit == index
    node.advance(rd)
    assert not node.only_commits_ready() and not node.has_ready()


def test_only_commits_ready_is_false_for_a_leader_with_followers():
    c = Cluster(["s1", "s2", "s3"])
    leader = c.elect("s1")
    c.put("s1", "a", "1")
    rd = leader.ready()
    c.stores["s1"].save(rd)
    c.in_flight.extend(rd.early_messages + rd.messages)
    leader.advance(rd)
    assert not leader.only_commits_ready()  # not committed: the followers have not answered
    c.stabilize()  # committed and applied everywhere
    assert c.values("s2") == {"a": "1"} and not leader.only_commits_ready()
