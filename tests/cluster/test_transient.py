"""Transient (non-durable) exchanges live as long as some node of the cluster runs, as in
RabbitMQ (ram-only tables): a rolling restart keeps them, a restart of every node drops them
(and their bindings); durable ones stay either way."""

from __future__ import annotations

import pika

from . import probes
from .workload import declare_queue


def _exists(url: str, exchange: str) -> bool:
    return probes.declared(url, exchange, "exchange")


def test_transient_exchanges_survive_a_rolling_restart_and_go_with_a_full_one(make_cluster):
    pc = make_cluster(3, proxied=False)
    cluster = pc.cluster
    declare_queue(cluster.urls[0], "tq")  # a durable (quorum) queue to bind to
    conn = pika.BlockingConnection(pika.URLParameters(cluster.urls[0]))
    ch = conn.channel()
    ch.exchange_declare("tx", "fanout", durable=False)
    ch.exchange_declare("dx", "fanout", durable=True)
    ch.queue_bind("tq", "tx")
    conn.close()
    for i in range(len(cluster)):  # one node at a time: the others keep them alive
        cluster.restart(i)
        assert all(_exists(url, "tx") for url in cluster.urls)
    # every node down, then up again: the cluster restarted as a whole
    for i in range(len(cluster)):
        cluster.stop(i)
    for i in range(len(cluster)):
        cluster.restart(i, wait=False)
    cluster.wait_formed(60)
    assert probes.wait_until(lambda: not any(_exists(url, "tx") for url in cluster.urls), 30), \
        "the transient exchange survived a restart of every node"
    assert all(_exists(url, "dx") for url in cluster.urls)
    bindings = cluster.api(1).get("queues", "/", "tq", "bindings")
    assert [b for b in bindings if b["source"] == "tx"] == []
