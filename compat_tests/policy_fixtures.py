"""Fixtures for compat tests that set policies over the management HTTP API.

Imported by the test modules that use them (`from compat_tests.policy_fixtures import api,
policy`): `test_dead_letter_policies.py`, `test_policy_precedence.py`. The API is found with
`--mgmt-url URL` or env MGMT_URL (with MGMT_USER / MGMT_PASSWORD, default guest/guest), e.g.
http://127.0.0.1:15673 for `.ci/rabbitmq.sh start`; conftest sets MGMT_URL for the broker it
starts itself. Without one the tests are skipped. Each test's policy matches only its own
queues (priority 900).
"""

import os
import time
import urllib.parse

import httpx
import pytest

__all__ = ["api", "policy"]


@pytest.fixture
def api(request):
    url = request.config.getoption("--mgmt-url", None) or os.environ.get("MGMT_URL")
    if not url:
        pytest.skip("no management API: pass --mgmt-url or set MGMT_URL")
    auth = (os.environ.get("MGMT_USER", "guest"), os.environ.get("MGMT_PASSWORD", "guest"))
    with httpx.Client(base_url=url.rstrip("/") + "/api", auth=auth, timeout=30) as c:
        yield c


@pytest.fixture
def policy(api, names):
    """`policy(definition, *queues)` sets (or replaces) this test's policy on `queues` and waits
    until the broker lists it on them; removed after the test."""
    name = names.queue().replace("compat.", "pol.", 1)
    vhost = urllib.parse.quote("/", safe="")

    def _set(definition: dict, *queues: str) -> None:
        pattern = "^(" + "|".join(q.replace(".", r"\.") for q in queues) + ")$"
        body = {"pattern": pattern, "definition": definition, "priority": 900,
                "apply-to": "queues"}
        assert api.put(f"/policies/{vhost}/{name}", json=body).status_code in (201, 204)
        for q in queues:
            _wait_policy(api, vhost, q, name)
        time.sleep(float(os.environ.get("POLICY_SETTLE", "0.3")))  # quorum queues apply the new config through their log

    yield _set
    api.delete(f"/policies/{vhost}/{name}")


def _wait_policy(api, vhost: str, queue: str, name: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = api.get(f"/queues/{vhost}/{urllib.parse.quote(queue, safe='')}")
        if r.status_code == 200 and r.json().get("policy") == name:
            return
        time.sleep(0.1)
    pytest.fail(f"policy {name} not applied to {queue}")
