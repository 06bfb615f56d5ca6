"""Partitioned queues on a 3-node cluster: the consumers of one queue on different nodes
(each served by its own node's replica), with the same client-visible promises as on one node
(tests/partitioned/workload.py): a third consumer joining moves keys only after their old
owner's last ack, a consumer that never acks delays the handoff by the timeout only; and every
node shows the same partition map."""
from __future__ import annotations

import asyncio
import time

import pika

from tests.partitioned.workload import (KEYS, Log, PikaConsumer, PikaPublisher,
                                        aio_join_scenario, aio_stalled_owner_scenario,
                                        check_acks_in_key_order, check_graceful_handoffs,
                                        check_stalled, declare, pika_join_scenario, spin,
                                        stalled_owner_scenario)

from . import probes

ROUNDS = 30


def _declare(cluster, name: str, handoff_ms: int) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(cluster.urls[0]))
    try:
        declare(conn.channel(), name, partitions=8, handoff_ms=handoff_ms)
    finally:
        conn.close()
    assert probes.on_every_node(cluster, name)


def _partition_maps(cluster, name: str) -> list:
    return [[(p["state"], (p["owner"] or {}).get("consumer_tag"), (p["owner"] or {}).get("node"))
             for p in cluster.api(i).get("queues", "/", name)["partitions"]]
            for i in range(len(cluster))]


def test_pika_join_across_nodes(cluster):
    _declare(cluster, "pq-c-join", 60_000)
    log = pika_join_scenario(cluster.urls, "pq-c-join", ROUNDS)
    check_acks_in_key_order(log, ROUNDS)
    changes = check_graceful_handoffs(log)
    assert changes and {new for _, _, new, _ in changes} == {"C"}


def test_aio_pika_join_across_nodes(cluster):
    _declare(cluster, "pq-c-join-aio", 60_000)
    log = asyncio.run(aio_join_scenario(cluster.urls, "pq-c-join-aio", ROUNDS))
    check_acks_in_key_order(log, ROUNDS)
    changes = check_graceful_handoffs(log)
    assert changes and {new for _, _, new, _ in changes} == {"C"}


def test_pika_stalled_owner_on_another_node(cluster):
    _declare(cluster, "pq-c-stall", 1500)
    log, a = stalled_owner_scenario([cluster.urls[0], cluster.urls[2]], "pq-c-stall")
    check_stalled(log, a, timeout_s=1.5)
    counts = cluster.api(1).get("queues", "/", "pq-c-stall")["partition_handoffs"]
    assert counts["forced"] >= 1


def test_aio_pika_stalled_owner_on_another_node(cluster):
    _declare(cluster, "pq-c-stall-aio", 1500)
    log, a = asyncio.run(aio_stalled_owner_scenario([cluster.urls[1], cluster.urls[2]],
                                                    "pq-c-stall-aio"))
    check_stalled(log, a, timeout_s=1.5)
    counts = cluster.api(0).get("queues", "/", "pq-c-stall-aio")["partition_handoffs"]
    assert counts["forced"] >= 1


def test_every_node_shows_the_same_partition_map(cluster):
    _declare(cluster, "pq-c-map", 1000)
    conns = [pika.BlockingConnection(pika.URLParameters(u)) for u in cluster.urls]
    try:
        for i, conn in enumerate(conns):
            conn.channel().basic_consume("pq-c-map", lambda *a: None, consumer_tag=f"tag-{i}")

        def agreed():
            for conn in conns:
                conn.process_data_events(0)
            maps = _partition_maps(cluster, "pq-c-map")
            owners = {o for _, o, _ in maps[0]}
            return (all(m == maps[0] for m in maps) and owners == {"tag-0", "tag-1", "tag-2"}
                    and all(s == "active" for s, _, _ in maps[0]))

        assert probes.wait_until(agreed, 30)
        nodes = {tag: node for _, tag, node in _partition_maps(cluster, "pq-c-map")[0]}
        assert nodes == {f"tag-{i}": cluster.names[i] for i in range(3)}
    finally:
        for conn in conns:
            conn.close()


def test_leader_killed_mid_handoff(make_cluster):
    """The queue's leader is killed (-9) while a partition waits for its stalled owner: the
    new leader forces the handoff at the deadline kept in the replicated state, the newcomer
    gets the stalled owner's messages of it (redelivered, in order) and nothing is lost or
    given to two consumers."""
    pc = make_cluster(3, proxied=False)
    cluster = pc.cluster
    name = "pq-c-kill"
    deadline = time.monotonic() + 30
    while True:   # the cluster's metadata group may still be electing its first leader
        try:
            _declare(cluster, name, 3000)
            break
        except pika.exceptions.AMQPError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    assert probes.wait_until(lambda: probes.leader_index(cluster, name) == 0, 30)
    log = Log()
    pub = PikaPublisher(cluster.urls[1], name)
    a = PikaConsumer("A", cluster.urls[1], name, log, prefetch=1000, acks_per_turn=0)
    consumers = [a]
    try:
        for seq in range(3):
            pub.round(seq)
        assert spin(consumers, lambda: len(a.pending) == 3 * len(KEYS), 30)
        b = PikaConsumer("B", cluster.urls[2], name, log, prefetch=1000)
        consumers.append(b)

        def handing_off():
            parts = cluster.api(1).get("queues", "/", name)["partitions"]
            return any(p["state"] == "handing-off" for p in parts)

        assert spin(consumers, handing_off, 30)   # mid-handoff: A holds, B waits
        cluster.kill(0)
        assert spin(consumers, lambda: len(log.deliveries("B")) > 0, 60)
        for seq in range(3, 6):
            pub.round(seq)
        moved = {e[2] for e in log.deliveries("B")}
        assert spin(consumers, lambda: sum(1 for e in log.events if e[0] == "ack"
                                           and e[1] == "B") >= 6 * len(moved), 60)
        check_stalled(log, a)
        counts = cluster.api(2).get("queues", "/", name)["partition_handoffs"]
        assert counts["forced"] >= 1
    finally:
        for x in (*consumers, pub):
            x.close()
