"""Durable state across restarts: clean SIGTERM restarts and kill -9."""

from __future__ import annotations

import pika

from compat_tests.support.pika_util import drain


def _publish_confirmed(connect, b, queue: str, n: int) -> None:
    conn = connect(b)
    ch = conn.channel()
    ch.queue_declare(queue, durable=True)
    ch.confirm_delivery()
    for i in range(n):
        ch.basic_publish("", queue, f"msg-{i}".encode(), pika.BasicProperties(delivery_mode=2))
    conn.close()


def _consume_all(connect, b, queue: str, limit: int) -> list[bytes]:
    return [body for _, _, body in drain(connect(b).channel(), queue, limit, timeout=2)]


def test_kill_9_keeps_every_confirmed_persistent_message_in_order(fresh_broker, connect):
    b = fresh_broker.start()
    n = 1000
    _publish_confirmed(connect, b, "dur.q", n)
    b.kill()
    b.start()
    assert _consume_all(connect, b, "dur.q", n + 1) == [f"msg-{i}".encode() for i in range(n)]


def test_durable_topology_survives_clean_restart(fresh_broker, connect):
    b = fresh_broker.start()
    conn = connect(b)
    ch = conn.channel()
    ch.exchange_declare("dur.x", "topic", durable=True)
    ch.queue_declare("dur.bound", durable=True)
    ch.queue_bind("dur.bound", "dur.x", "a.#")
    ch.queue_declare("dur.transient", durable=False)
    ch.confirm_delivery()
    ch.basic_publish("dur.x", "a.b", b"persistent", pika.BasicProperties(delivery_mode=2))
    ch.basic_publish("dur.x", "a.b", b"transient", pika.BasicProperties(delivery_mode=1))
    conn.close()
    assert b.stop() == 0
    b.start()
    conn = connect(b)
    ch = conn.channel()
    ch.exchange_declare("dur.x", "topic", passive=True)
    ch.basic_publish("dur.x", "a.c", b"after", pika.BasicProperties(delivery_mode=2))
    method, _, body = ch.basic_get("dur.bound", auto_ack=True)
    assert body == b"persistent"
    method, _, body = ch.basic_get("dur.bound", auto_ack=True)
    assert body == b"after"
    conn.close()
    conn = connect(b)
    try:
        conn.channel().queue_declare("dur.transient", passive=True)
        survived = True
    except pika.exceptions.ChannelClosedByBroker as err:
        survived = False
        assert err.reply_code == 404
    assert not survived


def test_acked_messages_do_not_come_back_and_unacked_are_redelivered(fresh_broker, connect):
    b = fresh_broker.start()
    _publish_confirmed(connect, b, "dur.acks", 10)
    conn = connect(b)
    ch = conn.channel()
    for _ in range(5):
        method, _, _ = ch.basic_get("dur.acks")
        ch.basic_ack(method.delivery_tag)
    held, _, _ = ch.basic_get("dur.acks")  # delivered, never acked
    # A confirmed publish after the acks forces a journal flush that covers them.
    ch.confirm_delivery()
    ch.basic_publish("", "dur.acks", b"tail", pika.BasicProperties(delivery_mode=2))
    b.kill()
    b.start()
    conn = connect(b)
    ch = conn.channel()
    method, _, body = ch.basic_get("dur.acks", auto_ack=True)
    assert body == b"msg-5" and method.redelivered
    rest = [ch.basic_get("dur.acks", auto_ack=True)[2] for _ in range(5)]
    assert rest == [b"msg-6", b"msg-7", b"msg-8", b"msg-9", b"tail"]
    conn.close()


def test_tx_commit_of_persistent_messages_survives_kill_9(fresh_broker, connect):
    b = fresh_broker.start()
    conn = connect(b)
    ch = conn.channel()
    ch.queue_declare("dur.tx", durable=True)
    ch.tx_select()
    for i in range(3):
        ch.basic_publish("", "dur.tx", f"tx-{i}".encode(), pika.BasicProperties(delivery_mode=2))
    ch.tx_commit()  # returns only once the journal holds the messages
    b.kill()
    b.start()
    assert _consume_all(connect, b, "dur.tx", 4) == [b"tx-0", b"tx-1", b"tx-2"]


def test_sigterm_closes_clients_with_320_and_exits_cleanly(fresh_broker, connect):
    b = fresh_broker.start()
    conn = connect(b)
    closed = []
    b.proc.send_signal(15)
    try:
        while True:
            conn.process_data_events(time_limit=0.2)
    except pika.exceptions.ConnectionClosedByBroker as err:
        closed.append(err.reply_code)
    assert closed == [320]
    assert b.proc.wait(15) == 0


def test_clean_stop_flushes_unconfirmed_persistent_messages(fresh_broker, connect):
    b = fresh_broker.start()
    conn = connect(b)
    ch = conn.channel()
    ch.queue_declare("dur.flush", durable=True)
    for i in range(100):
        ch.basic_publish("", "dur.flush", f"f-{i}".encode(), pika.BasicProperties(delivery_mode=2))
    ch.queue_declare("dur.flush", passive=True)  # a round trip: every publish was processed
    assert b.stop() == 0
    b.start()
    assert _consume_all(connect, b, "dur.flush", 101) == [f"f-{i}".encode() for i in range(100)]


def test_kill_9_after_the_journal_moved_through_several_segment_files(fresh_broker, connect):
    """Large messages carry the classic journal through several 32 MiB segment files: those a
    consumer has passed are deleted, the oldest one, pinned by a message nobody consumes, has
    that message copied forward and goes too, and a kill -9 then loses nothing and brings
    nothing acked back."""
    b = fresh_broker.start()
    body = b"." * (512 << 10)
    conn = connect(b)
    ch = conn.channel()
    ch.confirm_delivery()
    persistent = pika.BasicProperties(delivery_mode=2)
    ch.queue_declare("seg.pinned", durable=True)
    ch.basic_publish("", "seg.pinned", b"left behind", persistent)
    ch.queue_declare("seg.q", durable=True)
    for i in range(150):
        ch.basic_publish("", "seg.q", b"%04d" % i + body, persistent)
    taken = drain(ch, "seg.q", 100, timeout=5)   # acked one by one
    assert [body[:4] for _, _, body in taken] == [b"%04d" % i for i in range(100)]
    for i in range(150, 250):
        ch.basic_publish("", "seg.q", b"%04d" % i + body, persistent)
    conn.close()
    journal = sorted(p.name for p in b.data_dir.iterdir() if p.name.startswith("messages.journal"))
    assert "messages.journal" not in journal   # the first file: its live message was copied on
    assert len(journal) <= 5                   # 125 MiB written in all, 75 MiB of it live
    b.kill()
    b.start()
    ch = connect(b).channel()
    assert [body[:4] for _, _, body in drain(ch, "seg.q", 200, timeout=5)] == \
        [b"%04d" % i for i in range(100, 250)]
    assert [body for _, _, body in drain(ch, "seg.pinned", timeout=1)] == [b"left behind"]
