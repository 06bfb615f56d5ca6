"""Vhost limits (max-connections, max-queues) and user limits (max-connections, max-channels)
set over the management API (/api/vhost-limits, /api/user-limits), and what clients see when a
limit is reached: RabbitMQ 3.10's codes and texts. Each test makes its own vhost or user and
deletes it afterwards (skipped without a management API)."""

from __future__ import annotations

import urllib.parse
import uuid

import pika
import pytest
from pika.exceptions import ChannelClosedByBroker, ConnectionClosedByBroker, ProbableAccessDeniedError

from compat_tests.support.pika_util import pika_connections


@pytest.fixture
def vhost(api):
    """A fresh vhost where guest may do everything."""
    name = f"compat-limits-{uuid.uuid4().hex[:8]}"
    assert api.put(f"/vhosts/{name}").status_code in (201, 204)
    assert api.put(f"/permissions/{name}/guest",
                   json={"configure": ".*", "write": ".*", "read": ".*"}).status_code in (201, 204)
    yield name
    api.delete(f"/vhosts/{name}")


@pytest.fixture
def user(api):
    """A fresh user (password "pw") with full permissions on "/"."""
    name = f"compat-limited-{uuid.uuid4().hex[:8]}"
    assert api.put(f"/users/{name}", json={"password": "pw", "tags": ""}).status_code in (201, 204)
    assert api.put(f"/permissions/%2F/{name}",
                   json={"configure": ".*", "write": ".*", "read": ".*"}).status_code in (201, 204)
    yield name
    api.delete(f"/users/{name}")


@pytest.fixture
def connect(broker_url):
    with pika_connections() as open_conn:
        yield lambda **kw: open_conn(broker_url, connection_attempts=1, **kw)


def _refusal(err: BaseException) -> str:
    """The 530 text of a refused connection.open (pika wraps it as a probable access denial)."""
    text = str(err.args[0] if err.args else err)
    return text[text.index("NOT_ALLOWED"):].rstrip("\"')")


def test_vhost_connection_limit(api, vhost, connect):
    assert api.put(f"/vhost-limits/{vhost}/max-connections", json={"value": 1}).status_code == 204
    assert api.get(f"/vhost-limits/{vhost}").json() == [
        {"vhost": vhost, "value": {"max-connections": 1}}]
    assert {"vhost": vhost, "value": {"max-connections": 1}} in api.get("/vhost-limits").json()
    first = connect(virtual_host=vhost)
    with pytest.raises(ProbableAccessDeniedError) as info:
        connect(virtual_host=vhost)
    assert _refusal(info.value) == (f"NOT_ALLOWED - access to vhost '{vhost}' refused for user "
                                    "'guest': connection limit (1) is reached")
    connect().close()  # other vhosts are not limited
    first.close()
    connect(virtual_host=vhost).close()  # the slot is free again
    assert api.delete(f"/vhost-limits/{vhost}/max-connections").status_code == 204
    assert api.get(f"/vhost-limits/{vhost}").json() == []


def test_vhost_queue_limit(api, vhost, connect):
    assert api.put(f"/vhost-limits/{vhost}/max-queues", json={"value": 1}).status_code == 204
    conn = connect(virtual_host=vhost)
    ch = conn.channel()
    ch.queue_declare("limited.a")
    ch.queue_declare("limited.a")  # declaring an existing queue again is fine
    with pytest.raises(ChannelClosedByBroker) as info:
        ch.queue_declare("limited.b")
    assert (info.value.reply_code, info.value.reply_text) == (
        406, f"PRECONDITION_FAILED - cannot declare queue 'limited.b': queue limit in vhost "
             f"'{vhost}' (1) is reached")
    assert api.put(f"/vhost-limits/{vhost}/max-queues", json={"value": -1}).status_code == 204
    conn.channel().queue_declare("limited.b")  # -1: no limit


def test_user_connection_and_channel_limits(api, user, connect):
    for name, value in (("max-connections", 1), ("max-channels", 2)):
        assert api.put(f"/user-limits/{user}/{name}", json={"value": value}).status_code == 204
    assert api.get(f"/user-limits/{user}").json() == [
        {"user": user, "value": {"max-connections": 1, "max-channels": 2}}]
    assert api.get(f"/users/{user}").json()["limits"] == {"max-connections": 1, "max-channels": 2}
    creds = pika.PlainCredentials(user, "pw")
    conn = connect(credentials=creds)
    with pytest.raises(ProbableAccessDeniedError) as info:
        connect(credentials=creds)
    assert _refusal(info.value) == (f"NOT_ALLOWED - connection refused for user '{user}': user "
                                    "connection limit (1) is reached")
    conn.channel()
    conn.channel()
    with pytest.raises(ConnectionClosedByBroker) as closed:
        conn.channel()
    assert (closed.value.reply_code, closed.value.reply_text) == (
        530, f"NOT_ALLOWED - number of channels opened for user '{user}' has reached the "
             "maximum allowed user limit of (2)")
    assert api.delete(f"/user-limits/{user}/max-connections").status_code == 204
    assert api.get(f"/user-limits/{user}").json() == [{"user": user, "value": {"max-channels": 2}}]


def test_limit_definitions_are_validated(api, vhost, user):
    bad_name = api.put(f"/vhost-limits/{vhost}/max-foo", json={"value": 1})
    assert (bad_name.status_code, bad_name.json()["reason"]) == (
        400, 'Validation failed\n\nUnrecognised terms [{<<"max-foo">>,1}] in limits\n')
    bad_value = api.put(f"/vhost-limits/{vhost}/max-queues", json={"value": "x"})
    assert (bad_value.status_code, bad_value.json()["reason"]) == (
        400, 'Validation failed\n\nmax-queues should be a number, actually was <<"x">>\n')
    bad_user_limit = api.put(f"/user-limits/{user}/max-queues", json={"value": 1})
    assert (bad_user_limit.status_code, bad_user_limit.json()["reason"]) == (
        400, 'Unrecognised terms [{<<"max-queues">>,1}] in user-limits')
    missing = urllib.parse.quote(f"no-such-vhost-{uuid.uuid4().hex[:6]}", safe="")
    assert api.put(f"/vhost-limits/{missing}/max-queues", json={"value": 1}).status_code == 404
    assert api.get(f"/vhost-limits/{missing}").status_code == 404
    assert api.get(f"/user-limits/no-such-user-{uuid.uuid4().hex[:6]}").status_code == 404
    assert api.get(f"/vhost-limits/{vhost}").json() == []


def test_limits_in_definitions(api, vhost, user):
    """Export: vhost limits as "vhost-limits" parameters, user limits in the user; an import
    sets both."""
    assert api.put(f"/vhost-limits/{vhost}/max-queues", json={"value": 3}).status_code == 204
    assert api.put(f"/user-limits/{user}/max-channels", json={"value": 4}).status_code == 204
    defs = api.get("/definitions").json()
    assert {"value": {"max-queues": 3}, "vhost": vhost, "component": "vhost-limits",
            "name": "limits"} in defs["parameters"]
    [row] = [u for u in defs["users"] if u["name"] == user]
    assert row["limits"] == {"max-channels": 4}
    assert api.delete(f"/vhost-limits/{vhost}/max-queues").status_code == 204
    assert api.delete(f"/user-limits/{user}/max-channels").status_code == 204
    imported = api.post("/definitions", json={
        "parameters": [{"value": {"max-connections": 7}, "vhost": vhost,
                        "component": "vhost-limits", "name": "limits"}],
        "users": [{**row, "limits": {"max-connections": 5}}]})
    assert imported.status_code in (201, 204), imported.text
    assert api.get(f"/vhost-limits/{vhost}").json() == [
        {"vhost": vhost, "value": {"max-connections": 7}}]
    assert api.get(f"/user-limits/{user}").json() == [
        {"user": user, "value": {"max-connections": 5}}]
