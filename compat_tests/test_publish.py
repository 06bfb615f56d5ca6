"""Publishing paths with client-visible outcomes: publisher confirms and basic.return ordering,
transactions, mode switching (406), missing exchange (404), immediate (540), user_id checks,
message size, and direct reply-to RPC."""

import struct

import pika
import pika.exceptions
import pytest
from pamqp import commands

from compat_tests.support import (
    channel_closed,
    get_n,
    roundtrip,
    wait_until,
)
from compat_tests.support.raw import RawClient


def _ready(conn, q) -> int:
    return conn.channel().queue_declare(q, passive=True).method.message_count


# -- confirms -----------------------------------------------------------------------------------

def test_confirm_select_is_idempotent(broker_url):
    # pika refuses a second confirm_delivery itself, so this goes over a raw socket.
    with RawClient(broker_url) as raw:
        raw.handshake()
        raw.open_channel(1)
        for _ in range(2):
            raw.send(1, commands.Confirm.Select())
            raw.read_method(commands.Confirm.SelectOk)
        raw.publish(1, "amq.direct", "nobody", b"x")
        ack = raw.read_method(commands.Basic.Ack)
        assert ack.delivery_tag == 1


def test_mandatory_unroutable_returns_before_ack_raw(broker_url, names):
    x = names.exchange()
    with RawClient(broker_url) as raw:
        raw.handshake()
        raw.open_channel(1)
        raw.send(1, commands.Exchange.Declare(exchange=x, exchange_type="direct"))
        raw.read_method(commands.Exchange.DeclareOk)
        raw.send(1, commands.Confirm.Select())
        raw.read_method(commands.Confirm.SelectOk)
        raw.publish(1, x, "nobody", b"bounce", mandatory=True)
        ret = raw.read_method(commands.Basic.Return)
        assert (ret.reply_code, ret.reply_text, ret.exchange, ret.routing_key) == (312, "NO_ROUTE", x, "nobody")
        assert raw.read_method().body_size == 6            # content header
        assert raw.read_method().value == b"bounce"         # body
        ack = raw.read_method(commands.Basic.Ack)
        assert (ack.delivery_tag, ack.multiple) == (1, False)


def test_mandatory_unroutable_pika_raises_unroutable(ch, names):
    ch.confirm_delivery()
    with pytest.raises(pika.exceptions.UnroutableError) as info:
        ch.basic_publish("amq.direct", names.queue(), b"bounce", mandatory=True)
    (returned,) = info.value.messages
    assert returned.method.reply_code == 312 and returned.body == b"bounce"
    assert ch.is_open


def test_mandatory_unroutable_without_confirms_calls_return_callback(conn, names):
    ch = conn.channel()
    returned = []
    ch.add_on_return_callback(lambda c, m, p, b: returned.append((m.reply_code, m.reply_text, b)))
    ch.basic_publish("amq.direct", names.queue(), b"r", mandatory=True)
    assert wait_until(conn, lambda: returned == [(312, "NO_ROUTE", b"r")])


def test_mandatory_routed_is_not_returned(ch, names):
    q = names.queue()
    ch.queue_declare(q)
    ch.confirm_delivery()
    ch.basic_publish("", q, b"fine", mandatory=True)
    assert _ready(ch.connection, q) == 1


def test_confirm_sequence_numbers_per_channel(broker_url, names):
    q = names.queue()
    with RawClient(broker_url) as raw:
        raw.handshake()
        for chan in (1, 2):
            raw.open_channel(chan)
            raw.send(chan, commands.Confirm.Select())
            raw.read_method(commands.Confirm.SelectOk)
        raw.send(1, commands.Queue.Declare(queue=q))
        raw.read_method(commands.Queue.DeclareOk)
        acked = {1: set(), 2: set()}
        for i in range(3):
            raw.publish(1, "", q, b"a")
        raw.publish(2, "", q, b"b")
        while len(acked[1]) < 3 or len(acked[2]) < 1:
            got = raw.read_frame()
            assert got is not None
            chan, ack = got
            assert ack.name == "Basic.Ack"
            top = ack.delivery_tag
            acked[chan].update(range(1, top + 1) if ack.multiple else {top})
        assert acked == {1: {1, 2, 3}, 2: {1}}


# -- transactions -------------------------------------------------------------------------------

def test_tx_commit_makes_publishes_visible(conn, names):
    q = names.queue()
    ch = conn.channel()
    ch.queue_declare(q)
    ch.tx_select()
    ch.basic_publish("", q, b"t1")
    ch.basic_publish("", q, b"t2")
    assert _ready(conn, q) == 0
    ch.tx_commit()
    assert _ready(conn, q) == 2


def test_tx_rollback_discards_publishes(conn, names):
    q = names.queue()
    ch = conn.channel()
    ch.queue_declare(q)
    ch.tx_select()
    ch.basic_publish("", q, b"gone")
    ch.tx_rollback()
    ch.tx_commit()
    assert _ready(conn, q) == 0


def test_tx_acks_apply_on_commit(conn, names):
    q = names.queue()
    ch = conn.channel()
    ch.queue_declare(q)
    ch.basic_publish("", q, b"x")
    ch.tx_select()
    (m, _, _), = get_n(ch, q, 1, auto_ack=False)
    ch.basic_ack(m.delivery_tag)
    ch.tx_rollback()   # the ack is forgotten, the message stays unacked on the channel
    ch.basic_ack(m.delivery_tag)
    ch.tx_commit()
    ch.close()
    assert _ready(conn, q) == 0


def test_tx_commit_without_select_is_406(conn):
    with channel_closed(406, "PRECONDITION_FAILED - channel is not transactional"):
        conn.channel().tx_commit()


def test_tx_rollback_without_select_is_406(conn):
    with channel_closed(406, "PRECONDITION_FAILED - channel is not transactional"):
        conn.channel().tx_rollback()


def test_confirm_after_tx_is_406(conn):
    ch = conn.channel()
    ch.tx_select()
    with channel_closed(406, "PRECONDITION_FAILED - cannot switch from tx to confirm mode"):
        ch.confirm_delivery()


def test_tx_after_confirm_is_406(conn):
    ch = conn.channel()
    ch.confirm_delivery()
    with channel_closed(406, "PRECONDITION_FAILED - cannot switch from confirm to tx mode"):
        ch.tx_select()


# -- errors -------------------------------------------------------------------------------------

def test_publish_to_missing_exchange_is_404_channel(conn, names):
    ch = conn.channel()
    x = names.exchange()
    ch.basic_publish(x, "k", b"x")  # no reply to a publish: the close arrives asynchronously
    with channel_closed(404, f"NOT_FOUND - no exchange '{x}' in vhost '/'"):
        roundtrip(ch)
    assert conn.is_open
    conn.channel().queue_declare("", exclusive=True)


def test_publish_to_missing_exchange_with_confirms_raises(conn, names):
    ch = conn.channel()
    ch.confirm_delivery()
    with channel_closed(404, "NOT_FOUND - no exchange"):
        ch.basic_publish(names.exchange(), "k", b"x")


def test_publish_immediate_is_540(broker_url):
    with RawClient(broker_url) as raw:
        raw.handshake()
        raw.open_channel(1)
        raw.publish(1, "", "anything", b"now", immediate=True)
        reply = raw.read_method()
        assert reply.name == "Connection.Close"
        assert (reply.reply_code, reply.reply_text) == (540, "NOT_IMPLEMENTED - immediate=true")
        assert (reply.class_id, reply.method_id) == (60, 40)


def test_user_id_mismatch_is_406(conn, names):
    ch = conn.channel()
    ch.confirm_delivery()
    with channel_closed(406, "PRECONDITION_FAILED - user_id property set to 'someone-else' "
                             "but authenticated user was 'guest'"):
        ch.basic_publish("amq.direct", "k", b"x", pika.BasicProperties(user_id="someone-else"))


def test_user_id_that_is_not_utf8_is_406_not_an_internal_error(broker_url):
    # found by tests/hardening/test_fuzz_live.py: the broker raised decoding it
    with RawClient(broker_url) as raw:
        raw.handshake()
        raw.open_channel(1)
        raw.send(1, commands.Basic.Publish(exchange="amq.direct", routing_key="k"))
        user_id = b"\xe6\x00x"  # pamqp encodes only str: the content header by hand
        props = struct.pack(">H", 0x0010) + bytes([len(user_id)]) + user_id  # user_id flag
        payload = struct.pack(">HHQ", 60, 0, 1) + props
        raw.send_raw(struct.pack(">BHI", 2, 1, len(payload)) + payload + b"\xce")
        raw.send_raw(struct.pack(">BHI", 3, 1, 1) + b"x\xce")
        # read undecoded: RabbitMQ echoes the raw bytes in reply_text, which pamqp refuses
        kind, channel, payload = raw.read_raw_frame()
        assert (kind, channel) == (1, 1)
        assert struct.unpack_from(">HHH", payload, 0) == (20, 40, 406)  # channel.close 406
        text_len = payload[6]
        assert payload[7:7 + text_len].startswith(b"PRECONDITION_FAILED")
        assert struct.unpack_from(">HH", payload, 7 + text_len) == (60, 40)


def test_user_id_matching_is_delivered(ch, names):
    q = names.queue()
    ch.queue_declare(q)
    ch.basic_publish("", q, b"x", pika.BasicProperties(user_id="guest"))
    (_, props, _), = get_n(ch, q, 1)
    assert props.user_id == "guest"


@pytest.mark.rabbitmq4
def test_message_over_max_message_size_is_406(conn, names):
    # 4.x default max_message_size is 16 MiB (3.10: 128 MiB, too big to test cheaply).
    ch = conn.channel()
    ch.confirm_delivery()
    body = b"\0" * (16 * 1024 * 1024 + 1)
    with channel_closed(406, "PRECONDITION_FAILED - message size 16777217 is larger than configured max size 16777216"):
        ch.basic_publish("amq.direct", "k", body)


def test_message_of_1mib_is_accepted(ch, names):
    q = names.queue()
    ch.queue_declare(q)
    ch.confirm_delivery()
    ch.basic_publish("", q, b"x" * (1 << 20))
    assert len(get_n(ch, q, 1)[0][2]) == 1 << 20


# -- direct reply-to ----------------------------------------------------------------------------

def test_direct_reply_to_rpc(pika_connect, names):
    server_conn, client_conn = pika_connect(), pika_connect()
    server, client = server_conn.channel(), client_conn.channel()
    q = names.queue()
    server.queue_declare(q)
    seen_reply_to = []

    def serve(c, method, props, body):
        seen_reply_to.append(props.reply_to)
        c.basic_publish("", props.reply_to, body.upper(),
                        pika.BasicProperties(correlation_id=props.correlation_id))
        c.basic_ack(method.delivery_tag)

    server.basic_consume(q, serve)
    replies = []
    client.basic_consume("amq.rabbitmq.reply-to",
                         lambda c, m, p, b: replies.append((p.correlation_id, b)), auto_ack=True)
    client.basic_publish("", q, b"ping", pika.BasicProperties(reply_to="amq.rabbitmq.reply-to",
                                                            correlation_id="c-1"))
    assert wait_until(server_conn, lambda: seen_reply_to != [])
    assert seen_reply_to[0].startswith("amq.rabbitmq.reply-to.")
    assert wait_until(client_conn, lambda: replies == [("c-1", b"PING")])


def test_direct_reply_to_requires_no_ack(conn):
    with channel_closed(406, "PRECONDITION_FAILED - reply consumer cannot acknowledge"):
        conn.channel().basic_consume("amq.rabbitmq.reply-to", lambda *a: None, auto_ack=False)


def test_direct_reply_to_publish_without_consumer_is_406(conn, names):
    ch = conn.channel()
    ch.confirm_delivery()
    with channel_closed(406, "PRECONDITION_FAILED - fast reply consumer does not exist"):
        ch.basic_publish("", names.queue(), b"x",
                         pika.BasicProperties(reply_to="amq.rabbitmq.reply-to"))


def test_direct_reply_to_passive_declare_is_ok(ch):
    ok = ch.queue_declare("amq.rabbitmq.reply-to", passive=True).method
    assert ok.queue == "amq.rabbitmq.reply-to"
