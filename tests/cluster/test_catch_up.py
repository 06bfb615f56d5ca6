"""A replica cut off from the leader while its link still looks up (a stalled link, or its node
stopped with SIGSTOP) catches up after the fault, and its local consumer then gets what the
leader handed it meanwhile.

Found by test_jepsen.py (JEPSEN_SEED=4, 3 nodes: "isolate rabbit2 (stall)"). The link never
drops, so the leader sends no NodeDown and goes on assigning messages to the consumer on the
silent node. Deliveries run on the consumer's node when its replica applies those entries; the
leader sends the first ones before its pipeline to that follower fills (they wait in the stalled
connection and arrive after the fault), but if it compacts its log before the follower is back,
the follower catches up from an InstallSnapshot instead, and installing a snapshot ran no
effects: the messages assigned in the compacted entries stayed checked out to a consumer that is
alive and never received them (confirmed, unacked on every node, never consumed). Fixed on main
(a received snapshot resends its node's deliveries, 825555e / bbe2671); this test keeps it so.

The scenario below makes that deterministic: consumer S on the silent node has the lowest
priority, so it is handed messages only once the high-priority consumer F is gone, well after
the leader's pipeline to the silent node (64 appends) is full; then enough traffic for a
compaction (a snapshot every 4096 applied entries: an enqueue and a settle per message).
"""

from __future__ import annotations


import pika
import pytest

from . import probes
from .checker import Violation
from .history import History
from .workload import ThreadConsumer, declare_queue

QUEUE = "catchup"


def _publish(ch, ids: list[str]) -> None:
    for i in ids:
        ch.basic_publish("", QUEUE, i.encode(), mandatory=True)  # raises unless confirmed


@pytest.mark.parametrize("fault", ["stall", "pause"])
def test_consumer_on_a_silent_replica_gets_its_messages_after_it_catches_up(make_cluster,
                                                                            fault):
    pc = make_cluster(3)
    cluster = pc.cluster
    declare_queue(cluster.urls[0], QUEUE)  # client-local: rabbit1 leads
    assert probes.on_every_node(cluster, QUEUE)
    history = History()
    silent = 2
    delivered = lambda: {d.id for d in history.snapshot()[1]}  # noqa: E731
    conn = pika.BlockingConnection(pika.URLParameters(cluster.urls[0]))
    ch = conn.channel()
    ch.confirm_delivery()
    ids = [f"m{i}" for i in range(2400)]
    slow = ThreadConsumer(cluster.urls[silent], cluster.names[silent], history, QUEUE,
                          prefetch=10, priority=0)
    _publish(ch, ids[:1])  # S has its checkout in the log: it gets m0
    assert probes.wait_until(lambda: "m0" in delivered(), 10)
    fast = ThreadConsumer(cluster.urls[0], cluster.names[0], history, QUEUE,
                          prefetch=50, priority=10)
    if fault == "stall":
        for (i, j), name in pc.links.items():
            if silent in (i, j):
                pc.proxy.stall(name)
    else:
        cluster.pause(silent)
    _publish(ch, ids[1:400])  # F takes these: the pipeline to the silent node fills
    fast.close()
    _publish(ch, ids[400:420])  # S is handed 10 of these now, the rest wait
    fast = ThreadConsumer(cluster.urls[0], cluster.names[0], history, QUEUE,
                          prefetch=50, priority=10)
    _publish(ch, ids[420:])  # enough entries for the leader to compact past them
    conn.close()
    if fault == "stall":
        pc.proxy.heal_all()
    else:
        cluster.resume(silent)
    probes.wait_until(lambda: len(delivered()) == len(ids), 10)
    left = probes.counts(cluster, QUEUE)
    fast.close()
    slow.close()
    missing = [i for i in ids if i not in delivered()]
    if missing:
        raise Violation(f"{len(missing)} confirmed messages never delivered ({missing[:10]}); "
                        f"(ready, unacked) per node: {left}")
