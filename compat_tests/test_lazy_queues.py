"""Lazy classic queues (`x-queue-mode: lazy`, as an argument or a policy): their messages are
not held in memory, `/api/queues` says so (`messages_ram`, `messages_ready_ram`,
`message_bytes_ram` are 0 while `messages` counts them all; a default queue of the same
messages holds them in memory), and consumers get them back whole and in order. The same
against RabbitMQ 3.10, whose statistics lag a few seconds (polled). (`messages_paged_out` is
not compared: RabbitMQ 3.10 counts there only messages that were in memory first, which a lazy
queue's never were; ours counts every ready message not in memory.)"""

from __future__ import annotations

import pika

from .test_management_api import _amqp_url, _poll, api, mgmt, uniq  # noqa: F401

N = 20
SIZE = 1000


def _body(i: int) -> bytes:
    return b"%04d" % i + b"x" * (SIZE - 4)


def _counted(api, name: str) -> dict | None:
    q = api.get(f"/queues/%2F/{name}").json()
    return q if q.get("messages") == N and "messages_ram" in q else None


def _publish_and_check(api, mgmt, name: str, arguments: dict, lazy: bool = True) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(_amqp_url(api, mgmt)))
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.queue_declare(name, durable=True, arguments=arguments)
        for i in range(N):
            ch.basic_publish("", name, _body(i), pika.BasicProperties(delivery_mode=2))
        q = _poll(lambda: _counted(api, name))
        assert q is not None, api.get(f"/queues/%2F/{name}").json()
        in_ram = 0 if lazy else N
        assert (q["messages_ram"], q["messages_ready_ram"], q["message_bytes_ram"]) == \
            (in_ram, in_ram, in_ram * SIZE)
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


def test_a_default_queue_holds_a_few_messages_in_memory(api, mgmt, uniq):
    _publish_and_check(api, mgmt, uniq, {}, lazy=False)
