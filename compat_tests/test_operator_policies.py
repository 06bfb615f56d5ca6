"""Operator policies through the management API (/api/operator-policies): administrators set
them, they apply to matching queues beside a user policy (capping it), and they are listed on
the queue as `operator_policy`; the same against RabbitMQ 3.10."""

from __future__ import annotations

import urllib.parse

from compat_tests.support import management_client

from .test_management_api import _amqp_url, _poll, api, mgmt, uniq  # noqa: F401


def _q(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def test_operator_policy_applies_and_caps_a_policy(api, uniq):
    op = {"pattern": f"^{uniq}", "definition": {"max-length": 5}, "apply-to": "queues",
          "priority": 0}
    assert api.put(f"/operator-policies/%2F/{uniq}-op", json=op).status_code == 201
    try:
        assert api.put(f"/operator-policies/%2F/{uniq}-op", json=op).status_code == 204
        row = api.get(f"/operator-policies/%2F/{uniq}-op").json()
        assert row == {"vhost": "/", "name": f"{uniq}-op", "pattern": f"^{uniq}",
                       "apply-to": "queues", "definition": {"max-length": 5}, "priority": 0}
        assert any(p["name"] == f"{uniq}-op" for p in api.get("/operator-policies").json())
        assert any(p["name"] == f"{uniq}-op" for p in api.get("/operator-policies/%2F").json())
        assert not any(p["name"] == f"{uniq}-op" for p in api.get("/policies").json())
        assert api.put(f"/policies/%2F/{uniq}-user", json={
            "pattern": f"^{uniq}", "definition": {"max-length": 50}, "apply-to": "queues"}
        ).status_code == 201
        assert api.put(f"/queues/%2F/{_q(uniq)}", json={}).status_code == 201

        def applied():
            q = api.get(f"/queues/%2F/{_q(uniq)}").json()
            return q if q.get("operator_policy") == f"{uniq}-op" and q.get("policy") == f"{uniq}-user" \
                and q["effective_policy_definition"].get("max-length") == 5 else None
        assert _poll(applied), "operator policy not applied"
        for i in range(8):
            assert api.post("/exchanges/%2F/amq.default/publish", json={
                "routing_key": uniq, "payload": str(i), "payload_encoding": "string",
                "properties": {}}).json() == {"routed": True}
        assert _poll(lambda: api.get(f"/queues/%2F/{_q(uniq)}").json()["messages"] == 5)
    finally:
        api.delete(f"/queues/%2F/{_q(uniq)}")
        api.delete(f"/policies/%2F/{uniq}-user")
        api.delete(f"/operator-policies/%2F/{uniq}-op")
    assert api.get(f"/operator-policies/%2F/{uniq}-op").status_code == 404


def test_operator_policy_refuses_keys_it_may_not_set(api, uniq):
    r = api.put(f"/operator-policies/%2F/{uniq}", json={
        "pattern": ".*", "definition": {"alternate-exchange": "x"}, "apply-to": "queues"})
    assert r.status_code == 400
    assert api.get(f"/operator-policies/%2F/{uniq}").status_code == 404
    assert api.delete(f"/operator-policies/%2F/{uniq}").status_code == 404


def test_only_administrators_set_operator_policies(api, mgmt, uniq):
    """Other management users (a policymaker too) may read them, not set or clear them."""
    body = {"pattern": f"^{uniq}", "definition": {"max-length": 5}, "apply-to": "queues"}
    assert api.put(f"/operator-policies/%2F/{uniq}", json=body).status_code == 201
    try:
        for tag in ("monitoring", "policymaker"):
            user = f"{uniq}-{tag}"
            assert api.put(f"/users/{user}", json={"password": "pw", "tags": tag}).status_code == 201
            api.put(f"/permissions/%2F/{user}", json={"configure": ".*", "write": ".*", "read": ".*"})
            with management_client(mgmt + "/api", (user, "pw")) as other:
                assert any(p["name"] == uniq for p in other.get("/operator-policies").json()), tag
                assert other.get("/operator-policies/%2F").status_code == 200
                for r in (other.put(f"/operator-policies/%2F/{uniq}-x", json=body),
                          other.delete(f"/operator-policies/%2F/{uniq}")):
                    assert r.status_code == 401, tag
                    assert r.json()["reason"] == "Not administrator user"
            api.delete(f"/users/{user}")
        assert api.get(f"/operator-policies/%2F/{uniq}").status_code == 200
        assert api.get(f"/operator-policies/%2F/{uniq}-x").status_code == 404
    finally:
        api.delete(f"/operator-policies/%2F/{uniq}")
