"""Message rates in the management API: RabbitMQ's `message_stats` (totals with
`<key>_details.rate`) per queue, exchange, channel, vhost and the overview, the octet rates of
a connection, and `rates_mode` "basic".

Both servers sample every second here (`.ci/rabbitmq.sh` and the launcher set
collect_statistics_interval = 1000), so the totals show up after a second or two; the tests
poll for them. Rates are only checked for being numbers, and for being above zero while a
publisher runs: how large they are depends on the machine.
"""

from __future__ import annotations

import threading
import time
import urllib.parse

import pika
import pytest

from .test_management_api import _amqp_url, _has, _poll, api, mgmt, uniq  # noqa: F401

QUEUE_KEYS = ("publish", "deliver", "deliver_no_ack", "get", "get_no_ack", "get_empty",
              "deliver_get", "redeliver", "ack")
CHANNEL_KEYS = QUEUE_KEYS + ("confirm", "return_unroutable", "drop_unroutable")


def _q(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def _rates_ok(stats: dict, keys: tuple[str, ...]) -> None:
    _has(stats, *keys, *(k + "_details" for k in keys))
    for k in keys:
        assert isinstance(stats[k], int), (k, stats[k])
        assert isinstance(stats[k + "_details"]["rate"], (int, float)), (k, stats[k + "_details"])


@pytest.fixture
def client(api, mgmt, uniq):
    """A pika connection named `uniq` (client_properties.connection_name), closed after."""
    params = pika.URLParameters(_amqp_url(api, mgmt))
    params.client_properties = {"connection_name": uniq}
    conn = pika.BlockingConnection(params)
    yield conn
    if conn.is_open:
        conn.close()


def _connection_row(api, uniq: str) -> dict | None:
    for row in api.get("/connections").json():
        if (row.get("client_properties") or {}).get("connection_name") == uniq:
            return row
    return None


def test_message_stats_of_queue_exchange_channel_vhost_and_overview(api, client, uniq):
    ch = client.channel()
    ch.confirm_delivery()
    ch.queue_declare(uniq)
    ch.exchange_declare(uniq + ".x", "fanout", auto_delete=True)
    ch.queue_bind(uniq, uniq + ".x")
    try:
        for _ in range(5):
            ch.basic_publish(uniq + ".x", "", b"via fanout")
        ch.basic_publish("", uniq, b"via default")
        method, _, _ = ch.basic_get(uniq)
        ch.basic_ack(method.delivery_tag)
        assert ch.basic_get(uniq, auto_ack=True)[0] is not None
        method, _, _ = ch.basic_get(uniq)
        ch.basic_nack(method.delivery_tag, requeue=True)
        method, _, _ = ch.basic_get(uniq)  # the requeued one: redelivered
        assert method.redelivered
        ch.basic_ack(method.delivery_tag)

        def queue_stats():
            row = api.get(f"/queues/%2F/{_q(uniq)}").json()
            stats = row.get("message_stats") or {}
            return row if stats.get("ack") == 2 else None

        row = _poll(queue_stats, timeout=30)
        assert row, "queue message_stats did not reach ack=2"
        stats = row["message_stats"]
        _rates_ok(stats, QUEUE_KEYS)
        assert (stats["publish"], stats["get"], stats["get_no_ack"], stats["redeliver"]) == (6, 3, 1, 1)
        assert stats["deliver_get"] == 4 and stats["deliver"] == stats["deliver_no_ack"] == 0
        _has(row, "messages_details", "messages_ready_details", "messages_unacknowledged_details")

        x = api.get(f"/exchanges/%2F/{_q(uniq + '.x')}").json()["message_stats"]
        _rates_ok(x, ("publish_in", "publish_out"))
        assert (x["publish_in"], x["publish_out"]) == (5, 5)

        conn = _poll(lambda: _connection_row(api, uniq), timeout=30)
        assert conn, "connection not listed"
        _has(conn, "recv_oct_details", "send_oct_details")
        chans = api.get(f"/connections/{_q(conn['name'])}/channels").json()
        assert len(chans) == 1
        cs = _poll(lambda: (api.get(f"/channels/{_q(chans[0]['name'])}").json().get("message_stats")
                            or {}).get("ack") == 2 and api.get(f"/channels/{_q(chans[0]['name'])}").json())
        assert cs, "channel message_stats did not reach ack=2"
        _rates_ok(cs["message_stats"], CHANNEL_KEYS)
        assert cs["message_stats"]["publish"] == 6 and cs["message_stats"]["confirm"] == 6

        vhost = api.get("/vhosts/%2F").json()
        _rates_ok(vhost["message_stats"], CHANNEL_KEYS)
        _has(vhost, "messages_details", "recv_oct_details", "send_oct_details")
        overview = api.get("/overview").json()
        assert overview["rates_mode"] == "basic"
        _rates_ok(overview["message_stats"], CHANNEL_KEYS)
        assert overview["message_stats"]["publish"] >= 6
        _has(overview["queue_totals"], "messages_details", "messages_ready_details",
             "messages_unacknowledged_details")
        assert api.get("/nodes").json()[0]["rates_mode"] == "basic"
    finally:
        ch.queue_delete(uniq)


def test_unused_queue_has_no_message_stats(api, uniq):
    assert api.put(f"/queues/%2F/{_q(uniq)}", json={}).status_code == 201
    try:
        time.sleep(2.5)  # two samples later
        row = api.get(f"/queues/%2F/{_q(uniq)}").json()
        assert "message_stats" not in row
    finally:
        api.delete(f"/queues/%2F/{_q(uniq)}")


def test_publish_rate_above_zero_while_a_publisher_runs(api, mgmt, uniq):
    params = pika.URLParameters(_amqp_url(api, mgmt))
    stop = threading.Event()
    errors: list[BaseException] = []

    def publish():
        try:
            conn = pika.BlockingConnection(params)
            ch = conn.channel()
            ch.queue_declare(uniq)
            while not stop.is_set():
                ch.basic_publish("", uniq, b"tick")
                conn.sleep(0.01)
            ch.queue_delete(uniq)
            conn.close()
        except BaseException as e:  # reported by the test
            errors.append(e)

    t = threading.Thread(target=publish, daemon=True)
    t.start()
    try:
        def rate():
            r = api.get(f"/queues/%2F/{_q(uniq)}")
            if r.status_code != 200:
                return None
            stats = r.json().get("message_stats") or {}
            return stats.get("publish_details", {}).get("rate", 0) > 0 and stats
        stats = _poll(rate, timeout=30)
        assert stats, "publish rate stayed at zero while publishing"
        overview = api.get("/overview").json()["message_stats"]
        assert overview["publish"] >= stats["publish"]
    finally:
        stop.set()
        t.join(10)
    assert not errors, errors
