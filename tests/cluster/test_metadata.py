"""The cluster's metadata (exchanges, queues, bindings, users, vhosts, permissions, policies) is
one Raft group of every node: a change made through any node is seen by all of them, answers
-ok once committed, survives a node's restart, and is refused on a minority side."""

from __future__ import annotations

import time

import pika
import pytest

from amqp_broker.mgmt.client import ApiError

from . import probes
from .conftest import wait_until


def _exchange(cluster, i: int, name: str) -> dict | None:
    try:
        return cluster.api(i).get("exchanges", "/", name)
    except ApiError as err:
        assert err.status == 404
        return None


def _conn(url: str, **kw) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.URLParameters(url + "?heartbeat=0"), **kw)


def _exists(url: str, name: str) -> bool:
    return probes.declared(url, name)


def test_topology_declared_on_one_node_routes_on_every_node(cluster):
    a = _conn(cluster.urls[0])
    ch = a.channel()
    ch.exchange_declare("md.x", "topic", durable=True)
    ch.queue_declare("md.q", durable=True, arguments={"x-queue-type": "quorum"})
    ch.queue_bind("md.q", "md.x", "a.*")
    a.close()
    for url in cluster.urls[1:]:
        wait_until(lambda: _exists(url, "md.q"), what=f"md.q on {url}")
    # a message routed by node 3's own copy of the exchange and binding
    c = _conn(cluster.urls[2])
    ch = c.channel()
    ch.confirm_delivery()
    wait_until(lambda: _publish_routed(ch, "md.x", "a.b"), what="the binding on node 3")
    got = None
    deadline = time.monotonic() + 10
    while got is None and time.monotonic() < deadline:
        method, _, body = ch.basic_get("md.q", auto_ack=True)
        got = body if method else None
    assert got == b"routed"
    ch.queue_delete("md.q")
    ch.exchange_delete("md.x")
    c.close()
    for url in cluster.urls:
        wait_until(lambda: not _exists(url, "md.q"), what=f"md.q deleted on {url}")


def _publish_routed(ch, exchange: str, key: str) -> bool:
    """A mandatory publish: True once the node routed it (no basic.return)."""
    try:
        ch.basic_publish(exchange, key, b"routed", mandatory=True)
        return True
    except pika.exceptions.UnroutableError:
        return False


def test_a_user_made_on_one_node_logs_in_on_another_and_a_policy_applies_there(cluster):
    api = cluster.api(0)
    api.put("users", "md-alice", json={"password": "pw", "tags": ""})
    api.put("permissions", "/", "md-alice",
            json={"configure": ".*", "write": ".*", "read": ".*"})
    api.put("policies", "/", "md-limit", json={"pattern": "^md\\.limited$", "apply-to": "queues",
                                              "definition": {"max-length": 1}})
    creds = pika.PlainCredentials("md-alice", "pw")

    def login() -> bool:
        try:
            conn = pika.BlockingConnection(pika.URLParameters(
                cluster.urls[2].replace("guest:guest", "md-alice:pw")))
        except pika.exceptions.ProbableAuthenticationError:
            return False
        conn.close()
        return True

    assert creds.username == "md-alice"
    wait_until(login, what="md-alice able to log in on node 3")
    # the policy, set through node 1, caps a classic queue declared on node 2
    conn = _conn(cluster.urls[1])
    ch = conn.channel()
    ch.confirm_delivery()
    wait_until(lambda: any(p["name"] == "md-limit" for p in cluster.api(1).get("policies")),
               what="the policy on node 2")
    ch.queue_declare("md.limited", durable=True)
    for i in range(3):
        ch.basic_publish("", "md.limited", b"%d" % i)
    assert ch.queue_declare("md.limited", passive=True).method.message_count == 1
    ch.queue_delete("md.limited")
    conn.close()
    api.delete("policies", "/", "md-limit")
    api.delete("users", "md-alice")


def test_vhost_limits_set_on_one_node_apply_on_another(cluster):
    api = cluster.api(0)
    api.put("vhosts", "md-lim")
    api.put("permissions", "md-lim", "guest", json={"configure": ".*", "write": ".*", "read": ".*"})
    api.put("vhost-limits", "md-lim", "max-queues", json={"value": 0})
    wait_until(lambda: cluster.api(2).get("vhost-limits", "md-lim") ==
               [{"vhost": "md-lim", "value": {"max-queues": 0}}], what="the limit on node 3")
    conn = _conn(cluster.urls[2].rsplit("/", 1)[0] + "/md-lim")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        conn.channel().queue_declare("md.none")
    assert info.value.reply_code == 406 and "queue limit in vhost 'md-lim' (0)" in \
        info.value.reply_text
    conn.close()
    api.delete("vhosts", "md-lim")
    wait_until(lambda: cluster.api(2).get("vhost-limits") == [], what="the limit gone on node 3")


def test_metadata_survives_a_node_restart(cluster):
    a = _conn(cluster.urls[0])
    a.channel().exchange_declare("md.kept", "fanout", durable=True)
    a.close()
    wait_until(lambda: _exchange(cluster, 2, "md.kept"), what="md.kept on node 3")
    cluster.kill(2)
    cluster.restart(2)
    assert _exchange(cluster, 2, "md.kept")["type"] == "fanout"
    c = _conn(cluster.urls[2])
    c.channel().exchange_delete("md.kept")
    c.close()


@pytest.mark.timeout(120)
def test_a_minority_side_refuses_metadata_changes(cluster):
    """Nodes 2 and 3 stopped (SIGSTOP): node 1 alone cannot commit a declaration, and says so
    (541) instead of answering declare-ok. Once they are back every node agrees on whether it
    happened (a proposal that timed out may still commit, as with any Raft log), and new
    changes commit."""
    conn = _conn(cluster.urls[0])
    cluster.pause(1)
    cluster.pause(2)
    try:
        ch = conn.channel()
        started = time.monotonic()
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as err:
            ch.exchange_declare("md.minority", "direct", durable=True)
        assert err.value.reply_code == 541
        assert "majority" in err.value.reply_text
        assert time.monotonic() - started >= 5  # it waited for a commit, then gave up
    finally:
        cluster.resume(1)
        cluster.resume(2)
    conn = _conn(cluster.urls[0])
    ch = conn.channel()
    wait_until(lambda: cluster.is_formed(), what="the cluster back")
    ch.exchange_declare("md.majority", "direct", durable=True)
    for i in (1, 2):
        wait_until(lambda: _exchange(cluster, i, "md.majority"), what=f"md.majority on {i}")
    seen = {_exchange(cluster, i, "md.minority") is not None for i in range(3)}
    assert len(seen) == 1, "the nodes disagree about the timed-out declaration"
    ch.exchange_delete("md.majority")
    ch.exchange_delete("md.minority")
    conn.close()
