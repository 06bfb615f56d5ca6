"""Cluster membership changed at run time with `amqp-brokerctl`, as with rabbitmqctl: a lone node
joins another (stop_app, join_cluster, start_app) and serves its quorum queue from its own
replica; a node is reset (its cluster forgets it and shrinks the queues it was a member of),
comes back alone, and joins again; forget_cluster_node refuses what rabbitmqctl refuses.
Real `amqp-broker` processes, the CLI as a subprocess, pika as the client."""

from __future__ import annotations

import subprocess
import sys

import pika
import pytest

from compat_tests.support.launcher import Broker, free_ports
from compat_tests.support.cluster import LocalCluster

from .conftest import wait_until

COOKIE = "MEMBERSHIPTESTCOOKIE"


def ctl(mgmt_url: str, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "amqp_broker.cli.ctl", "--url", mgmt_url,
                           *argv], capture_output=True, text=True, timeout=90)


def running_nodes(mgmt_url: str) -> list[str]:
    import httpx
    try:
        rows = httpx.get(f"{mgmt_url}/api/nodes", auth=("guest", "guest"), timeout=5).json()
    except (httpx.HTTPError, ValueError):
        return []
    return sorted(r["name"] for r in rows if isinstance(r, dict) and r.get("running"))


def all_nodes(mgmt_url: str) -> list[str]:
    import httpx
    rows = httpx.get(f"{mgmt_url}/api/nodes", auth=("guest", "guest"), timeout=5).json()
    return sorted(r["name"] for r in rows)


def queue_row(mgmt_url: str, name: str) -> dict:
    import httpx
    r = httpx.get(f"{mgmt_url}/api/queues/%2F/{name}", auth=("guest", "guest"), timeout=5)
    return r.json() if r.status_code == 200 else {}


def queues_cli(mgmt_url: str, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "amqp_broker.cli.queues_cli", "--url",
                           mgmt_url, *argv], capture_output=True, text=True, timeout=90)


def members(mgmt_url: str, name: str) -> list[str]:
    return sorted(queue_row(mgmt_url, name).get("members") or [])


def in_sync(mgmt_url: str, name: str) -> dict[str, bool]:
    """Every replica's In Sync as the leader's quorum_status shows it ({} if `mgmt_url` is
    not the leader's node)."""
    raft = queue_row(mgmt_url, name).get("raft") or {}
    if raft.get("state") != "leader":
        return {}
    return {n: r["match_index"] >= raft["commit_index"]
            for n, r in (raft.get("replicas") or {}).items()}


def publish(url: str, queue: str, bodies: list[bytes], arguments: dict | None = None) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    try:
        ch = conn.channel()
        ch.queue_declare(queue, durable=True, arguments=arguments)
        ch.confirm_delivery()
        for body in bodies:
            ch.basic_publish("", queue, body, pika.BasicProperties(delivery_mode=2))
    finally:
        conn.close()


def consume(url: str, queue: str, n: int) -> list[bytes]:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    got: list[bytes] = []
    try:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=100)
        for method, _, body in ch.consume(queue, inactivity_timeout=15):
            if body is None:
                break
            got.append(body)
            ch.basic_ack(method.delivery_tag)
            if len(got) == n:
                break
        ch.cancel()
    finally:
        conn.close()
    return got


def lone_node(tmp_path, name: str, dist_port: int) -> Broker:
    return Broker(tmp_path / name, args=("--node-name", f"{name}@localhost"),
                  env={"RABBITMQ_ERLANG_COOKIE": COOKIE},
                  config=f"distribution.listener.port_range.min = {dist_port}\n")


def test_a_lone_node_joins_another_and_serves_its_quorum_queue(tmp_path):
    dist_a, dist_b = free_ports(2)
    a, b = lone_node(tmp_path, "a", dist_a), lone_node(tmp_path, "b", dist_b)
    try:
        a.start()
        b.start()
        bodies = [b"m%d" % i for i in range(200)]
        publish(a.url, "qj", bodies, {"x-queue-type": "quorum"})

        stopped = ctl(b.mgmt_url, "stop_app")
        assert stopped.returncode == 0, stopped.stderr
        assert stopped.stdout.startswith("Stopping rabbit application on node b@localhost")
        with pytest.raises(pika.exceptions.AMQPConnectionError):
            pika.BlockingConnection(pika.URLParameters(b.url))
        listing = ctl(b.mgmt_url, "list_queues")
        assert listing.returncode == 64 and "start_app" in listing.stderr

        joined = ctl(b.mgmt_url, "join_cluster", f"a@localhost:{dist_a}")
        assert joined.returncode == 0, joined.stderr
        assert "Clustering node b@localhost with a@localhost" in joined.stdout
        started = ctl(b.mgmt_url, "start_app")
        assert started.returncode == 0, started.stderr
        both = ["a@localhost", "b@localhost"]
        for url in (a.mgmt_url, b.mgmt_url):
            wait_until(lambda: running_nodes(url) == both, 30, f"both nodes running at {url}")
        status = ctl(a.mgmt_url, "cluster_status")
        assert "b@localhost" in status.stdout.split("Running Nodes", 1)[1]

        # the queue declared on the lone node is the cluster's: node b serves it from its replica
        wait_until(lambda: queue_row(b.mgmt_url, "qj").get("messages") == 200, 30,
                   "node b's replica of qj holds the 200 messages")
        assert consume(b.url, "qj", 200) == bodies
        # the node added later becomes a member of the queue with grow, and catches up
        grown = queues_cli(a.mgmt_url, "grow", "b@localhost", "all")
        assert grown.returncode == 0 and "qj" in grown.stdout, grown.stderr
        wait_until(lambda: members(a.mgmt_url, "qj") == both, 20, "b a member of qj")
        def synced() -> bool:  # as the leader (on a or b) sees every replica
            return any(st and all(st.get(n) for n in both)
                       for st in (in_sync(a.mgmt_url, "qj"), in_sync(b.mgmt_url, "qj")))
        wait_until(synced, 20, "both members of qj in sync")
        # a queue declared now gets members on both nodes
        publish(b.url, "qj2", [b"x"], {"x-queue-type": "quorum",
                                      "x-quorum-initial-group-size": 2})
        assert sorted(queue_row(a.mgmt_url, "qj2")["members"]) == both
    finally:
        for broker in (a, b):
            broker.stop()


def test_reset_leaves_the_cluster_and_join_cluster_brings_the_node_back(tmp_path):
    with LocalCluster(tmp_path / "c", 3) as cluster:
        urls, mgmt = cluster.urls, cluster.mgmt_urls
        names = cluster.names
        bodies = [b"r%d" % i for i in range(100)]
        publish(urls[0], "qr", bodies, {"x-queue-type": "quorum"})
        assert sorted(queue_row(mgmt[0], "qr")["members"]) == names

        # forget_cluster_node refuses a running node and one that is not a member
        busy = ctl(mgmt[0], "forget_cluster_node", names[1])
        assert busy.returncode == 69 and "failed_to_remove_node" in busy.stderr
        assert busy.stdout.startswith(f"Removing node {names[1]} from the cluster")
        stranger = ctl(mgmt[0], "forget_cluster_node", "nobody@localhost")
        assert stranger.returncode == 69 and "not_a_cluster_node" in stranger.stderr

        refused = ctl(mgmt[2], "reset")  # the application still runs
        assert refused.returncode == 64 and "stop_app" in refused.stderr
        assert ctl(mgmt[2], "stop_app").returncode == 0
        wait_until(lambda: running_nodes(mgmt[0]) == names[:2], 15, "node 3 seen stopped")
        reset = ctl(mgmt[2], "reset")
        assert reset.returncode == 0, reset.stderr
        assert reset.stdout.startswith(f"Resetting node {names[2]}")
        # the cluster forgot it, and the queue it was a member of shrank
        wait_until(lambda: all_nodes(mgmt[0]) == names[:2], 15, "node 3 forgotten")
        wait_until(lambda: sorted(queue_row(mgmt[0], "qr").get("members", [])) == names[:2],
                   15, "qr shrunk to nodes 1 and 2")

        assert ctl(mgmt[2], "start_app").returncode == 0
        assert running_nodes(mgmt[2]) == [names[2]]  # alone, with nothing of the cluster's
        assert queue_row(mgmt[2], "qr") == {}

        assert ctl(mgmt[2], "stop_app").returncode == 0
        joined = ctl(mgmt[2], "join_cluster", names[0])  # its address from classic_config
        assert joined.returncode == 0, joined.stderr
        assert ctl(mgmt[2], "start_app").returncode == 0
        for url in mgmt:
            wait_until(lambda: running_nodes(url) == names, 30, f"3 nodes running at {url}")
        wait_until(lambda: queue_row(mgmt[2], "qr").get("messages") == 100, 30,
                   "node 3's new replica of qr holds the 100 messages")
        # the node that joined later becomes a member again through grow, and is in sync
        grown = queues_cli(mgmt[0], "grow", names[2], "all")
        assert grown.returncode == 0, grown.stderr
        wait_until(lambda: members(mgmt[0], "qr") == names, 30, "qr grown onto node 3")
        wait_until(lambda: any(in_sync(url, "qr").get(names[2]) for url in mgmt), 30,
                   "node 3's member of qr in sync (the leader's quorum_status)")
        assert consume(urls[2], "qr", 100) == bodies
        publish(urls[1], "qr", [b"after"], {"x-queue-type": "quorum"})
        assert consume(urls[0], "qr", 1) == [b"after"]
