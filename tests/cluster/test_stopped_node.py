"""A SIGSTOPped node is a node down once its links have been silent for `net_ticktime` (as an
Erlang node's, which RabbitMQ relies on): its sockets stay open, so only the links' ticks tell.
The unacked messages of its consumers then go to consumers on other nodes, redelivered; when
the node resumes it rejoins and catches up."""

from __future__ import annotations

import pika

from . import probes
from .history import History
from .workload import ThreadConsumer, declare_queue

QUEUE = "stopped"
TICKTIME = 2  # seconds; RabbitMQ's default is 60


def test_a_stopped_nodes_unacked_messages_go_to_other_consumers(make_cluster):
    pc = make_cluster(3, proxied=False, config=f"net_ticktime = {TICKTIME}\n")
    cluster = pc.cluster
    declare_queue(cluster.urls[0], QUEUE)  # client-local: rabbit1 leads
    assert probes.on_every_node(cluster, QUEUE)
    far = 2
    history = History()
    # A, on the node that will be stopped, takes everything (higher priority) and never acks
    a = ThreadConsumer(cluster.urls[far], cluster.names[far], history, QUEUE,
                       prefetch=10, priority=10, ack=False)
    conn = pika.BlockingConnection(pika.URLParameters(cluster.urls[0]))
    ch = conn.channel()
    ch.confirm_delivery()
    ids = [f"m{i}" for i in range(5)]
    for i in ids:
        ch.basic_publish("", QUEUE, i.encode(), mandatory=True)
    assert probes.wait_until(
        lambda: {d.id for d in history.snapshot()[1] if d.node == cluster.names[far]} >= set(ids),
        15), "A did not get the messages"
    b = ThreadConsumer(cluster.urls[0], cluster.names[0], history, QUEUE, prefetch=10, ack=True)
    cluster.pause(far)
    try:
        # well within RabbitMQ's 60 s, and far beyond our 2 s ticktime
        got = probes.wait_until(
            lambda: {d.id for d in history.snapshot()[1]
                     if d.node == cluster.names[0] and d.redelivered} >= set(ids), 20)
        assert got, ("B did not get the stopped node's unacked messages: "
                     f"{[(d.id, d.node, d.redelivered) for d in history.snapshot()[1]]}")
        assert probes.wait_until(lambda: _counts(cluster, 0) == (0, 0), 10)
    finally:
        cluster.resume(far)
    # the resumed node redials, catches up and agrees that nothing is left
    assert probes.wait_until(lambda: probes.caught_up(cluster, far, QUEUE), 30)
    assert probes.wait_until(lambda: _counts(cluster, far) == (0, 0), 15)
    conn.close()
    a.close()
    b.close()


def _counts(cluster, i: int) -> tuple[int, int] | None:
    """(ready, unacked) on node i only (asking the stopped node would hang)."""
    q = probes.queue_on(cluster, i, QUEUE)
    return None if q is None else (q["messages_ready"], q["messages_unacknowledged"])
