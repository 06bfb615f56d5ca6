"""Consumers suspected down by a leader that then stops get deliveries again once their node is
back: the new leader restores them.

Found by test_jepsen.py (JEPSEN_SEED=3028885833, 3 nodes, in CI): after the faults healed,
1375 confirmed messages stayed ready on every node while the live consumers got nothing, until
they reconnected. A link that drops makes the leader send NodeDown (the node's consumers are
suspected: no more deliveries); the link coming back makes the leader send NodeUp. But a node
that sees the link come back while it only follows sends nothing, and the NodeUp of a leader
that stops first never commits: whoever leads next saw no change, so those consumers stayed
suspected for good. Now the leader's audit (every 2 s) sends NodeUp for every node it reaches
that has suspected consumers.

The scenario makes that deterministic: the consumer's node is cut off (the leader suspects its
consumer), the leader is stopped with SIGSTOP, then the cut is healed, so the two remaining
nodes elect a leader that never saw the link drop.
"""

from __future__ import annotations

import pika

from . import probes
from .checker import Violation
from .history import History
from .workload import ThreadConsumer, declare_queue

QUEUE = "suspected"


def _publish(url: str, ids: list[str]) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    ch.confirm_delivery()
    for i in ids:
        ch.basic_publish("", QUEUE, i.encode(), mandatory=True)  # raises unless confirmed
    conn.close()


def test_a_consumer_suspected_by_a_leader_that_stopped_gets_messages_again(make_cluster):
    pc = make_cluster(3)
    cluster = pc.cluster
    declare_queue(cluster.urls[0], QUEUE)  # client-local: rabbit1 leads
    assert probes.on_every_node(cluster, QUEUE)
    history = History()
    delivered = lambda: {d.id for d in history.snapshot()[1]}  # noqa: E731
    consumer_node, leader = 1, 0
    consumer = ThreadConsumer(cluster.urls[consumer_node], cluster.names[consumer_node],
                              history, QUEUE, prefetch=10)
    try:
        _publish(cluster.urls[2], ["m0"])
        assert probes.wait_until(lambda: "m0" in delivered(), 10), "no delivery before the fault"
        # The consumer's ack goes through the leader's log after the delivery is recorded. Cut
        # before it is applied and the NodeDown returns m0 to the queue (as rabbit_fifo returns
        # a suspected consumer's checked-out messages), which is not what this test is about.
        on_leader = lambda: probes.queue_on(cluster, leader, QUEUE) or {}  # noqa: E731
        assert probes.wait_until(lambda: on_leader().get("messages") == 0, 10), \
            f"m0's ack was not applied on the leader ({on_leader()})"
        for (i, j), name in pc.links.items():
            if consumer_node in (i, j):
                pc.proxy.cut(name)  # the leader's link drops: NodeDown, the consumer suspected
        _publish(cluster.urls[2], ["cut"])
        # suspected, the only consumer is handed nothing: the message stays ready
        ready = lambda: on_leader().get("messages_ready")  # noqa: E731
        assert probes.wait_until(lambda: ready() == 1, 10), \
            f"the leader did not suspect the cut-off node's consumer (ready: {ready()})"
        cluster.pause(leader)  # stopped before it can see the link come back
        pc.proxy.heal_all()
        ids = ["cut"] + [f"m{i}" for i in range(1, 21)]
        _publish(cluster.urls[2], ids[1:])  # once rabbit2 and rabbit3 have elected a leader
        probes.wait_until(lambda: delivered() >= set(ids), 15)
        missing = sorted(set(ids) - delivered())
        left = probes.counts(cluster, QUEUE)
    finally:
        cluster.resume(leader)
        consumer.close()
    if missing:
        raise Violation(f"{len(missing)} confirmed messages never reached the live consumer "
                        f"({missing[:5]}); (ready, unacked) per node: {left}")
