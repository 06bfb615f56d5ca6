"""Follower acks (RaftOptions.follower_acks) and asynchronous writes (RaftOptions.async_writes):
a follower commits from a majority of its peers' acks, before the leader's next Append carries
the commit index; the commit rule (current term only) and linearizable reads still hold; with
asynchronous writes a node hands out newer entries while older ones are being written and
counts or applies them only once `persisted`."""

from __future__ import annotations

import random
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from quorum.raft import Append, AppendResp, KvMachine, KvSet, RaftNode, Role

from .harness import OPTIONS, Cluster

ACKS = replace(OPTIONS, follower_acks=True)


def _appends(m) -> bool:
    return isinstance(m, Append)


def test_a_follower_commits_from_a_peers_ack_before_the_leader_tells_it():
    c = Cluster(["a", "b", "c"], options=ACKS)
    c.elect("a")
    index = c.put("a", "k", "v")
    c.deliver(_appends)  # b and c append (durably) and ack to the leader and to each other
    acks = [m for m in c.in_flight if isinstance(m, AppendResp)]
    assert {(m.frm, m.to) for m in acks} == {("b", "a"), ("b", "c"), ("c", "a"), ("c", "b")}
    assert all(m.index == index for m in acks)
    c.deliver(lambda m: isinstance(m, AppendResp) and m.to != "a")  # the leader hears nothing
    assert c["a"].commit_index < index
    assert c["b"].commit_index == c["c"].commit_index == index
    assert c.values("b") == c.values("c") == {"k": "v"}  # applied without the leader's word
    c.stabilize()
    assert c["a"].commit_index == index and c.values("a") == {"k": "v"}


def test_without_the_option_followers_wait_for_the_leader():
    c = Cluster(["a", "b", "c"])
    c.elect("a")
    index = c.put("a", "k", "v")
    c.deliver(_appends)
    assert all(m.to == "a" for m in c.in_flight if isinstance(m, AppendResp))
    c.deliver(lambda m: isinstance(m, AppendResp) and m.to != "a")
    assert c["b"].commit_index < index


def test_one_ack_is_not_a_majority_of_five():
    c = Cluster(["a", "b", "c", "d", "e"], options=ACKS)
    c.elect("a")
    index = c.put("a", "k", "v")
    c.deliver(lambda m: _appends(m) and m.to in ("b", "c"))  # only b and c have it
    c.deliver(lambda m: isinstance(m, AppendResp) and m.to != "a")
    # b knows of b and c: two of five, and the leader's copy is not counted
    assert c["b"].commit_index < index and c["c"].commit_index < index
    c.deliver(lambda m: _appends(m) and m.to == "d")
    c.deliver(lambda m: isinstance(m, AppendResp) and m.to != "a")
    assert c["b"].commit_index == c["c"].commit_index == c["d"].commit_index == index


def test_acks_of_an_old_term_entry_do_not_commit_it():
    """Figure 8: an entry of an older term is never committed by counting acks."""
    c = Cluster(["a", "b", "c", "d", "e"], options=ACKS)
    c.elect("a")
    c.stabilize()
    c.put("a", "old", "1")
    c.deliver(lambda m: _appends(m) and m.to == "b")  # only a and b hold it (term 1)
    c.drop()
    old = c["b"].last_index
    c.isolate("a")
    c["c"].campaign(transfer=True)  # c asks for votes in term 2; b refuses, but learns term 2
    c.deliver(lambda m: m.to != "b" or not _appends(m))
    c.drop(lambda m: m.to == "b")
    b = c["b"]
    assert b.term == 2 and b.role is Role.FOLLOWER and b.log_term(old) == 1
    for peer in ("d", "e"):  # two more acks at `old` in term 2: a majority of five by count
        b.step(AppendResp("b", peer, 2, old))
    assert b.commit_index < old


def test_a_follower_counts_itself_only_once_its_write_is_durable():
    opts = replace(ACKS, async_writes=True)
    nodes = {i: RaftNode(i, ["a", "b", "c"], rng=random.Random(i), options=opts) for i in "abc"}
    a, b, c = nodes["a"], nodes["b"], nodes["c"]
    a.campaign(transfer=True)
    _run(nodes)
    assert a.role is Role.LEADER
    index = a.propose(KvMachine.encode(KvSet("k", "v")), 0)
    rd = a.ready()
    appends = [m for m in rd.early_messages if isinstance(m, Append)]
    a.advance(rd)
    for m in appends:
        nodes[m.to].step(m)
    rb = b.ready()
    assert rb.entries and not rb.messages[0].reject
    b.advance(rb)  # handed to the disk, not durable yet: its acks are held by the driver
    assert b.ready() is None  # nothing new: the entries are not handed out twice
    rc = c.ready()
    c.advance(rc)
    c.persisted(rc.entries[-1].index, rc.entries[-1].term)
    for m in rc.messages:
        if m.to == "b":
            b.step(m)  # c's ack reaches b before b's own write is done
    assert b.commit_index < index  # b does not count itself yet
    b.persisted(rb.entries[-1].index, rb.entries[-1].term)
    assert b.commit_index == index
    rd = b.ready()
    assert [e.index for e in rd.committed][-1] == index


def test_async_writes_apply_only_what_is_durable_and_the_leader_counts_itself_late():
    opts = replace(OPTIONS, async_writes=True)
    nodes = {i: RaftNode(i, ["a", "b", "c"], rng=random.Random(i), options=opts) for i in "abc"}
    a = nodes["a"]
    a.campaign(transfer=True)
    _run(nodes)
    index = a.propose(KvMachine.encode(KvSet("k", "v")), 0)
    rd = a.ready()
    a.advance(rd)  # the leader's write is under way
    held = list(rd.early_messages)
    b = nodes["b"]
    for m in held:
        if m.to == "b":
            b.step(m)
    rb = b.ready()
    b.advance(rb)
    # b's ack is sent only after its write (the driver's job): deliver it after `persisted`
    b.persisted(rb.entries[-1].index, rb.entries[-1].term)
    for m in rb.messages:
        a.step(m)
    # a majority (b, and a only once durable): a's own write is not done, so b alone is 1 of 3
    assert a.commit_index < index
    a.persisted(rd.entries[-1].index, rd.entries[-1].term)
    assert a.commit_index == index
    assert [e.index for e in a.ready().committed][-1] == index


def _run(nodes, rounds: int = 50) -> None:
    """Deliver everything, writing synchronously (persisted right after advance)."""
    for _ in range(rounds):
        moved = False
        for n in nodes.values():
            while (rd := n.ready()) is not None:
                n.advance(rd)
                if rd.entries:
                    n.persisted(rd.entries[-1].index, rd.entries[-1].term)
                for m in [*rd.early_messages, *rd.messages]:
                    nodes[m.to].step(m)
                    moved = True
        if not moved:
            return


def test_reads_wait_for_the_leaders_last_entry_with_follower_acks():
    """A follower may apply (and answer for) an entry the leader does not know is committed:
    the leader's read point must include it."""
    c = Cluster(["a", "b", "c"], options=ACKS)
    c.elect("a")
    c.stabilize()
    index = c.put("a", "k", "v")
    c.deliver(_appends)
    c.deliver(lambda m: isinstance(m, AppendResp) and m.to != "a")
    assert c.values("b") == {"k": "v"} and c["a"].commit_index < index
    c["a"].read_index(b"r1")
    c.stabilize()
    (rs,) = c.reads["a"]
    assert rs.index >= index


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32), steps=st.lists(st.integers(0, 9), min_size=10, max_size=120))
def test_followers_never_commit_what_the_leader_does_not_hold(seed, steps):
    """Random deliveries, drops, ticks and proposals with follower acks: every node's committed
    prefix is a prefix of every other's (no two nodes commit different entries at an index)."""
    rng = random.Random(seed)
    c = Cluster(["a", "b", "c"], options=ACKS, seed=seed)
    c.elect("a")
    n = 0
    for s in steps:
        leader = c.leader()
        if s <= 3 and leader is not None:
            n += 1
            try:
                c.put(leader.id, f"k{n}", str(n))
            except Exception:
                pass
        elif s <= 6:
            c.deliver(lambda m: rng.random() < 0.7)
        elif s == 7:
            c.drop(lambda m: rng.random() < 0.3)
        else:
            c.tick([rng.choice(c.ids)], times=1 + s % 3)
        committed = {}
        for i in c.ids:
            node = c[i]
            for e in c.applied[i]:
                assert committed.setdefault(e.index, (e.term, e.data)) == (e.term, e.data)
            assert node.commit_index <= node.last_index
