"""Overview, nodes, vhosts, users, permissions, policies, definitions and health checks through
the management API, with RabbitMQ's status codes (201 created, 204 updated/deleted, 404)."""

from __future__ import annotations

import time

import httpx

from compat_tests.support.launcher import Broker


def test_overview_and_nodes(api, node):
    ov = api.get("/overview").json()
    for key in ("management_version", "rabbitmq_version", "product_name", "cluster_name", "node",
                "exchange_types", "queue_totals", "object_totals", "listeners"):
        assert key in ov
    assert {"connections", "channels", "consumers", "exchanges", "queues"} <= set(ov["object_totals"])
    protocols = {ln["protocol"] for ln in ov["listeners"]}
    assert {"amqp", "http", "http/prometheus"} <= protocols
    nodes = api.get("/nodes").json()
    assert nodes[0]["name"] == ov["node"] and nodes[0]["running"] is True
    assert api.get(f"/nodes/{ov['node']}").json()["name"] == ov["node"]
    assert api.get("/nodes/nosuch@host").status_code == 404


def test_vhosts(api, name, amqp, node):
    assert api.put(f"/vhosts/{name}", json={"description": "mine", "tags": "a,b"}).status_code == 201
    assert api.put(f"/vhosts/{name}").status_code == 204
    v = api.get(f"/vhosts/{name}").json()
    assert v["name"] == name and v["description"] == "mine" and v["tags"] == ["a", "b"]
    assert name in [x["name"] for x in api.get("/vhosts").json()]
    assert api.get("/vhosts/%2F").json()["name"] == "/"
    # usable over AMQP once permissions are set
    api.put(f"/permissions/{name}/guest", json={"configure": ".*", "write": ".*", "read": ".*"})
    conn = amqp(node.url.rsplit("/", 1)[0] + "/" + name)
    conn.channel().queue_declare("q-in-vhost")
    assert [q["name"] for q in api.get(f"/queues/{name}").json()] == ["q-in-vhost"]
    assert api.delete(f"/vhosts/{name}").status_code == 204
    assert api.delete(f"/vhosts/{name}").status_code == 404
    assert api.get(f"/vhosts/{name}").status_code == 404


def test_users(api, name, node):
    assert api.put(f"/users/{name}", json={"password": "pw", "tags": "administrator"}).status_code == 201
    assert api.put(f"/users/{name}", json={"password": "pw", "tags": "monitoring"}).status_code == 204
    u = api.get(f"/users/{name}").json()
    assert u["name"] == name and u["tags"] == ["monitoring"]
    assert u["hashing_algorithm"] == "rabbit_password_hashing_sha256" and u["password_hash"]
    assert set(u) == {"name", "password_hash", "hashing_algorithm", "tags", "limits"}
    assert name in [x["name"] for x in api.get("/users").json()]
    assert api.get("/whoami").json() == {"name": "guest", "tags": ["administrator"]}
    assert api.delete(f"/users/{name}").status_code == 204
    assert api.delete(f"/users/{name}").status_code == 404
    assert api.get(f"/users/{name}").status_code == 404


def test_user_with_password_hash_logs_in(api, node, name):
    # a RabbitMQ 3.10 hash of "guest"
    h = "J/ly2BBEdM+yuF3V9yLDmaAnJ0loE/Nr7zDugSrrCp7QhEn5"
    api.put(f"/users/{name}", json={"password_hash": h, "tags": "administrator"})
    with httpx.Client(base_url=node.mgmt_url + "/api", auth=(name, "guest")) as c:
        assert c.get("/whoami").json()["name"] == name


def test_permissions(api, name):
    api.put(f"/users/{name}", json={"password": "pw", "tags": ""})
    body = {"configure": "^a", "write": ".*", "read": ""}
    assert api.put(f"/permissions/%2F/{name}", json=body).status_code == 201
    assert api.put(f"/permissions/%2F/{name}", json=body).status_code == 204
    want = {"user": name, "vhost": "/", "configure": "^a", "write": ".*", "read": ""}
    assert api.get(f"/permissions/%2F/{name}").json() == want
    assert want in api.get("/permissions").json()
    assert want in api.get("/vhosts/%2F/permissions").json()
    assert api.get(f"/users/{name}/permissions").json() == [want]
    assert api.put(f"/permissions/%2F/{name}", json={"configure": "("}).status_code == 400
    assert api.put("/permissions/%2F/nosuchuser", json=body).status_code == 400
    assert api.delete(f"/permissions/%2F/{name}").status_code == 204
    assert api.delete(f"/permissions/%2F/{name}").status_code == 404
    assert api.get(f"/permissions/%2F/{name}").status_code == 404


def test_policies_apply_to_existing_queues(api, name):
    api.put(f"/queues/%2F/{name}", json={})
    for i in range(5):
        api.post("/exchanges/%2F/amq.default/publish", json={
            "properties": {}, "routing_key": name, "payload": str(i), "payload_encoding": "string"})
    body = {"pattern": f"^{name}$", "definition": {"max-length": 2}, "priority": 1,
            "apply-to": "queues"}
    assert api.put(f"/policies/%2F/{name}", json=body).status_code == 201
    assert api.put(f"/policies/%2F/{name}", json=body).status_code == 204
    assert api.get(f"/policies/%2F/{name}").json() == {
        "vhost": "/", "name": name, "pattern": f"^{name}$", "apply-to": "queues",
        "definition": {"max-length": 2}, "priority": 1}
    assert any(p["name"] == name for p in api.get("/policies").json())
    assert any(p["name"] == name for p in api.get("/policies/%2F").json())
    q = api.get(f"/queues/%2F/{name}").json()
    assert q["policy"] == name and q["effective_policy_definition"] == {"max-length": 2}
    # the limit applies at once on the next enqueue (drop-head)
    api.post("/exchanges/%2F/amq.default/publish", json={
        "properties": {}, "routing_key": name, "payload": "last", "payload_encoding": "string"})
    got = api.post(f"/queues/%2F/{name}/get", json={"count": 10, "ackmode": "ack_requeue_true",
                                                    "encoding": "auto"}).json()
    assert [m["payload"] for m in got] == ["4", "last"]
    assert api.delete(f"/policies/%2F/{name}").status_code == 204
    assert api.delete(f"/policies/%2F/{name}").status_code == 404
    assert api.get(f"/queues/%2F/{name}").json()["policy"] is None


def test_invalid_policy_is_400(api, name):
    r = api.put(f"/policies/%2F/{name}", json={"pattern": ".*", "definition": {"max-length": "x"}})
    assert r.status_code == 400 and r.json()["error"] == "bad_request"
    r = api.put(f"/policies/%2F/{name}", json={"pattern": ".*"})
    assert r.status_code == 400


def test_definitions_round_trip(api, name):
    api.put(f"/vhosts/{name}")
    api.put(f"/users/{name}", json={"password": "pw", "tags": "management"})
    api.put(f"/permissions/{name}/{name}", json={"configure": ".*", "write": ".*", "read": ".*"})
    api.put(f"/queues/{name}/q1", json={"durable": True, "arguments": {"x-max-length": 3}})
    api.put(f"/exchanges/{name}/x1", json={"type": "fanout"})
    api.post(f"/bindings/{name}/e/x1/q/q1", json={"routing_key": "k"})
    api.put(f"/policies/{name}/p1", json={"pattern": "^q", "definition": {"message-ttl": 1000}})
    defs = api.get("/definitions").json()
    for key in ("rabbit_version", "rabbitmq_version", "product_name", "product_version", "users",
                "vhosts", "permissions", "topic_permissions", "parameters", "global_parameters",
                "policies", "queues", "exchanges", "bindings"):
        assert key in defs
    assert {"name": "q1", "vhost": name, "durable": True, "auto_delete": False,
            "arguments": {"x-max-length": 3}} in defs["queues"]
    assert not any(x["name"].startswith("amq.") or x["name"] == "" for x in defs["exchanges"])
    assert all(b["source"] for b in defs["bindings"])
    api.delete(f"/vhosts/{name}")
    api.delete(f"/users/{name}")
    assert api.get(f"/queues/{name}/q1").status_code == 404
    mine = {k: [d for d in v if isinstance(d, dict) and name in (d.get("vhost"), d.get("name"))]
            for k, v in defs.items() if isinstance(v, list)}
    assert api.post("/definitions", json=mine).status_code == 204
    assert api.get(f"/queues/{name}/q1").json()["arguments"] == {"x-max-length": 3}
    assert api.get(f"/bindings/{name}/e/x1/q/q1").json()[0]["routing_key"] == "k"
    assert api.get(f"/policies/{name}/p1").json()["definition"] == {"message-ttl": 1000}
    assert api.get(f"/permissions/{name}/{name}").status_code == 200
    assert api.get(f"/users/{name}").json()["tags"] == ["management"]
    api.delete(f"/vhosts/{name}")


def test_bad_definitions_are_400(api):
    assert api.post("/definitions", content=b"garbage").status_code == 400
    assert api.post("/definitions", json={"queues": [{"name": "x", "vhost": "nosuch"}]}).status_code == 400


def test_health_checks(api):
    assert api.get("/health/checks/alarms").json() == {"status": "ok"}
    assert api.get("/health/checks/local-alarms").json() == {"status": "ok"}
    assert api.get("/health/checks/virtual-hosts").json() == {"status": "ok"}
    assert api.get("/aliveness-test/%2F").json() == {"status": "ok"}
    assert api.get("/aliveness-test/nosuch").status_code == 404


def test_health_checks_fail_while_a_memory_alarm_is_set(tmp_path):
    """A node whose memory watermark (1 MB) is below its own footprint raises the memory alarm
    within its first sample (once a second); the alarm health checks then answer 503."""
    with Broker(tmp_path, config="vm_memory_high_watermark.absolute = 1MB\n").start() as b, \
            httpx.Client(base_url=b.mgmt_url + "/api", auth=("guest", "guest"), timeout=30) as c:
        deadline = time.monotonic() + 15
        while (r := c.get("/health/checks/alarms")).status_code == 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert r.status_code == 503 and r.json()["status"] == "failed"
        assert "memory" in [a["resource"] for a in r.json()["alarms"]]
        r = c.get("/health/checks/local-alarms")
        assert r.status_code == 503 and r.json()["status"] == "failed"
