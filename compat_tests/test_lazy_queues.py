"""Lazy classic queues (`x-queue-mode: lazy`, as an argument or a policy): their messages are
paged out of memory, `/api/queues` says so (`messages_paged_out`, `message_bytes_paged_out`),
and consumers get them back whole and in order. The same against RabbitMQ 3.10, whose
statistics lag a few seconds (polled)."""

from __future__ import annotations

import pika

from .test_management_api import _amqp_url, _poll, api, mgmt, uniq  # noqa: F401

N = 20
SIZE = 1000


def _body(i: int) -> bytes:
    return b"%04d" % i + b"x" * (SIZE - 4)


def _paged(api, name: str) -> dict | None:
    q = api.get(f"/queues/%2F/{name}").json()
    return q if q.get("messages") == N and q.get("messages_paged_out") == N else None


def _publish_and_check(api, mgmt, name: str, arguments: dict) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(_amqp_url(api, mgmt)))
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare(name, durable=True, arguments=arguments)
        for i in range(N):
            ch.basic_publish("", name, _body(i), pika.BasicProperties(delivery_mode=2))
        q = _poll(lambda: _paged(api, name))
        assert q is not None, api.get(f"/queues/%2F/{name}").json()
        assert q["message_bytes_paged_out"] == N * SIZE
        got = []
        for _ in range(N):
            method, _, body = ch.basic_get(name, auto_ack=True)
            got.append(body)
        assert got == [_body(i) for i in range(N)]
    finally:
        ch.queue_delete(name)
        conn.close()


def test_a_lazy_queue_pages_its_messages_out_and_gives_them_back_in_order(api, mgmt, uniq):
    _publish_and_check(api, mgmt, uniq, {"x-queue-mode": "lazy"})


def test_a_queue_mode_policy_makes_a_queue_lazy(api, mgmt, uniq):
    body = {"pattern": f"^{uniq}$", "definition": {"queue-mode": "lazy"}, "apply-to": "queues"}
    assert api.put(f"/policies/%2F/{uniq}", json=body).status_code == 201
    try:
        _publish_and_check(api, mgmt, uniq, {})
    finally:
        api.delete(f"/policies/%2F/{uniq}")
