"""HTTP basic auth and user tags on the management API, as RabbitMQ's management plugin."""

from __future__ import annotations

import httpx
import pytest


def _client(node, user, password):
    return httpx.Client(base_url=node.mgmt_url + "/api", auth=(user, password), timeout=30)


def test_no_credentials_is_401_with_challenge(anon):
    r = anon.get("/overview")
    assert r.status_code == 401
    assert r.headers["www-authenticate"] == 'Basic realm="RabbitMQ Management"'


def test_wrong_password_is_401(node):
    with _client(node, "guest", "wrong") as c:
        assert c.get("/overview").status_code == 401
        assert c.get("/queues").status_code == 401


def test_unknown_user_is_401(node):
    with _client(node, "nobody", "x") as c:
        assert c.get("/overview").status_code == 401


def test_malformed_authorization_header_is_401(anon):
    r = anon.get("/overview", headers={"Authorization": "Basic !!!notbase64"})
    assert r.status_code == 401


def test_user_without_management_tag_is_refused(api, node, name):
    assert api.put(f"/users/{name}", json={"password": "pw", "tags": ""}).status_code == 201
    with _client(node, name, "pw") as c:
        r = c.get("/overview")
    assert r.status_code == 401
    assert r.json() == {"error": "not_authorised", "reason": "Not management user"}


def test_monitoring_user_reads_but_cannot_administer(api, node, name):
    api.put(f"/users/{name}", json={"password": "pw", "tags": "monitoring"})
    with _client(node, name, "pw") as c:
        assert c.get("/queues").status_code == 200
        assert c.get("/whoami").json() == {"name": name, "tags": ["monitoring"]}
        r = c.put(f"/vhosts/{name}")
        assert r.status_code == 401
        assert r.json()["reason"] == "Not administrator user"
        assert c.get("/users").status_code == 401
        assert c.get("/definitions").status_code == 401


def test_management_user_needs_vhost_permissions(api, node, name):
    api.put(f"/users/{name}", json={"password": "pw", "tags": ["management"]})
    api.put(f"/vhosts/{name}")
    with _client(node, name, "pw") as c:
        assert c.put(f"/queues/{name}/q", json={}).status_code == 401
        api.put(f"/permissions/{name}/{name}", json={"configure": ".*", "write": ".*", "read": ".*"})
        assert c.put(f"/queues/{name}/q", json={}).status_code == 201
    api.delete(f"/vhosts/{name}")


@pytest.mark.parametrize("path", ["/queues", "/exchanges", "/bindings", "/connections",
                                  "/channels", "/consumers", "/policies", "/vhosts", "/nodes",
                                  "/definitions", "/users", "/permissions", "/health/checks/alarms"])
def test_every_endpoint_needs_credentials(anon, path):
    assert anon.get(path).status_code == 401


def test_changed_password_applies_to_api_logins(api, node, name):
    api.put(f"/users/{name}", json={"password": "old", "tags": "administrator"})
    api.put(f"/users/{name}", json={"password": "new", "tags": "administrator"})
    with _client(node, name, "old") as c:
        assert c.get("/overview").status_code == 401
    with _client(node, name, "new") as c:
        assert c.get("/overview").status_code == 200


def test_management_user_lists_only_its_vhosts(api, node, name):
    api.put(f"/users/{name}", json={"password": "pw", "tags": "management"})
    api.put(f"/vhosts/{name}")
    api.put(f"/permissions/{name}/{name}", json={"configure": ".*", "write": ".*", "read": ".*"})
    api.put(f"/queues/{name}/mine", json={})
    api.put("/queues/%2F/not-mine", json={})
    with _client(node, name, "pw") as c:
        assert [(q["vhost"], q["name"]) for q in c.get("/queues").json()] == [(name, "mine")]
        assert {x["vhost"] for x in c.get("/exchanges").json()} == {name}
        assert [v["name"] for v in c.get("/vhosts").json()] == [name]
    api.delete(f"/vhosts/{name}")
    api.delete("/queues/%2F/not-mine")
