"""A classic queue lives on the node that declared it; clients of every node use it as if it
were theirs (publish with confirms, get, consume with prefetch, ack and reject), and when its
node is down they get RabbitMQ's answers (404 "home node ... is down or inaccessible", nacks)."""

from __future__ import annotations

import time

import pika
import pytest

from .conftest import wait_until


def _conn(url: str) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.URLParameters(url + "?heartbeat=0"))


def _declare_on(cluster, i: int, name: str) -> None:
    conn = _conn(cluster.urls[i])
    conn.channel().queue_declare(name, durable=True)
    conn.close()

    def everywhere() -> bool:
        for url in cluster.urls:
            c = _conn(url)
            try:
                c.channel().queue_declare(name, passive=True)
            except pika.exceptions.ChannelClosedByBroker:
                return False
            finally:
                if c.is_open:
                    c.close()
        return True

    wait_until(everywhere, what=f"{name} known on every node")


def test_publish_get_and_consume_through_other_nodes(cluster):
    _declare_on(cluster, 0, "rc.q")
    pub = _conn(cluster.urls[1])
    ch = pub.channel()
    ch.confirm_delivery()
    for i in range(30):
        ch.basic_publish("", "rc.q", b"%d" % i, pika.BasicProperties(delivery_mode=2))
    method, _, body = ch.basic_get("rc.q")
    assert body == b"0" and method.message_count == 29
    ch.basic_ack(method.delivery_tag)

    con = _conn(cluster.urls[2])
    cch = con.channel()
    cch.basic_qos(prefetch_count=5)
    held: list = []
    cch.basic_consume("rc.q", lambda c, m, p, b: held.append((m.delivery_tag, b, m.redelivered)))
    deadline = time.monotonic() + 10
    while len(held) < 5 and time.monotonic() < deadline:
        con.process_data_events(0.05)
    con.process_data_events(0.5)
    assert [b for _, b, _ in held] == [b"%d" % i for i in range(1, 6)]  # prefetch 5, in order
    # reject one with requeue: it comes back (redelivered) once credit allows
    tag, body, _ = held[0]
    cch.basic_reject(tag, requeue=True)
    for t, _, _ in held[1:]:
        cch.basic_ack(t)
    got: list = []
    cch.basic_cancel(cch.consumer_tags[0])
    cch.basic_consume("rc.q", lambda c, m, p, b: (got.append((b, m.redelivered)),
                                                   c.basic_ack(m.delivery_tag)))
    deadline = time.monotonic() + 10
    while len(got) < 25 and time.monotonic() < deadline:
        con.process_data_events(0.05)
    assert (b"1", True) in got and len(got) == 25
    assert sorted(int(b) for b, _ in got) == list(range(1, 2)) + list(range(6, 30))
    con.close()
    ch.queue_delete("rc.q")
    pub.close()


def test_unacked_of_a_killed_client_node_go_back_to_the_queue(cluster):
    _declare_on(cluster, 0, "rc.crash")
    pub = _conn(cluster.urls[0])
    ch = pub.channel()
    ch.confirm_delivery()
    for i in range(10):
        ch.basic_publish("", "rc.crash", b"%d" % i)
    doomed = _conn(cluster.urls[2])
    dch = doomed.channel()
    dch.basic_qos(prefetch_count=10)
    held: list = []
    dch.basic_consume("rc.crash", lambda c, m, p, b: held.append(b))
    deadline = time.monotonic() + 10
    while len(held) < 10 and time.monotonic() < deadline:
        doomed.process_data_events(0.05)
    assert len(held) == 10
    cluster.kill(2)
    try:
        got: list = []

        def drain() -> bool:
            m, _, b = ch.basic_get("rc.crash", auto_ack=True)
            if m is not None:
                got.append((b, m.redelivered))
            return len(got) == 10

        wait_until(drain, what="the killed node's unacked messages requeued")
        assert sorted(int(b) for b, _ in got) == list(range(10))
        assert all(redelivered for _, redelivered in got)
    finally:
        cluster.restart(2)
    ch.queue_delete("rc.crash")
    pub.close()


def test_a_remote_consumer_that_does_not_read_leaves_the_messages_in_the_home_queue(cluster):
    """A no-ack consumer on node 1 of a queue homed on node 0, whose client never reads its
    socket: node 1 does not buffer what is published (the link window and the connection's
    output bound stop the home node), the home queue keeps the messages, and they all arrive
    once the consumer reads."""
    from compat_tests.support.raw import RawClient
    from pamqp import commands as C
    from tests.hardening.probes import rss_bytes
    _declare_on(cluster, 0, "rc.slow")
    body = b"s" * 65536
    count = 2048  # 128 MiB
    client_pid = cluster.node(1).pid
    with RawClient(cluster.urls[1], timeout=60) as raw:
        raw.handshake()
        raw.open_channel(1)
        raw.send(1, C.Basic.Consume(queue="rc.slow", consumer_tag="slow", no_ack=True))
        raw.read_method(C.Basic.ConsumeOk)
        base = rss_bytes(client_pid)
        peak = base
        pub = _conn(cluster.urls[0])
        ch = pub.channel()
        ch.confirm_delivery()
        for i in range(count):
            ch.basic_publish("", "rc.slow", body)
            if i % 64 == 0:
                peak = max(peak, rss_bytes(client_pid))
        pub.close()
        time.sleep(1.0)  # what was sent on has reached node 1 by now
        peak = max(peak, rss_bytes(client_pid))
        ready = wait_until(lambda: _ready_on(cluster, 0, "rc.slow"), what="a count of rc.slow")
        assert peak - base < 48 * 1024 * 1024, f"node 1 grew by {(peak - base) >> 20} MiB"
        assert ready[0] > count // 2, f"the home queue let go of {count - ready[0]} messages"
        got = 0
        raw.sock.settimeout(60)
        while got < count:  # now the client reads: everything arrives
            kind, _channel, _payload = raw.read_raw_frame()
            if kind == 3:
                got += 1  # one body frame per message (64 KiB < frame_max)
    conn = _conn(cluster.urls[0])
    conn.channel().queue_delete("rc.slow")
    conn.close()


def _ready_on(cluster, i: int, name: str) -> tuple[int] | None:
    with cluster.api(i) as api:
        q = api.get("queues", "/", name)
    return (q["messages_ready"],) if "messages_ready" in q else None


def test_a_queue_whose_home_node_is_down_is_unavailable_until_it_returns(cluster):
    _declare_on(cluster, 1, "rc.home")
    cluster.kill(1)
    try:
        conn = _conn(cluster.urls[0])
        wait_until(lambda: not cluster.api(0).get("nodes", cluster.names[1])["running"],
                   what="node 2 seen down")
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as err:
            conn.channel().queue_declare("rc.home", passive=True)
        assert err.value.reply_code == 404
        assert err.value.reply_text == (
            f"NOT_FOUND - home node '{cluster.names[1]}' of durable queue 'rc.home' in vhost "
            "'/' is down or inaccessible")
        ch = conn.channel()
        ch.confirm_delivery()
        with pytest.raises(pika.exceptions.NackError):
            ch.basic_publish("", "rc.home", b"nowhere")
        conn.close()
    finally:
        cluster.restart(1)
    conn = _conn(cluster.urls[0])
    ch = conn.channel()
    ch.confirm_delivery()
    ch.basic_publish("", "rc.home", b"back")
    assert ch.basic_get("rc.home", auto_ack=True)[2] == b"back"
    ch.queue_delete("rc.home")
    conn.close()
