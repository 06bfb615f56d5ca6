"""Cycle detection, alone and in repeated dead lettering through several queues and back."""

import pytest

from amqp_broker.core import Dest, Topology
from dlx import dead_letter, is_death_cycle, split_cycles


def D(queue, reason):
    return {"queue": queue, "reason": reason, "count": 1}


CASES = [
    # target, x-death (newest first, including the current death), whole_history, cycle?
    ("q1", [D("q1", "expired")], True, True),  # self-loop through the default exchange
    ("q1", [D("q1", "expired")], False, True),
    ("q2", [D("q1", "expired")], True, False),  # not been in q2
    ("q1", [D("q2", "maxlen"), D("q1", "expired")], True, True),
    ("q1", [D("q2", "rejected"), D("q1", "expired")], True, False),
    ("q1", [D("q2", "rejected"), D("q1", "expired")], False, False),
    # a rejection older than the target's entry: 3.x ignores it, 4.x does not
    ("q1", [D("q2", "expired"), D("q1", "expired"), D("q3", "rejected")], False, True),
    ("q1", [D("q2", "expired"), D("q1", "expired"), D("q3", "rejected")], True, False),
    # a non-table entry was put there by a client: not automatic
    ("q1", ["junk", D("q1", "expired")], False, False),
    ("q1", ["junk", D("q1", "expired")], True, False),
    ("q1", [], True, False),
]


@pytest.mark.parametrize("target,deaths,whole,expected", CASES)
def test_is_death_cycle(target, deaths, whole, expected):
    assert is_death_cycle(target, deaths, whole_history=whole) is expected


def test_current_rejection_never_cycles():
    assert not is_death_cycle("q1", [D("q1", "expired")], reason="rejected")


def test_split_keeps_order():
    deliver, dropped = split_cycles(["a", "q1", "b"], [D("q1", "expired")])
    assert deliver == ["a", "b"] and dropped == ["q1"]


# -- whole paths: dead-letter, route on the DLX, drop cycles --------------------------------


class World:
    """Queues with dead-letter settings on one Topology; moves a message along on each death."""

    def __init__(self):
        self.topo = Topology("/")
        self.dlx = {}  # queue -> (dlx, dl routing key)
        self.clock = 1_700_000_000

    def queue(self, name, dlx=None, dlrk=None):
        self.topo.add_queue(name)
        if dlx is not None:
            self.dlx[name] = (dlx, dlrk)

    def die(self, msg, queue, reason):
        """Dead-letter ``msg`` (headers, exchange, routing key) from ``queue``; return arrivals."""
        headers, exchange, rk = msg
        self.clock += 1
        dlx, dlrk = self.dlx[queue]
        r = dead_letter(headers, reason=reason, queue=queue, exchange=exchange, routing_key=rk,
                        time=self.clock, dlx=dlx, dlx_routing_key=dlrk)
        routed = self.topo.route_keys(dlx, r.routing_keys, r.headers, internal_ok=True)
        deliver, dropped = split_cycles(routed, r.headers["x-death"], reason=reason)
        new_rk = r.routing_keys[0]
        return (r.headers, dlx, new_rk), deliver, dropped


def test_queue_dead_lettering_to_itself_drops_expired_but_not_rejected():
    w = World()
    w.queue("work", dlx="")  # default exchange, no DL routing key: back to "work"
    msg = ({}, "", "work")
    _, deliver, dropped = w.die(msg, "work", "expired")
    assert deliver == [] and dropped == ["work"]
    msg2, deliver, dropped = w.die(msg, "work", "rejected")
    assert deliver == ["work"] and dropped == []
    msg3, deliver, _ = w.die(msg2, "work", "rejected")
    assert deliver == ["work"]
    assert msg3[0]["x-death"][0]["count"] == 2


def test_retry_loop_through_a_wait_queue_with_rejections():
    # work --rejected--> retry (TTL) --expired--> work ... : a consumer rejects each time,
    # so the loop is not fully automatic and must keep going.
    w = World()
    w.topo.declare_exchange("retry-x", "direct")
    w.topo.declare_exchange("work-x", "direct")
    w.queue("work", dlx="retry-x", dlrk="retry")
    w.queue("retry", dlx="work-x", dlrk="work")
    w.topo.bind("retry-x", Dest.queue("retry"), "retry")
    w.topo.bind("work-x", Dest.queue("work"), "work")
    w.topo.bind("work-x", Dest.queue("work"), "orders")
    msg = ({"CC": ["audit"]}, "work-x", "orders")
    for attempt in range(1, 4):
        msg, deliver, dropped = w.die(msg, "work", "rejected")
        assert deliver == ["retry"] and not dropped
        msg, deliver, dropped = w.die(msg, "retry", "expired")
        assert deliver == ["work"] and not dropped
    h = msg[0]
    assert [(d["queue"], d["reason"], d["count"]) for d in h["x-death"]] == [
        ("retry", "expired", 3), ("work", "rejected", 3)]
    assert h["x-first-death-queue"] == "work" and h["x-first-death-reason"] == "rejected"
    assert h["x-first-death-exchange"] == "work-x"
    assert h["x-last-death-queue"] == "retry" and h["x-last-death-exchange"] == "retry-x"
    # first death recorded the original keys including CC; CC then removed by the DL key
    assert h["x-death"][1]["routing-keys"] == ["orders", "audit"]
    assert "CC" not in h


def test_automatic_loop_over_three_queues_dropped_when_it_returns():
    # a -> b -> c -> a, every hop by expiry: dropped on the way back into a.
    w = World()
    for name, nxt in (("a", "b"), ("b", "c"), ("c", "a")):
        w.queue(name, dlx="", dlrk=nxt)
    msg = ({}, "", "a")
    msg, deliver, _ = w.die(msg, "a", "expired")
    assert deliver == ["b"]
    msg, deliver, _ = w.die(msg, "b", "maxlen")
    assert deliver == ["c"]
    msg, deliver, dropped = w.die(msg, "c", "delivery_limit")
    assert deliver == [] and dropped == ["a"]
    assert [d["queue"] for d in msg[0]["x-death"]] == ["c", "b", "a"]


def test_fanout_dlx_delivers_to_fresh_queues_and_drops_the_looping_one():
    w = World()
    w.topo.declare_exchange("dlx", "fanout")
    w.queue("src", dlx="dlx")
    w.queue("parking")
    w.queue("audit")
    for q in ("src", "parking", "audit"):
        w.topo.bind("dlx", Dest.queue(q))
    _, deliver, dropped = w.die(({}, "amq.direct", "k"), "src", "expired")
    assert deliver == ["parking", "audit"] and dropped == ["src"]


def test_cc_bcc_routing_without_dl_key():
    w = World()
    w.topo.declare_exchange("dlx", "direct")
    w.queue("src", dlx="dlx")
    for q in ("k", "c", "b"):
        w.queue(q)
        w.topo.bind("dlx", Dest.queue(q), q)
    (headers, _, _), deliver, _ = w.die(({"CC": ["c"], "BCC": ["b"]}, "x", "k"), "src", "rejected")
    assert deliver == ["k", "c", "b"]
    assert "BCC" not in headers and headers["CC"] == ["c"]
