"""Quorum queue members that operators control, as with rabbitmq-queues: add_member (the new
member catches up, then votes: it serves the queue after the only old member is killed),
delete_member (it keeps a learner's copy; the last member is refused), grow / shrink with
RabbitMQ's result table, rebalance spreading leaders, and check_if_node_is_quorum_critical.
Real `amqp-broker` processes, the CLI as a subprocess, pika as the client."""

from __future__ import annotations

import httpx

from compat_tests.support.cluster import LocalCluster

from .conftest import wait_until
from .test_membership import consume, queues_cli, in_sync, members, publish, queue_row


def leaders(mgmt_url: str) -> dict[str, int]:
    rows = httpx.get(f"{mgmt_url}/api/queues", auth=("guest", "guest"), timeout=5).json()
    out: dict[str, int] = {}
    for r in rows:
        if r.get("type") == "quorum" and r["name"].startswith("rb."):
            out[r.get("leader")] = out.get(r.get("leader"), 0) + 1
    return out


def test_add_and_delete_members_grow_shrink_rebalance_and_the_critical_check(tmp_path):
    with LocalCluster(tmp_path / "c", 3) as cluster:
        urls, mgmt, names = cluster.urls, cluster.mgmt_urls, cluster.names
        bodies = [b"m%d" % i for i in range(50)]
        publish(urls[0], "qm", bodies, {"x-queue-type": "quorum",
                                        "x-quorum-initial-group-size": 1})
        assert members(mgmt[0], "qm") == names[:1]

        for node in names[1:]:
            added = queues_cli(mgmt[1], "add_member", "qm", node)
            assert added.returncode == 0, added.stderr
            assert added.stdout.startswith(f"Adding a replica for queue qm on node {node}")
        wait_until(lambda: members(mgmt[0], "qm") == names, 20, "qm has 3 voters")
        wait_until(lambda: all(in_sync(mgmt[0], "qm").get(n) for n in names[1:]), 20,
                   "the new members in sync")
        ok = queues_cli(mgmt[0], "check_if_node_is_quorum_critical")
        assert ok.returncode == 0 and "no quorum queues with minimum quorum" in ok.stdout

        # the only founding member dies: the queue is served by the members added later
        cluster.kill(0)
        assert consume(urls[1], "qm", 50) == bodies
        cluster.restart(0)

        deleted = queues_cli(mgmt[1], "delete_member", "qm", names[0])
        assert deleted.returncode == 0, deleted.stderr
        wait_until(lambda: members(mgmt[1], "qm") == names[1:], 20, "rabbit1 no longer votes")
        status = queues_cli(mgmt[1], "quorum_status", "qm", "--formatter", "json")
        assert status.returncode == 0, status.stderr

        publish(urls[0], "q1", [b"x"], {"x-queue-type": "quorum",
                                        "x-quorum-initial-group-size": 1})
        last = queues_cli(mgmt[0], "delete_member", "q1", names[0])
        assert last.returncode != 0 and "last_node" in last.stderr
        stranger = queues_cli(mgmt[0], "add_member", "q1", "nobody@localhost")
        assert stranger.returncode != 0 and "node_not_running" in stranger.stderr

        # qm's voters are rabbit2 and rabbit3: with rabbit3 down, rabbit2 is critical
        cluster.kill(2)
        wait_until(lambda: queues_cli(mgmt[1], "check_if_node_is_quorum_critical").returncode
                   == 69, 20, "rabbit2 reported quorum-critical")
        cluster.restart(2)

        shrunk = queues_cli(mgmt[0], "shrink", names[2])
        assert shrunk.returncode == 0, shrunk.stderr
        assert "qm" in shrunk.stdout and "ok" in shrunk.stdout
        wait_until(lambda: members(mgmt[0], "qm") == names[1:2], 20, "qm shrunk to rabbit2")
        grown = queues_cli(mgmt[0], "grow", names[2], "all", "--queue-pattern", "^qm$")
        assert grown.returncode == 0, grown.stderr
        wait_until(lambda: members(mgmt[0], "qm") == names[1:], 20, "qm grown to rabbit3")

        for i in range(6):  # client-local: rabbit1 leads all six
            publish(urls[0], f"rb.{i}", [], {"x-queue-type": "quorum"})
        wait_until(lambda: leaders(mgmt[0]) == {names[0]: 6}, 20, "rabbit1 leads rb.*")
        rebalanced = queues_cli(mgmt[0], "rebalance", "quorum", "--queue-pattern", "^rb\\.")
        assert rebalanced.returncode == 0, rebalanced.stderr
        assert "Re-balancing leaders of quorum queues" in rebalanced.stdout
        wait_until(lambda: leaders(mgmt[0]) == dict.fromkeys(names, 2), 20,
                   "two leaders on each node")
