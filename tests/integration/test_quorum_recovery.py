"""kill -9 of a broker holding quorum queues: after restart every confirmed message is back,
and messages that were delivered but unacked come back with x-delivery-count incremented.
Also a clean restart keeps a queue's messages, and a deleted queue stays deleted."""

from __future__ import annotations

import pika

from compat_tests.support.pika_util import drain


def _declare(ch, name: str, **args) -> None:
    ch.queue_declare(name, durable=True, arguments={"x-queue-type": "quorum", **args})


def test_kill_9_keeps_confirmed_and_returns_unacked(fresh_broker, connect):
    b = fresh_broker.start()
    conn = connect(b)
    ch = conn.channel()
    ch.confirm_delivery()
    _declare(ch, "rec.q")
    for i in range(300):  # every publish returns only once confirmed
        ch.basic_publish("", "rec.q", str(i).encode(), pika.BasicProperties(delivery_mode=2))
    # take 5 without acking them: they are checked out when the broker dies
    ch.basic_qos(prefetch_count=5)
    held = []
    for method, _, body in ch.consume("rec.q", inactivity_timeout=5):
        held.append(body)
        if len(held) == 5:
            break
    assert held == [str(i).encode() for i in range(5)]
    b.kill()
    b.start()
    conn2 = connect(b)
    ch2 = conn2.channel()
    assert ch2.queue_declare("rec.q", passive=True).method.message_count == 300
    got = drain(ch2, "rec.q")
    bodies = [body for _, _, body in got]
    assert sorted(bodies, key=int) == [str(i).encode() for i in range(300)]
    assert len(bodies) == 300
    by_body = {body: (m, p) for m, p, body in got}
    for body in held:
        m, p = by_body[body]
        assert m.redelivered
        assert p.headers["x-delivery-count"] == 1
    untouched = by_body[b"100"]
    assert not untouched[0].redelivered
    conn2.close()


def test_a_lone_ack_is_made_durable_without_more_traffic(fresh_broker, connect):
    """At a low rate an ack waits a few ms for the next publish to share its WAL write; with
    none coming it is written on its own: after a kill -9 the acked message stays gone. The
    connection is left open, so no channel close proposes it."""
    b = fresh_broker.start()
    ch = connect(b).channel()
    ch.confirm_delivery()
    _declare(ch, "lone.ack")
    ch.basic_publish("", "lone.ack", b"one", pika.BasicProperties(delivery_mode=2))
    ch.basic_publish("", "lone.ack", b"two", pika.BasicProperties(delivery_mode=2))
    method, _, body = next(ch.consume("lone.ack", inactivity_timeout=5))
    assert body == b"one"
    ch.basic_ack(method.delivery_tag)
    method, _, body = next(ch.consume("lone.ack", inactivity_timeout=5))
    assert body == b"two"
    ch.basic_ack(method.delivery_tag)
    ch.connection.sleep(1.0)  # ample for the ack's few ms of delay (and keeps the link open)
    b.kill()
    b.start()
    ch2 = connect(b).channel()
    assert ch2.queue_declare("lone.ack", passive=True).method.message_count == 0
    assert ch2.basic_get("lone.ack") == (None, None, None)


def test_clean_restart_keeps_messages_and_deletes(fresh_broker, connect):
    b = fresh_broker.start()
    conn = connect(b)
    ch = conn.channel()
    ch.confirm_delivery()
    _declare(ch, "rec.keep")
    _declare(ch, "rec.gone")
    for i in range(10):
        ch.basic_publish("", "rec.keep", str(i).encode(), pika.BasicProperties(delivery_mode=2))
        ch.basic_publish("", "rec.gone", str(i).encode(), pika.BasicProperties(delivery_mode=2))
    ch.queue_delete("rec.gone")
    conn.close()
    b.stop()
    b.start()
    conn2 = connect(b)
    ch2 = conn2.channel()
    assert [body for _, _, body in drain(ch2, "rec.keep")] == [str(i).encode() for i in range(10)]
    _declare(ch2, "rec.gone")
    assert ch2.queue_declare("rec.gone", passive=True).method.message_count == 0
    conn2.close()


def test_tx_commit_ok_means_committed_to_the_quorum_log(fresh_broker, connect):
    """commit-ok for publishes to a quorum queue is sent only once their Enqueues are
    committed and fsynced: a kill -9 right after it loses none of them."""
    b = fresh_broker.start()
    conn = connect(b)
    ch = conn.channel()
    _declare(ch, "tx.q")
    ch.tx_select()
    body = b"x" * 4096
    for i in range(1500):
        ch.basic_publish("", "tx.q", body + str(i).encode(), pika.BasicProperties(delivery_mode=2))
    ch.tx_commit()
    b.kill()
    b.start()
    conn2 = connect(b)
    ch2 = conn2.channel()
    assert ch2.queue_declare("tx.q", passive=True).method.message_count == 1500
    conn2.close()
