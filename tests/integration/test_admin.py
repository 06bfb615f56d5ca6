"""The in-process admin API (broker.admin): users, vhost access, policies, persistence."""

from __future__ import annotations

import pytest

import pika

from amqp_broker.core.errors import NotAllowed
from amqp_broker.mgmt import Admin as ManagementAdmin
from amqp_broker.queues import Message
from amqp_broker.server import Broker
from amqp_broker.server.persistence import Store
from amqp_broker.settings import Settings
from amqp_broker.mgmt.client import ApiClient
from compat_tests.support.launcher import Broker as NodeProcess


def _broker(tmp_path) -> Broker:
    store = Store(tmp_path)
    store.open()
    return Broker(Settings(data_dir=tmp_path), store)


def test_default_user_can_log_in_from_loopback_only(tmp_path):
    b = _broker(tmp_path)
    assert b.authenticate("guest", "guest", ("127.0.0.1", 5000))
    assert not b.authenticate("guest", "guest", ("10.1.2.3", 5000))
    assert not b.authenticate("guest", "wrong", ("127.0.0.1", 5000))


def _login(node: NodeProcess, user: str, password: str, vhost: str) -> None:
    port = pika.URLParameters(node.url).port  # a restart may take another port
    params = pika.ConnectionParameters("127.0.0.1", port, vhost,
                                       pika.PlainCredentials(user, password))
    pika.BlockingConnection(params).close()


def test_users_permissions_and_vhosts_survive_restart(tmp_path):
    """Made through the management API, kept in the metadata group's log, there after a restart."""
    with NodeProcess(tmp_path / "node") as node:
        api = ApiClient(node.mgmt_url)
        api.put("vhosts", "v2")
        api.put("users", "alice", json={"password": "s3cret", "tags": "management"})
        api.put("permissions", "v2", "alice", json={"configure": ".*", "write": ".*", "read": ".*"})
        # a RabbitMQ 3.10 hash of "guest" (definitions export): a user with only a hash
        api.put("users", "hashed", json={
            "password_hash": "J/ly2BBEdM+yuF3V9yLDmaAnJ0loE/Nr7zDugSrrCp7QhEn5",
            "hashing_algorithm": "rabbit_password_hashing_sha256", "tags": "management"})
        api.put("permissions", "/", "hashed", json={"configure": ".*", "write": ".*",
                                                    "read": ".*"})
        node.restart()
        _login(node, "alice", "s3cret", "v2")
        _login(node, "hashed", "guest", "/")
        with pytest.raises(pika.exceptions.ProbableAccessDeniedError):
            _login(node, "alice", "s3cret", "/")
        with pytest.raises(pika.exceptions.ProbableAuthenticationError):
            _login(node, "hashed", "wrong", "/")



def test_operator_policies_survive_restart_and_apply_to_queues(tmp_path):
    """Set through /api/operator-policies, kept in the metadata group's log as their own kind
    (not mixed with policies), applied again after a restart."""
    import httpx

    with NodeProcess(tmp_path / "node") as node:
        api = httpx.Client(base_url=node.mgmt_url + "/api", auth=("guest", "guest"), timeout=30)
        assert api.put("/operator-policies/%2F/cap", json={
            "pattern": "^capped", "definition": {"max-length": 2}, "apply-to": "queues"}
        ).status_code == 201
        api.put("/queues/%2F/capped.q", json={"durable": True})
        node.restart()
        api = httpx.Client(base_url=node.mgmt_url + "/api", auth=("guest", "guest"), timeout=30)
        assert [p["name"] for p in api.get("/operator-policies").json()] == ["cap"]
        assert api.get("/policies").json() == []
        q = api.get("/queues/%2F/capped.q").json()
        assert q["operator_policy"] == "cap" and q["effective_policy_definition"] == {"max-length": 2}
        for i in range(4):
            api.post("/exchanges/%2F/amq.default/publish", json={
                "routing_key": "capped.q", "payload": str(i), "payload_encoding": "string",
                "properties": {}})
        assert api.get("/queues/%2F/capped.q").json()["messages"] == 2
        assert api.delete("/operator-policies/%2F/cap").status_code == 204
        node.restart()
        api = httpx.Client(base_url=node.mgmt_url + "/api", auth=("guest", "guest"), timeout=30)
        assert api.get("/operator-policies").json() == []
        assert api.get("/queues/%2F/capped.q").json()["operator_policy"] is None

def test_policy_applies_max_length_to_matching_queues(tmp_path):
    b = _broker(tmp_path)
    vhost = b.vhosts["/"]
    rt = vhost.declare_queue(None, "pol.q", passive=False, durable=False, exclusive=False,
                             auto_delete=False, arguments={})
    b.admin.set_policy("/", "cap", "^pol\\.", {"max-length": 2}, apply_to="queues")
    for i in range(5):
        rt.publish(Message.from_publish("", "pol.q", b"\x00\x00", str(i).encode()), 0, None)
    row = ManagementAdmin(b).get_queue("/", "pol.q")
    assert (row["messages_ready"], row["policy"]) == (2, "cap")
    b.admin.clear_policy("/", "cap")
    assert b.admin.list_policies() == []
