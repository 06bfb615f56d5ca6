"""A `LocalCluster` of 3 forms, /api/nodes shows every node and who is running, a killed node is
seen down by the others and a restarted one rejoins; amqp-brokerctl cluster_status prints the
same picture; the membership verbs refuse."""

from __future__ import annotations

import io
import json

import pika
import pytest

from amqp_broker.cli import ctl
from amqp_broker.mgmt.client import ApiError
from compat_tests.support.cluster import LocalCluster
from compat_tests.support.launcher import free_port

from .conftest import wait_until
from .proxy import Proxy

NAMES = ["rabbit1@localhost", "rabbit2@localhost", "rabbit3@localhost"]


def _running(cluster, i: int) -> dict[str, bool]:
    with cluster.api(i) as api:
        return {row["name"]: row["running"] for row in api.get("nodes")}


def test_three_nodes_form_and_every_node_lists_every_node_running(cluster):
    assert cluster.names == NAMES and cluster.is_formed()
    for i in range(3):
        assert _running(cluster, i) == dict.fromkeys(NAMES, True)
        with cluster.api(i) as api:
            rows = api.get("nodes")
            me = api.get("nodes", NAMES[i])
            peer = api.get("nodes", NAMES[(i + 1) % 3])
        assert [r["name"] for r in rows] == NAMES
        assert me["os_pid"] == str(cluster.node(i).pid)  # the full row for the node itself
        # (with the peer's own figures too once it has reported them: every two seconds)
        assert {k: peer[k] for k in ("name", "type", "running")} == {
            "name": NAMES[(i + 1) % 3], "type": "disc", "running": True}


def test_metadata_declared_on_one_node_is_seen_on_another(cluster):
    """The nodes really are one cluster, not three that answer /api/nodes."""
    conn = pika.BlockingConnection(pika.URLParameters(cluster.urls[0]))
    try:
        conn.channel().queue_declare("cluster-q", durable=True,
                                     arguments={"x-queue-type": "quorum"})
    finally:
        conn.close()
    with cluster.api(2) as api:
        q = wait_until(lambda: _get_or_none(api, "queues", "/", "cluster-q"),
                       what="the queue on node 3")
    assert q["type"] == "quorum" and sorted(q["members"]) == NAMES


def _get_or_none(api, *segs):
    try:
        return api.get(*segs)
    except ApiError as e:
        assert e.status == 404
        return None


def test_cluster_status_lists_disk_and_running_nodes(cluster):
    out = io.StringIO()
    assert ctl.main(["--url", cluster.mgmt_urls[1], "cluster_status"], out=out) == 0
    text = out.getvalue()
    assert text.startswith(f"Cluster status of node {NAMES[1]} ...\nBasics\n")
    disk = text.split("Disk Nodes\n\n")[1].split("\n\n")[0].splitlines()
    running = text.split("Running Nodes\n\n")[1].split("\n\n")[0].splitlines()
    assert disk == NAMES and running == NAMES
    out = io.StringIO()
    assert ctl.main(["--url", cluster.mgmt_urls[1], "--formatter", "json", "cluster_status"],
                    out=out) == 0
    doc = json.loads(out.getvalue())
    assert doc["disk_nodes"] == NAMES and doc["running_nodes"] == NAMES
    assert doc["ram_nodes"] == [] and doc["partitions"] == {}


def test_killed_node_is_seen_down_by_the_others_and_rejoins_on_restart(cluster):
    cluster.kill(2)
    try:
        for i in (0, 1):
            wait_until(lambda: _running(cluster, i) == {NAMES[0]: True, NAMES[1]: True,
                                                        NAMES[2]: False},
                       what=f"node {i} to see {NAMES[2]} down")
        out = io.StringIO()
        assert ctl.main(["--url", cluster.mgmt_urls[0], "--formatter", "json",
                         "cluster_status"], out=out) == 0
        doc = json.loads(out.getvalue())
        assert doc["disk_nodes"] == NAMES and doc["running_nodes"] == NAMES[:2]
        with cluster.api(0) as api:
            assert api.get("healthchecks", "node", NAMES[2])["status"] == "failed"
            assert api.get("healthchecks", "node", NAMES[1]) == {"status": "ok"}
        assert not cluster.is_formed() and cluster.node(2).pid is None
    finally:
        cluster.restart(2)  # waits until formed again: the other tests keep a whole cluster
    assert _running(cluster, 0) == dict.fromkeys(NAMES, True)


@pytest.mark.parametrize("argv", [["join_cluster", "rabbit9@localhost"], ["stop_app"],
                                  ["forget_cluster_node", "rabbit3@localhost"], ["reset"]])
def test_control_verbs_on_a_node_that_is_not_running_say_so(argv, capsys):
    # nothing listens on this port: rabbitmqctl's exit code 69 and its advice
    code = ctl.main(["--url", f"http://127.0.0.1:{free_port()}", *argv])
    err = capsys.readouterr().err
    assert code == 69
    assert err.startswith("Error: unable to perform an operation on node") and \
        "Is the node running" in err


# -- a link through a proxy the test controls ---------------------------------------------------

def test_dial_override_routes_one_link_through_a_proxy(tmp_path):
    port = free_port()
    c = LocalCluster(tmp_path, 2, dial_overrides={(0, 1): ("127.0.0.1", port)})
    with Proxy() as proxy:
        proxy.add_link("1-2", ("127.0.0.1", c.node(1).dist_port), port)
        with c:
            assert f"rabbit2@localhost:{port}" in c.node(0).log_path.with_name(
                "broker.conf").read_text()
            assert proxy.stats("1-2").accepted >= 1  # the pair's link runs through the proxy
            proxy.cut("1-2")
            wait_until(lambda: _running(c, 0)["rabbit2@localhost"] is False,
                       what="node 1 to see node 2 down once its link is cut")
    with pytest.raises(ValueError, match="the smaller name dials"):
        LocalCluster(tmp_path, 2, dial_overrides={(1, 0): ("127.0.0.1", port)})


def test_every_node_row_shows_the_peers_memory_disk_and_uptime(cluster):
    """/api/nodes on one node lists the others with what they report of themselves (every
    two seconds over the cluster's links), as RabbitMQ's management API does."""
    def peers_known() -> list[dict] | None:
        with cluster.api(0) as api:
            rows = [r for r in api.get("nodes") if r["name"] != NAMES[0]]
        return rows if all("mem_used" in r for r in rows) else None

    rows = wait_until(peers_known, 15, "the peers' own figures on node 1")
    assert [r["name"] for r in rows] == NAMES[1:]
    for row in rows:
        assert row["running"] and row["uptime"] > 0 and row["mem_used"] > 0
        assert row["disk_free"] > 0 and row["mem_limit"] > 0 and int(row["os_pid"]) > 0
        assert row["os_pid"] == str(cluster.node(NAMES.index(row["name"])).pid)
