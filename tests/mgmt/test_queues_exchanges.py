"""Queues, exchanges, bindings, publish and get through the management API: paths, status
codes and JSON shapes as RabbitMQ 3.10's management plugin answers them."""

from __future__ import annotations

import time

import pika
import pytest

NOT_FOUND = {"error": "Object Not Found", "reason": "Not Found"}


def test_queue_put_get_delete(api, name):
    assert api.put(f"/queues/%2F/{name}", json={"durable": True, "arguments": {"x-max-length": 10}}).status_code == 201
    assert api.put(f"/queues/%2F/{name}", json={"durable": True, "arguments": {"x-max-length": 10}}).status_code == 204
    q = api.get(f"/queues/%2F/{name}").json()
    assert q["name"] == name and q["vhost"] == "/" and q["durable"] is True
    assert q["arguments"] == {"x-max-length": 10}
    assert q["type"] == "classic" and q["messages"] == 0 and q["consumers"] == 0
    assert any(x["name"] == name for x in api.get("/queues").json())
    assert any(x["name"] == name for x in api.get("/queues/%2F").json())
    assert api.delete(f"/queues/%2F/{name}").status_code == 204
    r = api.delete(f"/queues/%2F/{name}")
    assert r.status_code == 404 and r.json() == NOT_FOUND
    assert api.get(f"/queues/%2F/{name}").status_code == 404


def test_inequivalent_queue_redeclare_is_400(api, name):
    api.put(f"/queues/%2F/{name}", json={"durable": True})
    r = api.put(f"/queues/%2F/{name}", json={"durable": False})
    assert r.status_code == 400
    assert r.json()["error"] == "bad_request"
    assert "inequivalent arg 'durable'" in r.json()["reason"]


def test_bad_json_and_unknown_vhost(api, name):
    r = api.put(f"/queues/%2F/{name}", content=b"{not json")
    assert r.status_code == 400 and r.json() == {"error": "bad_request", "reason": "not_json"}
    assert api.put(f"/queues/nosuchvhost/{name}", json={}).status_code == 404
    assert api.get("/queues/nosuchvhost").status_code == 404
    assert api.get("/nosuchthing").status_code == 404


def test_reserved_names_are_refused(api):
    assert api.put("/queues/%2F/amq.mine", json={}).status_code == 401
    assert api.put("/exchanges/%2F/amq.mine", json={"type": "direct"}).status_code == 401


def test_publish_get_purge(api, name):
    api.put(f"/queues/%2F/{name}", json={"durable": False})
    body = {"properties": {"headers": {"h": 1}, "delivery_mode": 2, "content_type": "text/plain"},
            "routing_key": name, "payload": "hello", "payload_encoding": "string"}
    r = api.post("/exchanges/%2F/amq.default/publish", json=body)
    assert r.status_code == 200 and r.json() == {"routed": True}
    api.post("/exchanges/%2F/amq.default/publish", json={**body, "payload": "aGk=",
                                                         "payload_encoding": "base64"})
    unrouted = api.post("/exchanges/%2F/amq.default/publish", json={**body, "routing_key": "nope"})
    assert unrouted.json() == {"routed": False}
    got = api.post(f"/queues/%2F/{name}/get",
                   json={"count": 5, "ackmode": "ack_requeue_true", "encoding": "auto"}).json()
    assert [m["payload"] for m in got] == ["hello", "hi"]
    first = got[0]
    assert first["properties"] == {"headers": {"h": 1}, "delivery_mode": 2, "content_type": "text/plain"}
    assert first["payload_bytes"] == 5 and first["payload_encoding"] == "string"
    assert first["exchange"] == "" and first["routing_key"] == name
    assert first["message_count"] == 1 and first["redelivered"] is False
    # requeued: still there, now redelivered
    q = api.get(f"/queues/%2F/{name}").json()
    assert q["messages"] == 2 and q["messages_ready"] == 2
    again = api.post(f"/queues/%2F/{name}/get",
                     json={"count": 1, "ackmode": "ack_requeue_false", "encoding": "base64"}).json()
    assert again[0]["redelivered"] is True and again[0]["payload_encoding"] == "base64"
    assert api.get(f"/queues/%2F/{name}").json()["messages"] == 1
    assert api.delete(f"/queues/%2F/{name}/contents").status_code == 204
    assert api.get(f"/queues/%2F/{name}").json()["messages"] == 0


def test_get_requires_ackmode_and_encoding(api, name):
    api.put(f"/queues/%2F/{name}", json={})
    r = api.post(f"/queues/%2F/{name}/get", json={"count": 1})
    assert r.status_code == 400 and r.json()["error"] == "bad_request"
    assert api.post("/queues/%2F/nosuch/get", json={"count": 1, "ackmode": "ack_requeue_true",
                                                    "encoding": "auto"}).status_code == 404


def test_delete_queue_if_empty(api, name):
    api.put(f"/queues/%2F/{name}", json={})
    api.post("/exchanges/%2F/amq.default/publish", json={
        "properties": {}, "routing_key": name, "payload": "x", "payload_encoding": "string"})
    assert api.delete(f"/queues/%2F/{name}", params={"if-empty": "true"}).status_code == 400
    assert api.delete(f"/queues/%2F/{name}").status_code == 204


def test_exchange_put_get_delete(api, name):
    assert api.put(f"/exchanges/%2F/{name}", json={"type": "topic", "durable": True}).status_code == 201
    assert api.put(f"/exchanges/%2F/{name}", json={"type": "topic", "durable": True}).status_code == 204
    x = api.get(f"/exchanges/%2F/{name}").json()
    assert {k: x[k] for k in ("name", "vhost", "type", "durable", "auto_delete", "internal", "arguments")} == {
        "name": name, "vhost": "/", "type": "topic", "durable": True, "auto_delete": False,
        "internal": False, "arguments": {}}
    names = [e["name"] for e in api.get("/exchanges/%2F").json()]
    assert "" in names and "amq.direct" in names and name in names
    r = api.put(f"/exchanges/%2F/{name}", json={"type": "direct"})
    assert r.status_code == 400 and r.json()["error"] == "bad_request"
    assert api.put(f"/exchanges/%2F/{name}x", json={"type": "nosuch"}).status_code == 400
    assert api.delete(f"/exchanges/%2F/{name}").status_code == 204
    assert api.delete(f"/exchanges/%2F/{name}").status_code == 404


def test_bindings(api, name):
    api.put(f"/queues/%2F/{name}", json={})
    api.put(f"/exchanges/%2F/{name}", json={"type": "topic"})
    r = api.post(f"/bindings/%2F/e/{name}/q/{name}", json={"routing_key": "a.#", "arguments": {}})
    assert r.status_code == 201
    assert r.headers["location"] == f"{name}/a.%2523"
    rows = api.get(f"/bindings/%2F/e/{name}/q/{name}").json()
    assert rows == [{"source": name, "vhost": "/", "destination": name, "destination_type": "queue",
                     "routing_key": "a.#", "arguments": {}, "properties_key": "a.%23"}]
    assert api.get(f"/bindings/%2F/e/{name}/q/{name}/a.%2523").json()["routing_key"] == "a.#"
    all_rows = api.get("/bindings/%2F").json()
    assert {"source": "", "vhost": "/", "destination": name, "destination_type": "queue",
            "routing_key": name, "arguments": {}, "properties_key": name} in all_rows
    assert any(b["source"] == name for b in api.get("/bindings").json())
    assert [b["source"] for b in api.get(f"/queues/%2F/{name}/bindings").json()] == ["", name]
    assert len(api.get(f"/exchanges/%2F/{name}/bindings/source").json()) == 1
    assert api.post("/exchanges/%2F/" + name + "/publish", json={
        "properties": {}, "routing_key": "a.b", "payload": "x", "payload_encoding": "string"}).json() == {"routed": True}
    assert api.get(f"/bindings/%2F/e/{name}/q/{name}/a.%23").status_code == 200  # as RabbitMQ
    assert api.get(f"/bindings/%2F/e/{name}/q/{name}/a.%252523").status_code == 404
    assert api.delete(f"/bindings/%2F/e/{name}/q/{name}/a.%2523").status_code == 204
    assert api.delete(f"/bindings/%2F/e/{name}/q/{name}/a.%23").status_code == 404
    assert api.get(f"/bindings/%2F/e/{name}/q/{name}").json() == []
    assert api.post(f"/bindings/%2F/e/{name}/q/nosuchqueue", json={}).status_code == 404


def test_exchange_to_exchange_binding(api, name):
    api.put(f"/exchanges/%2F/{name}a", json={"type": "fanout"})
    api.put(f"/exchanges/%2F/{name}b", json={"type": "fanout"})
    assert api.post(f"/bindings/%2F/e/{name}a/e/{name}b", json={}).status_code == 201
    rows = api.get(f"/bindings/%2F/e/{name}a/e/{name}b").json()
    assert rows[0]["destination_type"] == "exchange" and rows[0]["properties_key"] == "~"
    assert api.delete(f"/bindings/%2F/e/{name}a/e/{name}b/~").status_code == 204


def test_connections_channels_consumers(api, amqp, name):
    conn = amqp()
    ch = conn.channel()
    ch.basic_qos(prefetch_count=7)
    ch.queue_declare(name)
    ch.confirm_delivery()
    ch.basic_consume(name, lambda *a: None, consumer_tag="c1")
    conns = api.get("/connections").json()
    assert len(conns) == 1
    c = conns[0]
    assert c["user"] == "guest" and c["vhost"] == "/" and c["protocol"] == "AMQP 0-9-1"
    assert c["client_properties"]["product"] == "Pika Python Client Library"
    assert api.get(f"/connections/{c['name']}").json()["name"] == c["name"]
    chans = api.get("/channels").json()
    assert chans[0]["prefetch_count"] == 7 and chans[0]["confirm"] is True
    assert chans[0]["connection_details"]["name"] == c["name"]
    assert api.get(f"/connections/{c['name']}/channels").json()[0]["number"] == 1
    cons = api.get("/consumers").json()
    assert cons[0]["consumer_tag"] == "c1" and cons[0]["queue"] == {"name": name, "vhost": "/"}
    assert cons[0]["prefetch_count"] == 7 and cons[0]["ack_required"] is True
    assert api.get("/consumers/%2F").json() == cons
    r = api.delete(f"/connections/{c['name']}", headers={"X-Reason": "bye"})
    assert r.status_code == 204
    with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
        for _ in range(100):
            conn.process_data_events(0.05)
    assert closed.value.reply_code == 320
    assert closed.value.reply_text == "CONNECTION_FORCED - bye"
    for _ in range(100):
        if not api.get("/connections").json():
            break
        time.sleep(0.05)
    assert api.get("/connections").json() == []
    assert api.delete(f"/connections/{c['name']}").status_code == 404
