"""What the web UI needs from the management app, over HTTP against a broker process: the
page and its files, a login failure the page can show, the overview's sample history, and
moving messages between queues (POST /api/queues/V/N/move, ours)."""

from __future__ import annotations

import time

import httpx


def test_the_page_and_its_files_are_served(node):
    page = httpx.get(node.mgmt_url + "/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert '<script src="/ui/app.js">' in page.text
    js = httpx.get(node.mgmt_url + "/ui/app.js")
    assert js.status_code == 200 and "javascript" in js.headers["content-type"]
    assert httpx.get(node.mgmt_url + "/ui/app.css").headers["content-type"].startswith("text/css")
    assert httpx.get(node.mgmt_url + "/ui/nothing.js").status_code == 404
    assert httpx.get(node.mgmt_url + "/ui/..%2Fhttp.py").status_code == 404


def test_a_failed_login_from_the_page_has_no_basic_challenge(anon, node):
    plain = anon.get("/whoami", auth=("guest", "wrong"))
    assert plain.status_code == 401 and "www-authenticate" in plain.headers
    ui = anon.get("/whoami", auth=("guest", "wrong"), headers={"x-requested-with": "XMLHttpRequest"})
    assert ui.status_code == 401 and "www-authenticate" not in ui.headers
    assert ui.json() == {"error": "not_authorised", "reason": "Login failed"}
    ok = anon.get("/whoami", auth=("guest", "guest"), headers={"x-requested-with": "XMLHttpRequest"})
    assert ok.status_code == 200


def test_overview_history_samples(api, amqp, name):
    ch = amqp().channel()
    ch.queue_declare(name)
    for _ in range(3):
        ch.basic_publish("", name, b"x")
    deadline = time.monotonic() + 10
    while True:  # samples every 200 ms on this node
        ov = api.get("/overview?msg_rates_age=60&lengths_age=60").json()
        samples = ov["message_stats"].get("publish_details", {}).get("samples", [])
        if len(samples) >= 2 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert len(samples) >= 2
    stamps = [s["timestamp"] for s in samples]
    assert stamps == sorted(stamps, reverse=True)  # newest first, as RabbitMQ
    assert samples[0]["sample"] >= 3
    depth = ov["queue_totals"]["messages_details"]["samples"]
    assert depth and isinstance(depth[0]["sample"], int)
    assert "samples" not in api.get("/overview").json()["message_stats"]["publish_details"]
    api.delete(f"/queues/%2F/{name}")


def test_move_messages_keeps_order_and_headers(api, amqp, name):
    import pika

    ch = amqp().channel()
    ch.queue_declare(name)
    ch.queue_declare(name + ".to")
    for i in range(4):
        ch.basic_publish("", name, b"m%d" % i, pika.BasicProperties(headers={"i": i}))
    r = api.post(f"/queues/%2F/{name}/move", json={"destination": name + ".to", "count": 3})
    assert r.status_code == 200 and r.json() == {"moved": 3, "remaining": 1}
    r = api.post(f"/queues/%2F/{name}/move", json={"destination": name + ".to"})
    assert r.json() == {"moved": 1, "remaining": 0}
    got = api.post(f"/queues/%2F/{name}.to/get", json={"count": 10, "ackmode": "ack_requeue_false",
                                                      "encoding": "auto"}).json()
    assert [(m["payload"], m["properties"]["headers"]["i"]) for m in got] == \
        [("m0", 0), ("m1", 1), ("m2", 2), ("m3", 3)]
    api.delete(f"/queues/%2F/{name}")
    api.delete(f"/queues/%2F/{name}.to")


def test_move_refuses_bad_requests(api, name):
    api.put(f"/queues/%2F/{name}", json={})
    try:
        assert api.post(f"/queues/%2F/{name}/move", json={}).status_code == 400
        assert api.post(f"/queues/%2F/{name}/move", json={"destination": name}).status_code == 400
        assert api.post(f"/queues/%2F/{name}/move",
                        json={"destination": "no-such-queue"}).status_code == 400
        for bad in (0, -1, 10_001, "5", True):
            r = api.post(f"/queues/%2F/{name}/move", json={"destination": "x", "count": bad})
            assert r.status_code == 400, bad
        assert api.post("/queues/%2F/no-such-queue/move", json={"destination": name}).status_code == 404
    finally:
        api.delete(f"/queues/%2F/{name}")
