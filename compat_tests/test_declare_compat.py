"""Queue declaration, arguments and dead-letter routing details clients trip over, each checked
against RabbitMQ's exact reply: inequivalent-arg texts (AMQP type names, bare values when both
sides have the argument), queue.bind with both ends missing, x-queue-mode and
x-dead-letter-strategy values, arguments of another queue type, server-named quorum queues,
queue.delete if-unused / if-empty on a quorum queue (a connection error), quorum reject-publish
hysteresis, dead lettering of CC'd messages, CC headers of the wrong type, and (this broker only)
the refusal of streams."""

import pika
import pytest
from pika.exceptions import NackError

from compat_tests.support import channel_closed, connection_closed, get_n

QQ = {"x-queue-type": "quorum"}


@pytest.fixture
def ch(conn):
    channel = conn.channel()
    channel.confirm_delivery()
    return channel


def _where(q: str) -> str:
    return f"queue '{q}' in vhost '/'"


# -- inequivalent arguments -----------------------------------------------------------------------
@pytest.mark.parametrize("first, second, detail", [
    # pika sends a 32-bit int as 'I' (signedint), a larger one as 'l' (long)
    ({"x-max-length": 5}, {"x-max-length": 6}, "received '6' but current is '5'"),
    ({"x-max-length": 5}, {"x-max-length": 2**40}, "received '1099511627776' but current is '5'"),
    ({"x-max-length": 5}, {"x-max-length": "5"}, "received '5' but current is '5'"),  # longstr
    ({"x-message-ttl": 5}, {}, "received none but current is the value '5' of type 'signedint'"),
    ({}, {"x-expires": 2**40},
     "received the value '1099511627776' of type 'long' but current is none"),
    ({"x-single-active-consumer": True}, {"x-single-active-consumer": False},
     "received 'false' but current is 'true'"),
])
def test_inequivalent_arg_text(conn, ch, names, first, second, detail):
    q = names.queue()
    ch.queue_declare(q, arguments=first)
    with channel_closed(406) as closed:
        conn.channel().queue_declare(q, arguments=second)
    key, = {*first, *second}
    assert closed.reply_text == (f"PRECONDITION_FAILED - inequivalent arg '{key}' for {_where(q)}: "
                                 f"{detail}")


@pytest.mark.parametrize("sent,name", [(5, "byte"), (300, "short"), (100_000, "signedint"),
                                       (2**40, "long")])
def test_inequivalent_arg_names_the_type_the_client_sent(broker_url, names, sent, name):
    # pamqp (aio-pika, aiormq) encodes an int in the smallest type that holds it; RabbitMQ's
    # text names that wire type, on either side of the comparison.
    from pamqp import commands

    from compat_tests.support.raw import RawClient

    q = names.queue()
    with RawClient(broker_url) as raw:
        raw.handshake()
        raw.open_channel(1)
        raw.send(1, commands.Queue.Declare(queue=q, arguments={"x-max-length": sent}))
        raw.read_method(commands.Queue.DeclareOk)
        raw.send(1, commands.Queue.Declare(queue=q))
        reply = raw.read_method(commands.Channel.Close)
        assert reply.reply_text == (
            f"PRECONDITION_FAILED - inequivalent arg 'x-max-length' for queue '{q}' in vhost '/': "
            f"received none but current is the value '{sent}' of type '{name}'")
        raw.send(1, commands.Channel.CloseOk())
        raw.open_channel(2)
        raw.send(2, commands.Queue.Delete(queue=q))
        raw.read_method(commands.Queue.DeleteOk)
        raw.send(2, commands.Queue.Declare(queue=q))
        raw.read_method(commands.Queue.DeclareOk)
        raw.send(2, commands.Queue.Declare(queue=q, arguments={"x-max-length": sent}))
        reply = raw.read_method(commands.Channel.Close)
        assert reply.reply_text.endswith(
            f"received the value '{sent}' of type '{name}' but current is none")
        raw.send(2, commands.Channel.CloseOk())
        raw.open_channel(3)
        raw.send(3, commands.Queue.Delete(queue=q))
        raw.read_method(commands.Queue.DeleteOk)


def test_inequivalent_queue_type_explicit_classic(conn, ch, names):
    q = names.queue()
    ch.queue_declare(q, durable=True, arguments=QQ)
    with channel_closed(406) as closed:
        conn.channel().queue_declare(q, durable=True, arguments={"x-queue-type": "classic"})
    assert closed.reply_text == (f"PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for "
                                 f"{_where(q)}: received 'classic' but current is 'quorum'")


def test_inequivalent_queue_type_absent(conn, ch, names, server_info):
    q = names.queue()
    ch.queue_declare(q, durable=True, arguments=QQ)
    with channel_closed(406) as closed:
        conn.channel().queue_declare(q, durable=True)
    # 4.x stores x-queue-type on every queue (absent = classic); 3.10 compares what was sent
    detail = ("received none but current is the value 'quorum' of type 'longstr'"
              if server_info.is_rabbitmq3 else "received 'classic' but current is 'quorum'")
    assert closed.reply_text == (f"PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for "
                                 f"{_where(q)}: {detail}")


def test_absent_and_explicit_classic_are_equivalent(ch, names):
    q = names.queue()
    ch.queue_declare(q, durable=True)
    ch.queue_declare(q, durable=True, arguments={"x-queue-type": "classic"})
    q2 = names.queue()
    ch.queue_declare(q2, durable=True, arguments={"x-queue-type": "classic"})
    assert ch.queue_declare(q2, durable=True).method.queue == q2


# -- bind, queue mode, dead-letter strategy, other types' arguments ------------------------------
def test_bind_with_exchange_and_queue_missing_reports_the_exchange(conn, names):
    q, x = names.queue(), names.exchange()
    with channel_closed(404) as closed:
        conn.channel().queue_bind(q, x, "k")
    assert closed.reply_text == f"NOT_FOUND - no exchange '{x}' in vhost '/'"


@pytest.mark.parametrize("args, key, tail", [
    ({"x-queue-mode": "bogus"}, "x-queue-mode", ": \"unsupported queue mode 'bogus'\""),
    ({"x-queue-mode": 5}, "x-queue-mode", ": {unacceptable_type,signedint}"),
    ({**QQ, "x-dead-letter-strategy": "bogus"}, "x-dead-letter-strategy", ": invalid_dlx_strategy"),
    ({**QQ, "x-dead-letter-strategy": 5}, "x-dead-letter-strategy",
     ": {unacceptable_type,signedint}"),
    # an argument only another queue type knows
    ({**QQ, "x-queue-mode": "lazy"}, "x-queue-mode", " of queue type rabbit_quorum_queue"),
    ({"x-dead-letter-strategy": "at-least-once"}, "x-dead-letter-strategy",
     " of queue type rabbit_classic_queue"),
    ({"x-delivery-limit": 5}, "x-delivery-limit", " of queue type rabbit_classic_queue"),
])
def test_invalid_argument_is_406(conn, names, args, key, tail):
    q = names.queue()
    with channel_closed(406) as closed:
        conn.channel().queue_declare(q, durable=True, arguments=args)
    assert closed.reply_text == f"PRECONDITION_FAILED - invalid arg '{key}' for {_where(q)}{tail}"


def test_lazy_queue_mode_is_accepted(ch, names):
    q = names.queue()
    ch.queue_declare(q, arguments={"x-queue-mode": "lazy"})
    ch.basic_publish("", q, b"x")
    assert [b for _, _, b in get_n(ch, q, 1)] == [b"x"]


def test_server_named_quorum_queue_is_406(conn):
    with channel_closed(406) as closed:
        conn.channel().queue_declare("", durable=True, arguments=QQ)
    assert closed.reply_text == ("PRECONDITION_FAILED - Cannot declare a server-named queue for "
                                 "type rabbit_quorum_queue")


# -- queue.delete flags on a quorum queue ---------------------------------------------------------
@pytest.mark.parametrize("flags, flag", [
    ({"if_unused": True}, "if-unused"),
    ({"if_empty": True}, "if-empty"),
    ({"if_unused": True, "if_empty": True}, "if-unused"),
])
def test_quorum_delete_with_if_flags_is_540_connection_error(pika_connect, names, flags, flag):
    # rabbit_quorum_queue:delete/4, unchanged from 3.10 to 4.2: refused even on an idle,
    # empty queue, and it closes the connection (NOT_IMPLEMENTED is a hard error)
    q = names.queue()
    conn = pika_connect()
    conn.channel().queue_declare(q, durable=True, arguments=QQ)
    with connection_closed(540) as closed:
        conn.channel().queue_delete(q, **flags)
    assert closed.reply_text == (f"NOT_IMPLEMENTED - cannot delete {_where(q)}. queue.delete "
                                 f"operations with {flag} flag set are not supported by quorum queues")
    ch = pika_connect().channel()
    assert ch.queue_declare(q, passive=True).method.queue == q  # still there
    ch.queue_delete(q)


# -- quorum reject-publish ------------------------------------------------------------------------
def _publish(ch, q, body) -> str:
    try:
        ch.basic_publish("", q, body)
        return "ack"
    except NackError:
        return "nack"


def test_quorum_reject_publish_stays_blocked_until_below_80_percent(ch, names):
    # rabbit_fifo: publishing blocks once over max-length (m3 makes 3 > 2) and unblocks only
    # when ready messages fall to 80% of it (1 for max-length 2).
    q = names.queue()
    ch.queue_declare(q, durable=True,
                     arguments={**QQ, "x-max-length": 2, "x-overflow": "reject-publish"})
    assert [_publish(ch, q, b"m%d" % i) for i in (1, 2, 3, 4)] == ["ack", "ack", "ack", "nack"]
    assert ch.basic_get(q, auto_ack=True)[2] == b"m1"
    assert _publish(ch, q, b"m5") == "nack"   # 2 ready: still blocked
    assert ch.basic_get(q, auto_ack=True)[2] == b"m2"
    assert _publish(ch, q, b"m6") == "ack"    # 1 ready: unblocked
    assert [b for _, _, b in get_n(ch, q, 2)] == [b"m3", b"m6"]
    assert ch.basic_get(q, auto_ack=True)[0] is None


# -- CC headers -----------------------------------------------------------------------------------
@pytest.mark.parametrize("header, value, kind", [
    ("CC", "abc", "longstr"),
    ("BCC", 5, "signedint"),
])
def test_publish_with_cc_not_an_array_is_406(conn, names, header, value, kind):
    q = names.queue()
    ch = conn.channel()
    ch.queue_declare(q)
    ch.confirm_delivery()
    with channel_closed(406) as closed:
        ch.basic_publish("", q, b"x", pika.BasicProperties(headers={header: value}))
    assert closed.reply_text == (f"PRECONDITION_FAILED - invalid message: "
                                 f"{{unacceptable_type_in_header,\"{header}\",{kind}}}")
    assert conn.channel().queue_declare(q, passive=True).method.message_count == 0


@pytest.mark.parametrize("qtype", ["classic", "quorum"])
def test_dead_letter_with_original_keys_follows_cc(ch, names, qtype):
    # No x-dead-letter-routing-key: the dead letter is routed with the publish key and every
    # CC key (rabbit_dead_letter), so each queue bound with one of them gets a copy.
    dlx, src = names.exchange(), names.queue()
    qa, qb, qc = names.queue(), names.queue(), names.queue()
    ch.exchange_declare(dlx, "direct")
    for queue, key in ((qa, "ka"), (qb, "kb"), (qc, src)):
        ch.queue_declare(queue)
        ch.queue_bind(queue, dlx, key)
    args = {"x-dead-letter-exchange": dlx}
    if qtype == "quorum":
        ch.queue_declare(src, durable=True, arguments={**QQ, **args})
    else:
        ch.queue_declare(src, arguments=args)
    ch.basic_publish("", src, b"cc", pika.BasicProperties(headers={"CC": ["ka", "kb"]}))
    (m, _, _), = get_n(ch, src, 1, auto_ack=False)
    ch.basic_reject(m.delivery_tag, requeue=False)
    for queue in (qa, qb, qc):
        (dm, p, body), = get_n(ch, queue, 1)
        assert body == b"cc" and p.headers["CC"] == ["ka", "kb"]
        assert p.headers["x-death"][0]["routing-keys"] == [src, "ka", "kb"]


# -- streams (this broker has none) ---------------------------------------------------------------
@pytest.mark.ours_only  # RabbitMQ 3.10 supports streams: there this declare succeeds
def test_stream_queue_is_refused(conn, names):
    q = names.queue()
    with channel_closed(406) as closed:
        conn.channel().queue_declare(q, durable=True, arguments={"x-queue-type": "stream"})
    assert closed.reply_text == (f"PRECONDITION_FAILED - invalid arg 'x-queue-type' for {_where(q)}: "
                                 "\"unsupported queue type 'stream': streams are not supported by "
                                 "this broker\"")
