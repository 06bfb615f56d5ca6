"""queue.declare / purge / delete as pika sees them: server-named queues, passive, reserved names,
exclusive and auto-delete lifetimes, equivalence checks, if-unused and if-empty."""

import pika
import pytest

from compat_tests.support import channel_closed, get_n, wait_until


def _exists(conn, q) -> bool:
    ch = conn.channel()
    try:
        ch.queue_declare(q, passive=True)
    except pika.exceptions.ChannelClosedByBroker as e:
        assert e.reply_code == 404
        return False
    ch.close()
    return True


def test_server_named_queue(ch, names):
    ok = ch.queue_declare("", exclusive=True).method
    names.track_queue(ok.queue)
    assert ok.queue.startswith("amq.gen-")
    assert (ok.message_count, ok.consumer_count) == (0, 0)


def test_server_names_are_unique(ch, names):
    a = names.track_queue(ch.queue_declare("", exclusive=True).method.queue)
    b = names.track_queue(ch.queue_declare("", exclusive=True).method.queue)
    assert a != b


def test_declare_ok_reports_consumer_count(conn, names):
    ch = conn.channel()
    q = names.queue()
    ch.queue_declare(q)
    ch.basic_consume(q, lambda *a: None)
    ch.basic_consume(q, lambda *a: None)
    ok = conn.channel().queue_declare(q, passive=True).method
    assert (ok.message_count, ok.consumer_count) == (0, 2)


def test_passive_declare_counts_ready_messages(ch, names):
    q = names.queue()
    ch.queue_declare(q)
    for i in range(3):
        ch.basic_publish("", q, b"%d" % i)
    wait_until(ch.connection, lambda: ch.queue_declare(q, passive=True).method.message_count == 3)
    ok = ch.queue_declare(q, passive=True).method
    assert (ok.queue, ok.message_count, ok.consumer_count) == (q, 3, 0)


def test_passive_declare_of_missing_queue_is_404(conn, names):
    q = names.queue()
    with channel_closed(404, f"NOT_FOUND - no queue '{q}' in vhost '/'"):
        conn.channel().queue_declare(q, passive=True)
    assert conn.is_open
    conn.channel().queue_declare(q)  # the connection is still usable


def test_amq_prefixed_queue_is_403(conn):
    with channel_closed(403, "ACCESS_REFUSED - queue name 'amq.compat' contains reserved prefix 'amq.*'"):
        conn.channel().queue_declare("amq.compat")


def test_exclusive_queue_locked_for_other_connection(pika_connect, names):
    owner, other = pika_connect(), pika_connect()
    q = names.queue()
    owner.channel().queue_declare(q, exclusive=True)
    prefix = f"RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '{q}' in vhost '/'"
    with channel_closed(405, prefix):
        other.channel().queue_declare(q, exclusive=True)
    with channel_closed(405, prefix):
        other.channel().basic_consume(q, lambda *a: None)
    with channel_closed(405, prefix):
        other.channel().queue_purge(q)
    with channel_closed(405, prefix):
        other.channel().queue_delete(q)
    with channel_closed(405, prefix):
        other.channel().queue_bind(q, "amq.fanout")


def test_exclusive_queue_passive_from_other_connection_is_405(pika_connect, names):
    owner, other = pika_connect(), pika_connect()
    q = names.queue()
    owner.channel().queue_declare(q, exclusive=True)
    with channel_closed(405):
        other.channel().queue_declare(q, passive=True)


def test_exclusive_queue_usable_from_other_channel_of_owner(conn, names):
    q = names.queue()
    conn.channel().queue_declare(q, exclusive=True)
    ch2 = conn.channel()
    ch2.basic_publish("", q, b"same-conn")
    assert get_n(ch2, q, 1)[0][2] == b"same-conn"


def test_exclusive_queue_deleted_when_owner_closes(pika_connect, names):
    owner, observer = pika_connect(), pika_connect()
    q = names.queue()
    owner.channel().queue_declare(q, exclusive=True, durable=True)
    owner.close()
    assert wait_until(observer, lambda: not _exists(observer, q))


def test_auto_delete_queue_deleted_after_last_consumer_cancels(conn, names):
    ch = conn.channel()
    q = names.queue()
    ch.queue_declare(q, auto_delete=True)
    t1 = ch.basic_consume(q, lambda *a: None)
    t2 = ch.basic_consume(q, lambda *a: None)
    ch.basic_cancel(t1)
    assert _exists(conn, q)
    ch.basic_cancel(t2)
    assert wait_until(conn, lambda: not _exists(conn, q))


def test_auto_delete_queue_survives_without_any_consumer(conn, names):
    q = names.queue()
    conn.channel().queue_declare(q, auto_delete=True)
    conn.channel().basic_publish("", q, b"x")
    assert _exists(conn, q)


def test_auto_delete_queue_deleted_when_consumer_channel_closes(conn, names):
    q = names.queue()
    conn.channel().queue_declare(q, auto_delete=True)
    ch = conn.channel()
    ch.basic_consume(q, lambda *a: None)
    ch.close()
    assert wait_until(conn, lambda: not _exists(conn, q))


@pytest.mark.parametrize("first,second,arg", [
    ({"durable": False}, {"durable": True}, "durable"),
    ({"auto_delete": False}, {"auto_delete": True}, "auto_delete"),
    ({"arguments": {"x-message-ttl": 1000}}, {"arguments": {"x-message-ttl": 2000}}, "x-message-ttl"),
    ({"arguments": {"x-max-length": 5}}, {"arguments": {}}, "x-max-length"),
])
def test_redeclare_inequivalent_is_406(conn, names, first, second, arg):
    q = names.queue()
    conn.channel().queue_declare(q, **first)
    with channel_closed(406, f"PRECONDITION_FAILED - inequivalent arg '{arg}' for queue '{q}' in vhost '/'"):
        conn.channel().queue_declare(q, **second)
    assert conn.is_open


def test_redeclare_inequivalent_text_names_both_values(conn, names):
    q = names.queue()
    conn.channel().queue_declare(q, durable=False)
    with channel_closed(406) as closed:
        conn.channel().queue_declare(q, durable=True)
    assert closed.reply_text.endswith("received 'true' but current is 'false'")


def test_redeclare_classic_queue_with_explicit_classic_type_is_ok(ch, names):
    q = names.queue()
    ch.queue_declare(q)
    ch.queue_declare(q, arguments={"x-queue-type": "classic"})


def test_passive_declare_ignores_other_properties(ch, names):
    q = names.queue()
    ch.queue_declare(q, durable=False)
    ch.queue_declare(q, passive=True, durable=True)


def test_purge_returns_count(ch, names):
    q = names.queue()
    ch.queue_declare(q)
    for i in range(4):
        ch.basic_publish("", q, b"%d" % i)
    wait_until(ch.connection, lambda: ch.queue_declare(q, passive=True).method.message_count == 4)
    assert ch.queue_purge(q).method.message_count == 4
    assert ch.queue_declare(q, passive=True).method.message_count == 0


def test_purge_missing_queue_is_404(conn, names):
    with channel_closed(404, "NOT_FOUND - no queue"):
        conn.channel().queue_purge(names.queue())


def test_delete_returns_message_count(ch, names):
    q = names.queue()
    ch.queue_declare(q)
    ch.basic_publish("", q, b"a")
    ch.basic_publish("", q, b"b")
    wait_until(ch.connection, lambda: ch.queue_declare(q, passive=True).method.message_count == 2)
    assert ch.queue_delete(q).method.message_count == 2


def test_delete_missing_queue_is_ok(ch, names):
    assert ch.queue_delete(names.queue()).method.message_count == 0


def test_delete_if_unused_with_consumer_is_406(conn, names):
    ch = conn.channel()
    q = names.queue()
    ch.queue_declare(q)
    ch.basic_consume(q, lambda *a: None)
    with channel_closed(406, f"PRECONDITION_FAILED - queue '{q}' in vhost '/' in use"):
        conn.channel().queue_delete(q, if_unused=True)


def test_delete_if_empty_with_messages_is_406(conn, names):
    ch = conn.channel()
    q = names.queue()
    ch.queue_declare(q)
    ch.basic_publish("", q, b"x")
    wait_until(conn, lambda: ch.queue_declare(q, passive=True).method.message_count == 1)
    with channel_closed(406, f"PRECONDITION_FAILED - queue '{q}' in vhost '/' not empty"):
        conn.channel().queue_delete(q, if_empty=True)
    conn.channel().queue_delete(q, if_unused=True, if_empty=False)
    assert not _exists(conn, q)


def test_bind_to_missing_exchange_is_404(conn, names):
    q = names.queue()
    conn.channel().queue_declare(q)
    with channel_closed(404, "NOT_FOUND - no exchange"):
        conn.channel().queue_bind(q, names.exchange(), "k")


def test_bind_missing_queue_is_404(conn, names):
    with channel_closed(404, "NOT_FOUND - no queue"):
        conn.channel().queue_bind(names.queue(), "amq.direct", "k")


def test_unbind_missing_binding_is_ok(ch, names):
    q = names.queue()
    ch.queue_declare(q)
    ch.queue_unbind(q, "amq.direct", "never-bound")


def test_exclusive_redeclare_of_shared_queue_is_405(conn, names):
    q = names.queue()
    conn.channel().queue_declare(q)
    with channel_closed(405, f"RESOURCE_LOCKED - cannot obtain exclusive access to locked queue '{q}'"):
        conn.channel().queue_declare(q, exclusive=True)
