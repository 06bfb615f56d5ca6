"""Exact replies RabbitMQ 3.10 gives to client mistakes that real client libraries make (wrong
password, unknown delivery tags, bad expiration) and the heartbeats a short negotiated interval
must produce.  Raw sockets, so the reply code, text and class/method ids are checked as sent.
See /work/shared/PROTOCOL-ERRORS.md."""

import time
from urllib.parse import urlparse, urlunparse

import pytest
from pamqp import commands, frame, heartbeat

from compat_tests.support.raw import RawClient


def _with_password(url: str, password: str) -> str:
    u = urlparse(url)
    return urlunparse(u._replace(netloc=f"{u.username}:{password}@{u.hostname}:{u.port}"))


def test_wrong_password_closes_403_with_ids_0_0(broker_url):
    with RawClient(_with_password(broker_url, "not-the-password")) as raw:
        reply = raw.handshake()
        assert reply is not None and reply.name == "Connection.Close", reply
        assert (reply.reply_code, reply.class_id, reply.method_id) == (403, 0, 0)
        assert reply.reply_text == ("ACCESS_REFUSED - Login was refused using authentication "
                                    "mechanism PLAIN. For details see the broker logfile.")


def test_unknown_user_gets_the_same_close_as_a_wrong_password(broker_url):
    """No user enumeration: the answer does not say which of the two was wrong."""
    replies = []
    for url in (_with_password(broker_url, "not-the-password"),
                broker_url.replace("guest:guest@", "no-such-user-3f9a:guest@", 1)):
        with RawClient(url) as raw:
            reply = raw.handshake()
            replies.append((reply.name, reply.reply_code, reply.class_id, reply.method_id,
                            reply.reply_text))
    assert replies[0] == replies[1]
    assert replies[0][1] == 403


@pytest.mark.parametrize("method,ids", [
    (commands.Basic.Ack(delivery_tag=42), (60, 80)),
    (commands.Basic.Nack(delivery_tag=42), (60, 120)),
    (commands.Basic.Nack(delivery_tag=42, multiple=True), (60, 120)),
    (commands.Basic.Reject(delivery_tag=42), (60, 90)),
], ids=["ack", "nack", "nack-multiple", "reject"])
def test_unknown_delivery_tag_names_the_method_sent(broker_url, method, ids):
    with RawClient(broker_url) as raw:
        raw.handshake()
        raw.open_channel(1)
        raw.send(1, method)
        reply = raw.read_method(commands.Channel.Close)
        assert (reply.reply_code, reply.class_id, reply.method_id) == (406, *ids)
        assert reply.reply_text == "PRECONDITION_FAILED - unknown delivery tag 42"


def test_a_burst_of_acks_counts_up_to_an_unknown_tag_and_no_further(broker_url, names):
    """Acks sent in one write are taken in order: those before an unknown tag settle their
    messages, the channel closes there, and acks after it are not taken (their messages
    come back, redelivered)."""
    q = names.queue()
    with RawClient(broker_url) as raw:
        raw.handshake()
        raw.open_channel(1)
        raw.send(1, commands.Queue.Declare(queue=q, exclusive=True))
        raw.read_method(commands.Queue.DeclareOk)
        for i in range(4):
            raw.publish(1, "", q, b"m%d" % i)
        raw.send(1, commands.Basic.Consume(queue=q, consumer_tag="c"))
        raw.read_method(commands.Basic.ConsumeOk)
        tags = []
        for _ in range(4):
            tags.append(raw.read_method(commands.Basic.Deliver).delivery_tag)
            raw.read_frame()  # content header
            raw.read_frame()  # body
        assert tags == [1, 2, 3, 4]
        raw.send_raw(b"".join(frame.marshal(commands.Basic.Ack(delivery_tag=t), 1)
                              for t in (1, 2, 42, 3)))
        reply = raw.read_method(commands.Channel.Close)
        assert (reply.reply_code, reply.class_id, reply.method_id) == (406, 60, 80)
        assert reply.reply_text == "PRECONDITION_FAILED - unknown delivery tag 42"
        raw.send(1, commands.Channel.CloseOk())
        raw.open_channel(2)
        left = []
        while True:
            raw.send(2, commands.Basic.Get(queue=q, no_ack=True))
            got = raw.read_method()
            if isinstance(got, commands.Basic.GetEmpty):
                break
            assert isinstance(got, commands.Basic.GetOk), got
            raw.read_frame()  # content header
            left.append((got.redelivered, raw.read_frame()[1].value))
        assert left == [(True, b"m2"), (True, b"m3")]


@pytest.mark.parametrize("expiration,reason", [
    ("-1", "{value_negative,-1}"),
    ("abc", "no_integer"),
    ("1.5", '{leftover_string,".5"}'),
    ("315360000001", "{value_too_large,315360000001}"),  # over ten years
])
def test_invalid_expiration_text(broker_url, expiration, reason):
    with RawClient(broker_url) as raw:
        raw.handshake()
        raw.open_channel(1)
        raw.publish(1, "", "compat.nowhere", b"x",
                    properties=commands.Basic.Properties(expiration=expiration))
        reply = raw.read_method(commands.Channel.Close)
        assert (reply.reply_code, reply.class_id, reply.method_id) == (406, 60, 40)
        assert reply.reply_text == (
            f"PRECONDITION_FAILED - invalid expiration '{expiration}': {reason}")


@pytest.mark.parametrize("interval", [1, 2])
def test_short_heartbeat_is_sent_at_least_every_interval(broker_url, interval):
    # A client that counts the server's heartbeats (and drops the connection after one silent
    # interval) must see one within every negotiated interval, from tune-ok on.
    with RawClient(broker_url) as raw:
        assert raw.handshake(tune_ok={"heartbeat": interval}).name == "Connection.OpenOk"
        start = last = time.monotonic()
        beats, worst = 0, 0.0
        raw.sock.settimeout(0.2)
        while time.monotonic() - start < 3 * interval + 0.5:
            raw.send(0, heartbeat.Heartbeat())  # keep our side alive
            try:
                got = raw.read_frame()
            except TimeoutError:
                continue
            assert got is not None, "server closed the connection"
            if got[1].name == "Heartbeat":
                now = time.monotonic()
                worst = max(worst, now - last)
                last, beats = now, beats + 1
        worst = max(worst, time.monotonic() - last)
        assert beats >= 3, beats
        assert worst <= interval + 0.25, (beats, worst)


@pytest.mark.parametrize("expiration,kept", [("+60000", True), ("315360000000", True), ("-0", False),
                                             ("", None)])
def test_expirations_rabbitmq_accepts(conn, names, expiration, kept):
    # string:to_integer takes a sign ("+60000" is 60 s, "-0" is a TTL of 0: gone as soon as it
    # is found with no consumer); ten years is the longest TTL accepted; "" is no integer.
    import pika

    from compat_tests.support import wait_until

    q = names.queue()
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare(q)
    if kept is None:  # pika sends the expiration flag with an empty string
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
            ch.basic_publish("", q, b"x", pika.BasicProperties(expiration=expiration))
        assert info.value.reply_text == "PRECONDITION_FAILED - invalid expiration '': no_integer"
        return
    ch.basic_publish("", q, b"x", pika.BasicProperties(expiration=expiration))
    if kept:
        method, _props, _body = ch.basic_get(q, auto_ack=True)
        assert method is not None
    else:
        assert wait_until(conn, lambda: ch.queue_declare(q, passive=True).method.message_count == 0)
