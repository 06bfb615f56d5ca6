"""Queue arguments with client-visible effects: x-message-ttl, per-message expiration, x-expires,
x-max-length (drop-head, reject-publish), x-max-length-bytes, x-max-priority,
x-single-active-consumer and consumer priorities (x-priority).  TTLs are tiny and every wait polls
with a deadline; no test asserts timings."""

import pika
import pika.exceptions
import pytest

from compat_tests.support import channel_closed, get_n, wait_until


def _count(ch, q) -> int:
    return ch.queue_declare(q, passive=True).method.message_count


def _bodies(got):
    return [body for _, _, body in got]


def test_message_ttl_expires_messages(confirm_ch, names):
    q = names.queue()
    confirm_ch.queue_declare(q, arguments={"x-message-ttl": 50})
    confirm_ch.basic_publish("", q, b"short-lived")
    assert wait_until(confirm_ch.connection, lambda: _count(confirm_ch, q) == 0)
    assert confirm_ch.basic_get(q, auto_ack=True)[0] is None


def test_message_ttl_zero_without_consumer_drops(confirm_ch, names):
    q = names.queue()
    confirm_ch.queue_declare(q, arguments={"x-message-ttl": 0})
    confirm_ch.basic_publish("", q, b"gone")
    assert wait_until(confirm_ch.connection, lambda: _count(confirm_ch, q) == 0)


def test_message_ttl_zero_with_waiting_consumer_delivers(confirm_ch, names):
    q = names.queue()
    confirm_ch.queue_declare(q, arguments={"x-message-ttl": 0})
    got = []
    confirm_ch.basic_consume(q, lambda c, m, p, b: got.append(b), auto_ack=True)
    confirm_ch.basic_publish("", q, b"immediate")
    assert wait_until(confirm_ch.connection, lambda: got == [b"immediate"])


def test_per_message_expiration(confirm_ch, names):
    q = names.queue()
    confirm_ch.queue_declare(q)
    confirm_ch.basic_publish("", q, b"expires", pika.BasicProperties(expiration="30"))
    confirm_ch.basic_publish("", q, b"stays")
    # Classic queues drop expired messages only at the head, so the expired one goes first.
    assert wait_until(confirm_ch.connection, lambda: _count(confirm_ch, q) == 1)
    (method, props, body), = get_n(confirm_ch, q, 1)
    assert body == b"stays" and props.expiration is None


def test_per_message_expiration_header_kept_on_delivery(confirm_ch, names):
    q = names.queue()
    confirm_ch.queue_declare(q)
    confirm_ch.basic_publish("", q, b"x", pika.BasicProperties(expiration="600000"))
    (_, props, _), = get_n(confirm_ch, q, 1)
    assert props.expiration == "600000"


def test_invalid_expiration_is_406(conn, names):
    ch = conn.channel()
    q = names.queue()
    ch.queue_declare(q)
    ch.confirm_delivery()
    with channel_closed(406, "PRECONDITION_FAILED - invalid expiration"):
        ch.basic_publish("", q, b"x", pika.BasicProperties(expiration="soon"))


def test_negative_message_ttl_argument_is_406(conn, names):
    with channel_closed(406, "PRECONDITION_FAILED - invalid arg 'x-message-ttl'"):
        conn.channel().queue_declare(names.queue(), arguments={"x-message-ttl": -1})


def test_queue_expires_when_unused(conn, names):
    q = names.queue()
    ch = conn.channel()
    ch.queue_declare(q, arguments={"x-expires": 100})
    ch.confirm_delivery()

    # Probing with queue.declare would count as a use and restart the timer; a mandatory publish
    # does not, and is returned (UnroutableError) once the queue is gone.
    def gone():
        try:
            ch.basic_publish("", q, b"probe", mandatory=True)
        except pika.exceptions.UnroutableError:
            return True
        return False

    assert wait_until(conn, gone)


def test_zero_expires_is_406(conn, names):
    with channel_closed(406, "PRECONDITION_FAILED - invalid arg 'x-expires'"):
        conn.channel().queue_declare(names.queue(), arguments={"x-expires": 0})


def test_max_length_drop_head(confirm_ch, names):
    q = names.queue()
    confirm_ch.queue_declare(q, arguments={"x-max-length": 2})
    for body in (b"1", b"2", b"3"):
        confirm_ch.basic_publish("", q, body)
    assert wait_until(confirm_ch.connection, lambda: _count(confirm_ch, q) == 2)
    assert _bodies(get_n(confirm_ch, q, 2)) == [b"2", b"3"]


def test_max_length_zero_keeps_nothing(confirm_ch, names):
    q = names.queue()
    confirm_ch.queue_declare(q, arguments={"x-max-length": 0})
    confirm_ch.basic_publish("", q, b"1")
    assert _count(confirm_ch, q) == 0


def test_max_length_reject_publish_nacks_with_confirms(confirm_ch, names):
    q = names.queue()
    confirm_ch.queue_declare(q, arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    confirm_ch.confirm_delivery()
    confirm_ch.basic_publish("", q, b"kept")
    with pytest.raises(pika.exceptions.NackError):
        confirm_ch.basic_publish("", q, b"refused")
    assert confirm_ch.is_open
    assert _bodies(get_n(confirm_ch, q, 1)) == [b"kept"]
    confirm_ch.basic_publish("", q, b"room-again")  # acked now that there is room


def test_max_length_reject_publish_without_confirms_drops_silently(conn, names):
    ch = conn.channel()
    q = names.queue()
    ch.queue_declare(q, arguments={"x-max-length": 1, "x-overflow": "reject-publish"})
    ch.basic_publish("", q, b"kept")
    ch.basic_publish("", q, b"dropped")
    assert _bodies(get_n(ch, q, 1)) == [b"kept"]
    assert ch.basic_get(q)[0] is None


def test_invalid_overflow_value_is_406(conn, names):
    with channel_closed(406, "PRECONDITION_FAILED - invalid arg 'x-overflow'"):
        conn.channel().queue_declare(names.queue(), arguments={"x-overflow": "explode"})


def test_max_length_bytes_drops_head(confirm_ch, names):
    q = names.queue()
    confirm_ch.queue_declare(q, arguments={"x-max-length-bytes": 10})
    for body in (b"aaaa", b"bbbb", b"cccc"):
        confirm_ch.basic_publish("", q, body)
    assert wait_until(confirm_ch.connection, lambda: _count(confirm_ch, q) == 2)
    assert _bodies(get_n(confirm_ch, q, 2)) == [b"bbbb", b"cccc"]


def test_max_priority_orders_by_priority(confirm_ch, names):
    q = names.queue()
    confirm_ch.queue_declare(q, arguments={"x-max-priority": 10})
    for prio in (1, 5, 3, 0, 9):
        confirm_ch.basic_publish("", q, b"p%d" % prio, pika.BasicProperties(priority=prio))
    assert wait_until(confirm_ch.connection, lambda: _count(confirm_ch, q) == 5)
    assert _bodies(get_n(confirm_ch, q, 5)) == [b"p9", b"p5", b"p3", b"p1", b"p0"]


def test_priority_above_max_counts_as_max_and_keeps_fifo(confirm_ch, names):
    q = names.queue()
    confirm_ch.queue_declare(q, arguments={"x-max-priority": 2})
    confirm_ch.basic_publish("", q, b"first-200", pika.BasicProperties(priority=200))
    confirm_ch.basic_publish("", q, b"second-2", pika.BasicProperties(priority=2))
    confirm_ch.basic_publish("", q, b"low", pika.BasicProperties(priority=1))
    assert wait_until(confirm_ch.connection, lambda: _count(confirm_ch, q) == 3)
    got = get_n(confirm_ch, q, 3)
    assert _bodies(got) == [b"first-200", b"second-2", b"low"]
    assert got[0][1].priority == 200  # the property is delivered unchanged


def test_priority_queue_same_priority_is_fifo(confirm_ch, names):
    q = names.queue()
    confirm_ch.queue_declare(q, arguments={"x-max-priority": 5})
    for i in range(4):
        confirm_ch.basic_publish("", q, b"%d" % i, pika.BasicProperties(priority=3))
    assert _bodies(get_n(confirm_ch, q, 4)) == [b"0", b"1", b"2", b"3"]


def test_single_active_consumer_only_first_receives(conn, names):
    ch = conn.channel()
    q = names.queue()
    ch.queue_declare(q, arguments={"x-single-active-consumer": True})
    first, second = [], []
    t1 = ch.basic_consume(q, lambda c, m, p, b: first.append(b), auto_ack=True)
    ch.basic_consume(q, lambda c, m, p, b: second.append(b), auto_ack=True)
    for i in range(4):
        ch.basic_publish("", q, b"%d" % i)
    assert wait_until(conn, lambda: len(first) == 4)
    assert second == []
    ch.basic_cancel(t1)
    ch.basic_publish("", q, b"after-cancel")
    assert wait_until(conn, lambda: second == [b"after-cancel"])
    assert first == [b"0", b"1", b"2", b"3"]


def test_single_active_consumer_reported_consumer_count(conn, names):
    ch = conn.channel()
    q = names.queue()
    ch.queue_declare(q, arguments={"x-single-active-consumer": True})
    ch.basic_consume(q, lambda *a: None)
    ch.basic_consume(q, lambda *a: None)
    assert conn.channel().queue_declare(q, passive=True).method.consumer_count == 2


def test_consumer_priority_higher_gets_messages(conn, names):
    ch = conn.channel()
    q = names.queue()
    ch.queue_declare(q)
    low, high = [], []
    ch.basic_consume(q, lambda c, m, p, b: low.append(b), auto_ack=True, arguments={"x-priority": 1})
    ch.basic_consume(q, lambda c, m, p, b: high.append(b), auto_ack=True, arguments={"x-priority": 10})
    for i in range(5):
        ch.basic_publish("", q, b"%d" % i)
    assert wait_until(conn, lambda: len(high) + len(low) == 5)
    assert (len(high), low) == (5, [])


def test_consumer_priority_falls_back_when_high_is_blocked(conn, names):
    ch = conn.channel()
    q = names.queue()
    ch.queue_declare(q)
    ch.basic_qos(prefetch_count=1)
    low, high = [], []
    ch.basic_consume(q, lambda c, m, p, b: low.append(b), arguments={"x-priority": 1})
    ch.basic_consume(q, lambda c, m, p, b: high.append(b), arguments={"x-priority": 10})
    for i in range(2):
        ch.basic_publish("", q, b"%d" % i)
    # The high-priority consumer is full after one unacked message, so the second goes low.
    assert wait_until(conn, lambda: len(high) == 1 and len(low) == 1)
    assert (high, low) == ([b"0"], [b"1"])


@pytest.mark.parametrize("args,arg,detail", [
    ({"x-max-length": -1}, "x-max-length", "{value_negative,-1}"),
    ({"x-max-length": "a"}, "x-max-length", '"expected integer, got longstr"'),
    ({"x-message-ttl": "a"}, "x-message-ttl", '"expected integer, got longstr"'),
    ({"x-max-length-bytes": -1}, "x-max-length-bytes", "{value_negative,-1}"),
    ({"x-expires": -1}, "x-expires", "{value_negative,-1}"),
    ({"x-max-priority": 256}, "x-max-priority", "{max_value_exceeded,256}"),
    ({"x-max-priority": -1}, "x-max-priority", "{value_negative,-1}"),
    ({"x-single-active-consumer": "yes"}, "x-single-active-consumer", "{unacceptable_type,longstr}"),
    ({"x-dead-letter-routing-key": "k"}, "x-dead-letter-routing-key", "routing_key_but_no_dlx_defined"),
])
def test_invalid_queue_argument_is_406(conn, names, args, arg, detail):
    q = names.queue()
    with channel_closed(406) as closed:
        conn.channel().queue_declare(q, arguments=args)
    assert closed.reply_text == (f"PRECONDITION_FAILED - invalid arg '{arg}' for queue '{q}' "
                                 f"in vhost '/': {detail}")


def test_wrong_type_for_dead_letter_exchange_is_406(conn, names):
    q = names.queue()
    with channel_closed(406, f"PRECONDITION_FAILED - invalid type 'signedint' for arg "
                             f"'x-dead-letter-exchange' in queue '{q}' in vhost '/'"):
        conn.channel().queue_declare(q, arguments={"x-dead-letter-exchange": 5})


@pytest.mark.parametrize("args", [
    {"x-max-priority": 255},
    {"x-unknown-argument": 1},        # unknown x-arguments are stored, not rejected
    {"x-overflow": "reject-publish-dlx"},
])
def test_accepted_queue_arguments(confirm_ch, names, args):
    q = names.queue()
    confirm_ch.queue_declare(q, arguments=args)
    confirm_ch.queue_declare(q, arguments=args)
