"""The management HTTP API: the same requests give the same status codes and the same JSON keys
against this broker and against RabbitMQ 3.10 with the management plugin.

Target: the conftest's `mgmt_url`: `--mgmt-url URL` or env MGMT_URL (e.g.
http://localhost:15673 for `.ci/rabbitmq.sh start`), else the management API of the
`amqp-broker` process the session started; credentials MGMT_USER / MGMT_PASSWORD (default
guest/guest). Against a given broker URL without a management URL the tests skip. The AMQP side of
the same node (for connection/channel/consumer listings) comes from the overview's "amqp"
listener on the management host.

Only keys both servers have are checked: RabbitMQ adds rate and Erlang statistics we do not keep,
and its statistics (messages, connections) lag a few seconds, so counts are read through
`/get` and listings are polled.
"""

from __future__ import annotations

import base64
import os
import socket
import time
import urllib.parse
import uuid

import httpx
import pika
import pytest

from compat_tests.support import management_client

NOT_FOUND = {"error": "Object Not Found", "reason": "Not Found"}


@pytest.fixture(scope="module")
def mgmt(mgmt_url) -> str:
    if mgmt_url is None:
        pytest.skip("no management API for the given broker URL: pass --mgmt-url or set MGMT_URL")
    return mgmt_url


@pytest.fixture
def api(mgmt):
    auth = (os.environ.get("MGMT_USER", "guest"), os.environ.get("MGMT_PASSWORD", "guest"))
    with management_client(mgmt + "/api", auth) as c:
        yield c


@pytest.fixture
def uniq():
    return f"mgmtcompat-{uuid.uuid4().hex[:8]}"


def _amqp_url(api, mgmt) -> str:
    listeners = api.get("/overview").json()["listeners"]
    port = next(ln["port"] for ln in listeners if ln["protocol"] == "amqp")
    host = urllib.parse.urlsplit(mgmt).hostname
    return f"amqp://guest:guest@{host}:{port}/%2F"


def _has(obj: dict, *keys: str) -> None:
    missing = [k for k in keys if k not in obj]
    assert not missing, f"missing keys {missing} in {sorted(obj)}"


def _poll(fn, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.25)


def test_auth_status_codes(mgmt):
    base = mgmt + "/api"
    r = httpx.get(base + "/overview")
    assert r.status_code == 401
    assert r.headers["www-authenticate"] == 'Basic realm="RabbitMQ Management"'
    assert httpx.get(base + "/overview", auth=("guest", "wrong-password")).status_code == 401
    assert httpx.get(base + "/queues", auth=("no-such-user-x", "x")).status_code == 401


def test_overview_nodes_whoami(api):
    ov = api.get("/overview").json()
    _has(ov, "management_version", "rabbitmq_version", "product_name", "product_version",
         "cluster_name", "node", "exchange_types", "message_stats", "churn_rates", "queue_totals",
         "object_totals", "listeners", "contexts", "rates_mode", "erlang_version",
         "statistics_db_event_queue", "disable_stats", "enable_queue_totals")
    _has(ov["object_totals"], "connections", "channels", "consumers", "exchanges", "queues")
    _has(ov["listeners"][0], "node", "protocol", "ip_address", "port", "socket_opts")
    _has(ov["exchange_types"][0], "name", "description", "enabled")
    node = api.get("/nodes").json()[0]
    _has(node, "name", "type", "running", "uptime", "os_pid", "mem_alarm", "disk_free_alarm",
         "partitions", "processors", "exchange_types", "rates_mode")
    assert api.get("/nodes/" + urllib.parse.quote(node["name"])).status_code == 200
    assert api.get("/whoami").json() == {"name": "guest", "tags": ["administrator"]}
    assert api.get("/no-such-endpoint").json() == NOT_FOUND


def test_vhosts_users_permissions(api, mgmt, uniq):
    assert api.put(f"/vhosts/{uniq}").status_code == 201
    assert api.put(f"/vhosts/{uniq}").status_code == 204
    v = api.get(f"/vhosts/{uniq}").json()
    _has(v, "name", "description", "tags", "metadata", "tracing", "cluster_state")
    _has(api.get("/vhosts").json()[0], "name", "description", "tags", "cluster_state")
    assert api.put(f"/users/{uniq}", json={"password": "pw", "tags": "monitoring"}).status_code == 201
    assert api.put(f"/users/{uniq}", json={"password": "pw", "tags": "monitoring"}).status_code == 204
    u = api.get(f"/users/{uniq}").json()
    assert set(u) == {"name", "password_hash", "hashing_algorithm", "tags", "limits"}
    assert u["tags"] == ["monitoring"] and u["hashing_algorithm"] == "rabbit_password_hashing_sha256"
    body = {"configure": ".*", "write": ".*", "read": ".*"}
    assert api.put(f"/permissions/{uniq}/{uniq}", json=body).status_code == 201
    assert api.put(f"/permissions/{uniq}/{uniq}", json=body).status_code == 204
    assert api.get(f"/permissions/{uniq}/{uniq}").json() == {"user": uniq, "vhost": uniq, **body}
    r = httpx.put(mgmt + f"/api/vhosts/{uniq}x", auth=(uniq, "pw"))
    assert r.status_code == 401
    assert r.json() == {"error": "not_authorised", "reason": "Not administrator user"}
    assert api.delete(f"/permissions/{uniq}/{uniq}").status_code == 204
    assert api.delete(f"/permissions/{uniq}/{uniq}").status_code == 404
    assert api.delete(f"/users/{uniq}").status_code == 204
    assert api.delete(f"/users/{uniq}").status_code == 404
    assert api.delete(f"/vhosts/{uniq}").status_code == 204
    assert api.delete(f"/vhosts/{uniq}").status_code == 404
    assert api.get(f"/vhosts/{uniq}").json() == NOT_FOUND


def test_queue_exchange_binding_lifecycle(api, uniq):
    q, x = f"{uniq}-q", f"{uniq}-x"
    try:
        assert api.put(f"/queues/%2F/{q}", json={"durable": True, "arguments": {"x-max-length": 10}}).status_code == 201
        assert api.put(f"/queues/%2F/{q}", json={"durable": True, "arguments": {"x-max-length": 10}}).status_code == 204
        r = api.put(f"/queues/%2F/{q}", json={"durable": False})
        assert r.status_code == 400 and r.json()["error"] == "bad_request"
        assert "inequivalent arg 'durable'" in r.json()["reason"]
        got = api.get(f"/queues/%2F/{q}").json()
        _has(got, "name", "vhost", "durable", "auto_delete", "exclusive", "arguments", "node", "type")
        assert got["arguments"] == {"x-max-length": 10} and got["type"] == "classic"
        assert api.put(f"/exchanges/%2F/{x}", json={"type": "topic"}).status_code == 201
        assert api.put(f"/exchanges/%2F/{x}", json={"type": "topic"}).status_code == 204
        ex = api.get(f"/exchanges/%2F/{x}").json()
        _has(ex, "name", "vhost", "type", "durable", "auto_delete", "internal", "arguments",
             "user_who_performed_action")
        assert api.put(f"/exchanges/%2F/{x}-bad", json={"type": "nosuch"}).status_code == 400
        assert api.put("/exchanges/%2F/amq.mgmtcompat", json={"type": "direct"}).status_code == 401
        assert api.put("/queues/%2F/amq.mgmtcompat", json={}).status_code == 401
        r = api.post(f"/bindings/%2F/e/{x}/q/{q}", json={"routing_key": "a.#", "arguments": {}})
        assert r.status_code == 201 and r.headers["location"] == f"{q}/a.%2523"
        assert api.get(f"/bindings/%2F/e/{x}/q/{q}").json() == [
            {"source": x, "vhost": "/", "destination": q, "destination_type": "queue",
             "routing_key": "a.#", "arguments": {}, "properties_key": "a.%23"}]
        assert [b["source"] for b in api.get(f"/queues/%2F/{q}/bindings").json()] == ["", x]
        pub = {"properties": {"headers": {"h": 1}}, "routing_key": "a.b", "payload": "hello",
               "payload_encoding": "string"}
        assert api.post(f"/exchanges/%2F/{x}/publish", json=pub).json() == {"routed": True}
        assert api.post(f"/exchanges/%2F/{x}/publish", json={**pub, "routing_key": "b"}).json() == {"routed": False}
        r = api.post(f"/queues/%2F/{q}/get", json={"count": 1})
        assert r.status_code == 400 and r.json()["error"] == "bad_request"
        got = api.post(f"/queues/%2F/{q}/get", json={"count": 2, "ackmode": "ack_requeue_true",
                                                      "encoding": "auto"}).json()
        assert got == [{"payload_bytes": 5, "redelivered": False, "exchange": x, "routing_key": "a.b",
                        "message_count": 0, "properties": {"headers": {"h": 1}},
                        "payload": "hello", "payload_encoding": "string"}]
        assert api.delete(f"/queues/%2F/{q}/contents").status_code == 204
        assert api.post(f"/queues/%2F/{q}/get", json={"count": 1, "ackmode": "ack_requeue_true",
                                                       "encoding": "auto"}).json() == []
        # the properties key is decoded once more: "a.%23" and "a.%2523" both name it
        assert api.get(f"/bindings/%2F/e/{x}/q/{q}/a.%23").status_code == 200
        assert api.get(f"/bindings/%2F/e/{x}/q/{q}/a.%252523").status_code == 404
        assert api.delete(f"/bindings/%2F/e/{x}/q/{q}/a.%2523").status_code == 204
        assert api.delete(f"/bindings/%2F/e/{x}/q/{q}/a.%23").status_code == 404
        api.post(f"/bindings/%2F/e/{x}/q/{q}", json={"routing_key": "k", "arguments": {"x": 1}})
        [row] = [b for b in api.get(f"/bindings/%2F/e/{x}/q/{q}").json() if b["routing_key"] == "k"]
        assert row["properties_key"].startswith("k~")
        key = urllib.parse.quote(row["properties_key"], safe="")
        assert api.delete(f"/bindings/%2F/e/{x}/q/{q}/{key}").status_code == 204
        assert api.post(f"/bindings/%2F/e/{x}/q/{q}-missing", json={}).status_code == 404
    finally:
        api.delete(f"/queues/%2F/{q}")
        api.delete(f"/exchanges/%2F/{x}")
    assert api.delete(f"/queues/%2F/{q}").json() == NOT_FOUND
    assert api.delete(f"/exchanges/%2F/{x}").status_code == 404
    assert api.put(f"/queues/{uniq}-novhost/q", json={}).status_code == 404
    r = api.put(f"/queues/%2F/{q}", content=b"{not json")
    assert r.status_code == 400 and r.json() == {"error": "bad_request", "reason": "not_json"}


def test_policies(api, uniq):
    body = {"pattern": f"^{uniq}", "definition": {"max-length": 5}, "priority": 1, "apply-to": "queues"}
    assert api.put(f"/policies/%2F/{uniq}", json=body).status_code == 201
    assert api.put(f"/policies/%2F/{uniq}", json=body).status_code == 204
    assert api.get(f"/policies/%2F/{uniq}").json() == {"vhost": "/", "name": uniq, **body}
    r = api.put(f"/policies/%2F/{uniq}-bad", json={"pattern": ".*", "definition": {"max-length": "x"}})
    assert r.status_code == 400 and r.json()["error"] == "bad_request"
    assert api.delete(f"/policies/%2F/{uniq}").status_code == 204
    assert api.delete(f"/policies/%2F/{uniq}").status_code == 404


def test_definitions_and_health(api, uniq):
    defs = api.get("/definitions").json()
    _has(defs, "rabbit_version", "rabbitmq_version", "product_name", "product_version", "users",
         "vhosts", "permissions", "topic_permissions", "parameters", "global_parameters",
         "policies", "queues", "exchanges", "bindings")
    _has(defs["users"][0], "name", "password_hash", "hashing_algorithm", "tags", "limits")
    mine = {"queues": [{"name": f"{uniq}-dq", "vhost": "/", "durable": True, "auto_delete": False,
                        "arguments": {}}]}
    assert api.post("/definitions", json=mine).status_code == 204
    assert api.get(f"/queues/%2F/{uniq}-dq").status_code == 200
    api.delete(f"/queues/%2F/{uniq}-dq")
    assert api.get("/health/checks/alarms").json() == {"status": "ok"}
    assert api.get("/health/checks/local-alarms").json() == {"status": "ok"}
    assert api.get("/health/checks/virtual-hosts").json() == {"status": "ok"}
    assert api.get("/aliveness-test/%2F").json() == {"status": "ok"}
    assert api.get(f"/aliveness-test/{uniq}-novhost").json() == NOT_FOUND


def test_connections_channels_consumers(api, mgmt, uniq):
    conn = pika.BlockingConnection(pika.URLParameters(_amqp_url(api, mgmt)))
    try:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=7)
        q = ch.queue_declare(f"{uniq}-c", exclusive=True).method.queue
        ch.basic_consume(q, lambda *a: None, consumer_tag=f"{uniq}-tag")

        def mine(path, match):
            return [r for r in api.get(path).json() if match(r)]

        port = conn._impl.params.port  # the server's AMQP port
        local_port = conn._impl._transport._sock.getsockname()[1]  # ours: the row's peer_port
        conns = _poll(lambda: mine("/connections", lambda r: r.get("peer_port") == local_port))
        assert conns, "connection not listed"
        _has(conns[0], "name", "node", "user", "vhost", "state", "type", "protocol", "host", "port",
             "peer_host", "peer_port", "ssl", "channels", "client_properties", "connected_at",
             "frame_max", "channel_max", "timeout", "auth_mechanism", "user_who_performed_action")
        assert conns[0]["port"] == port and conns[0]["protocol"] == "AMQP 0-9-1"
        name = conns[0]["name"]
        chans = _poll(lambda: mine("/channels", lambda r: r["connection_details"]["name"] == name
                                   and r["prefetch_count"] == 7))  # RabbitMQ's stats lag
        _has(chans[0], "name", "number", "node", "user", "vhost", "connection_details", "state",
             "consumer_count", "messages_unacknowledged", "messages_unconfirmed",
             "messages_uncommitted", "acks_uncommitted", "prefetch_count",
             "global_prefetch_count", "confirm", "transactional", "user_who_performed_action")
        cons = _poll(lambda: mine("/consumers", lambda r: r["consumer_tag"] == f"{uniq}-tag"))
        _has(cons[0], "consumer_tag", "queue", "channel_details", "ack_required", "exclusive",
             "prefetch_count", "arguments", "active", "activity_status")
        _has(cons[0]["channel_details"], "connection_name", "name", "node", "number", "peer_host",
             "peer_port", "user")
        assert cons[0]["queue"] == {"name": q, "vhost": "/"}
        r = api.delete("/connections/" + urllib.parse.quote(name, safe=""),
                       headers={"X-Reason": "compat test"})
        assert r.status_code == 204
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
            for _ in range(200):
                conn.process_data_events(0.05)
        assert (closed.value.reply_code, closed.value.reply_text) == (320, "CONNECTION_FORCED - compat test")
    finally:
        if conn.is_open:
            conn.close()
    assert api.delete("/connections/no-such-connection").status_code == 404


def _status_line(mgmt: str, path: str, auth: bool) -> bytes:
    """The first line of the raw HTTP/1.1 answer to GET path."""
    url = urllib.parse.urlsplit(mgmt)
    head = f"GET {path} HTTP/1.1\r\nHost: {url.hostname}\r\nConnection: close\r\n"
    if auth:
        head += "Authorization: Basic " + base64.b64encode(b"guest:guest").decode() + "\r\n"
    with socket.create_connection((url.hostname, url.port), timeout=10) as s:
        s.sendall((head + "\r\n").encode())
        data = b""
        while b"\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    return data.split(b"\r\n", 1)[0]


def test_status_lines_carry_reason_phrases(mgmt, api):
    assert _status_line(mgmt, "/api/overview", auth=False) == b"HTTP/1.1 401 Unauthorized"
    assert _status_line(mgmt, "/api/overview", auth=True) == b"HTTP/1.1 200 OK"
    assert _status_line(mgmt, "/api/queues/%2F/no-such-queue-x", auth=True) == b"HTTP/1.1 404 Not Found"
    assert api.put("/vhosts/%2F").reason_phrase == "No Content"


@pytest.fixture
def vhost(api, uniq):
    """A fresh vhost; its creator (guest) gets full permissions in it. Deleted afterwards."""
    assert api.put(f"/vhosts/{uniq}").status_code == 201
    assert api.get(f"/permissions/{uniq}/guest").json() == {
        "user": "guest", "vhost": uniq, "configure": ".*", "write": ".*", "read": ".*"}
    yield uniq
    api.delete(f"/vhosts/{uniq}")


def test_queue_and_exchange_pages(api, vhost):
    for name in ("b-2", "a-1", "c-3", "B-4", "other"):
        assert api.put(f"/queues/{vhost}/{name}", json={"durable": False}).status_code == 201
    listed = _poll(lambda: len(api.get(f"/queues/{vhost}").json()) == 5)
    assert listed
    r = api.get(f"/queues/{vhost}", params={"page": 1, "page_size": 2})
    assert r.status_code == 200
    page = r.json()
    assert {k: v for k, v in page.items() if k != "items"} == {
        "total_count": 5, "item_count": 2, "filtered_count": 5, "page": 1, "page_size": 2,
        "page_count": 3}
    assert [q["name"] for q in page["items"]] == ["B-4", "a-1"]  # sorted by vhost, name
    rev = api.get(f"/queues/{vhost}", params={"page": 1, "page_size": 2, "sort": "name",
                                              "sort_reverse": "true"}).json()
    assert [q["name"] for q in rev["items"]] == ["other", "c-3"]
    last = api.get(f"/queues/{vhost}", params={"page": 3, "page_size": 2}).json()
    assert [q["name"] for q in last["items"]] == ["other"] and last["item_count"] == 1
    # name: a case-insensitive substring, or with use_regex=true a case-insensitive regex
    got = api.get(f"/queues/{vhost}", params={"page": 1, "name": "b-", "pagination": "true"}).json()
    assert [q["name"] for q in got["items"]] == ["B-4", "b-2"]
    assert (got["filtered_count"], got["total_count"], got["page_size"], got["page_count"]) == (2, 5, 100, 1)
    got = api.get(f"/queues/{vhost}", params={"page": 1, "page_size": 10, "name": "^[ab]-[12]$",
                                              "use_regex": "true"}).json()
    assert [q["name"] for q in got["items"]] == ["a-1", "b-2"]
    got = api.get(f"/queues/{vhost}", params={"page": 1, "name": "^[ab]", "use_regex": "false"}).json()
    assert got["items"] == [] and got["filtered_count"] == 0 and got["page_count"] == 0
    # one page past the end is an empty page; two are out of range
    assert api.get(f"/queues/{vhost}", params={"page": 2, "page_size": 5}).json()["items"] == []
    assert api.get(f"/queues/{vhost}", params={"page": 3, "page_size": 5}).status_code == 400
    # without page, name filters nothing and the answer stays a list
    assert len(api.get(f"/queues/{vhost}", params={"name": "b-"}).json()) == 5
    xs = api.get(f"/exchanges/{vhost}", params={"page": 1, "page_size": 1, "name": "amq.fan"}).json()
    assert [x["name"] for x in xs["items"]] == ["amq.fanout"]
    assert xs["filtered_count"] == 1 and xs["total_count"] == len(api.get(f"/exchanges/{vhost}").json())
    everywhere = api.get("/queues", params={"page": 1, "page_size": 500, "name": vhost}).json()
    assert everywhere["items"] == []  # name filters queue names, not vhosts
    everywhere = api.get("/exchanges", params={"page": 1, "page_size": 500}).json()
    assert vhost in {x["vhost"] for x in everywhere["items"]}


@pytest.mark.parametrize("query, error, reason", [
    ({"page": 0}, "invalid_pagination_parameters",
     "Invalid pagination parameters: page number 0, page size undefined"),
    ({"page": 1, "page_size": 0}, "invalid_pagination_parameters",
     "Invalid pagination parameters: page number 1, page size 0"),
    ({"page": 1, "page_size": 501}, "invalid_pagination_parameters",
     "Invalid pagination parameters: page number 1, page size 501"),
    ({"page": -1, "page_size": 5}, "invalid_pagination_parameters",
     "Invalid pagination parameters: page number -1, page size 5"),
    ({"page": "x"}, "bad_request", "Pagination parameters are invalid"),
    ({"page": 1, "page_size": "ten"}, "bad_request", "Pagination parameters are invalid"),
    ({"page": 1, "name": "(", "use_regex": "true"}, "bad_request", "Pagination parameters are invalid"),
    ({"page": 9, "page_size": 2}, "page_out_of_range", "Page out of range, page: 9 page size: 2, len: 3"),
])
def test_bad_page_parameters(api, vhost, query, error, reason):
    for name in ("q1", "q2", "q3"):
        api.put(f"/queues/{vhost}/{name}", json={"durable": False})
    _poll(lambda: len(api.get(f"/queues/{vhost}").json()) == 3)
    r = api.get(f"/queues/{vhost}", params=query)
    assert r.status_code == 400
    assert r.json() == {"error": error, "reason": reason}


# What RabbitMQ 3.10 lists for an AMQP 0-9-1 connection, less the Erlang process statistics
# (garbage_collection, reductions).
CONNECTION_KEYS = {
    "auth_mechanism", "channel_max", "channels", "client_properties", "connected_at",
    "frame_max", "host", "name", "node", "peer_cert_issuer", "peer_cert_subject",
    "peer_cert_validity", "peer_host", "peer_port", "port", "protocol", "ssl", "ssl_cipher",
    "ssl_hash", "ssl_key_exchange", "ssl_protocol", "state", "timeout", "type", "user",
    "user_who_performed_action", "vhost", "recv_oct", "recv_cnt", "send_oct", "send_cnt",
    "send_pend"}
CHANNEL_KEYS = {
    "acks_uncommitted", "confirm", "connection_details", "consumer_count",
    "global_prefetch_count", "messages_unacknowledged", "messages_uncommitted",
    "messages_unconfirmed", "name", "node", "number", "prefetch_count", "state",
    "transactional", "user", "user_who_performed_action", "vhost"}


def test_connection_and_channel_details_and_pages(api, mgmt):
    conn = pika.BlockingConnection(pika.URLParameters(_amqp_url(api, mgmt)))
    try:
        conn.channel().basic_qos(prefetch_count=3)
        local_port = conn._impl._transport._sock.getsockname()[1]
        needle = f":{local_port} -> "

        def listed():
            page = api.get("/connections", params={"page": 1, "page_size": 500, "name": needle}).json()
            # RabbitMQ lists a connection before its first stats (recv_oct, ...) are in
            return page if page["items"] and page["items"][0]["channels"] == 1 \
                and "recv_oct" in page["items"][0] else None

        page = _poll(listed)
        assert page, "connection not listed"
        assert page["item_count"] == page["filtered_count"] == 1 and page["page"] == 1
        row = page["items"][0]
        missing = CONNECTION_KEYS - set(row)
        assert not missing, f"connection row lacks {sorted(missing)}"
        assert row["ssl"] is False and row["ssl_protocol"] is None and row["peer_cert_subject"] is None
        assert (row["user"], row["vhost"], row["state"], row["peer_port"]) == ("guest", "/", "running", local_port)
        assert row["client_properties"]["product"] == "Pika Python Client Library"
        assert row["client_properties"]["capabilities"]["publisher_confirms"] is True
        assert row["auth_mechanism"] == "PLAIN"
        # stats lag behind in RabbitMQ; the handshake alone is a few hundred bytes each way
        counted = _poll(lambda: (lambda r: r if r["recv_oct"] > 0 and r["send_oct"] > 0 else None)(
            api.get("/connections/" + urllib.parse.quote(row["name"], safe="")).json()))
        assert counted and counted["recv_cnt"] > 0 and counted["send_cnt"] > 0
        one = api.get("/connections/" + urllib.parse.quote(row["name"], safe=""))
        assert one.status_code == 200
        detail = one.json()
        assert CONNECTION_KEYS <= set(detail) and detail["name"] == row["name"]
        assert detail["ssl_protocol"] == "" and detail["channels"] == 1
        chans = _poll(lambda: api.get("/channels", params={"page": 1, "name": row["name"]}).json()["items"])
        assert [c["number"] for c in chans] == [1]
        missing = CHANNEL_KEYS - set(chans[0])
        assert not missing, f"channel row lacks {sorted(missing)}"
        assert chans[0]["connection_details"]["name"] == row["name"]
    finally:
        conn.close()
    gone = _poll(lambda: not api.get("/connections", params={"page": 1, "name": needle}).json()["items"])
    assert gone, "closed connection still listed"
    assert api.get("/connections/" + urllib.parse.quote(row["name"], safe="")).status_code == 404


def test_health_checks(api, mgmt):
    overview = api.get("/overview").json()
    amqp_port = next(ln["port"] for ln in overview["listeners"] if ln["protocol"] == "amqp")
    assert api.get("/healthchecks/node").json() == {"status": "ok"}
    assert api.get("/healthchecks/node/" + urllib.parse.quote(overview["node"])).json() == {"status": "ok"}
    assert api.get("/healthchecks/node/nosuchnode@nohost").json() == NOT_FOUND
    r = api.get(f"/health/checks/port-listener/{amqp_port}")
    assert (r.status_code, r.json()) == (200, {"status": "ok", "port": amqp_port})
    r = api.get("/health/checks/port-listener/1")
    assert r.status_code == 503
    body = r.json()
    assert (body["status"], body["reason"], body["missing"]) == ("failed", "No active listener", 1)
    assert amqp_port in body["ports"]
    r = api.get("/health/checks/port-listener/abc")
    assert (r.status_code, r.json()) == (400, {"error": "bad_request", "reason": "Invalid port"})
    for name in ("amqp", "amqp091", "amqp0-9-1"):
        r = api.get(f"/health/checks/protocol-listener/{name}")
        assert (r.status_code, r.json()) == (200, {"status": "ok", "protocol": "amqp"})
    assert api.get("/health/checks/protocol-listener/http").json() == {"status": "ok", "protocol": "http"}
    r = api.get("/health/checks/protocol-listener/mqtt")
    assert r.status_code == 503
    body = r.json()
    assert (body["status"], body["reason"], body["missing"]) == ("failed", "No active listener", "mqtt")
    assert "amqp" in body["protocols"] and "http" in body["protocols"]
    # short spans: the RabbitMQ of scripts/run-tests.sh has an AMQPS certificate that expires
    # in 10 days (test_tls.py checks what the check finds then)
    for within, unit in (("1", "days"), ("1", "weeks"), ("0", "months"), ("0", "years")):
        r = api.get(f"/health/checks/certificate-expiration/{within}/{unit}")
        assert (r.status_code, r.json()) == (200, {"status": "ok"})
    r = api.get("/health/checks/certificate-expiration/soon/days")
    assert (r.status_code, r.json()) == (400, {"error": "bad_request", "reason": "Invalid expiration value."})
    r = api.get("/health/checks/certificate-expiration/1/fortnights")
    assert (r.status_code, r.json()) == (400, {"error": "bad_request", "reason":
                                               "Time unit not recognised. Supported units: days, weeks, months, years."})
    assert api.get("/health/checks/certificate-expiration/1").json() == NOT_FOUND
    single = {"status": "ok", "reason": "single node cluster"}
    assert api.get("/health/checks/node-is-quorum-critical").json() == single
    assert api.get("/health/checks/node-is-mirror-sync-critical").json() == single
    assert api.get("/health/checks/no-such-check").json() == NOT_FOUND


def test_users_bulk_delete(api, uniq):
    names = [f"{uniq}-{i}" for i in range(4)]
    for name in names:
        assert api.put(f"/users/{name}", json={"password": "pw", "tags": ""}).status_code == 201
    assert api.post("/users/bulk-delete", json={"users": names[:2]}).status_code == 204
    assert [api.get(f"/users/{n}").status_code for n in names] == [404, 404, 200, 200]
    # stops at the first unknown user: the ones before it are gone, the ones after it stay
    r = api.post("/users/bulk-delete", json={"users": [names[2], f"{uniq}-missing", names[3]]})
    assert (r.status_code, r.json()) == (400, {"error": "bad_request",
                                               "reason": ["no_such_user", f"{uniq}-missing"]})
    assert [api.get(f"/users/{n}").status_code for n in names[2:]] == [404, 200]
    r = api.post("/users/bulk-delete", json={})
    assert (r.status_code, r.json()) == (400, {"error": "bad_request", "reason": "[{key_missing,users}]"})
    assert api.post("/users/bulk-delete", json={"users": []}).status_code == 204
    r = api.get("/users/bulk-delete")
    assert r.status_code == 405 and r.reason_phrase == "Method Not Allowed"
    assert api.post("/users/bulk-delete", json={"users": [names[3]]}).status_code == 204
    assert api.get(f"/users/{names[3]}").status_code == 404


def test_columns_select_fields_of_rows(api, uniq):
    """`?columns=a,b.c` keeps only those keys (a dotted name keeps its first part, whole), in
    listings, pages and single objects; an unknown name is left out."""
    assert api.put(f"/queues/%2F/{uniq}", json={"arguments": {"x-max-length": 9}}).status_code == 201
    try:
        rows = api.get("/queues?columns=name,arguments.x-max-length,nosuch").json()
        assert {"name": uniq, "arguments": {"x-max-length": 9}} in rows
        assert all(set(r) <= {"name", "arguments"} for r in rows)
        page = api.get(f"/queues/%2F?columns=name&page=1&page_size=100&name={uniq}").json()
        assert page["items"] == [{"name": uniq}] and page["filtered_count"] == 1
        # (a PUT without "durable" declares a transient queue, as RabbitMQ's does)
        assert api.get(f"/queues/%2F/{uniq}?columns=name,durable").json() == {
            "name": uniq, "durable": False}
        assert api.get(f"/queues/%2F/{uniq}?columns=arguments.other").json() == {
            "arguments": {"x-max-length": 9}}
    finally:
        api.delete(f"/queues/%2F/{uniq}")
