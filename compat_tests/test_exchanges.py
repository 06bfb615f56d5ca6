"""exchange.declare / delete / bind as pika sees them: types, equivalence, passive, reserved
names, if-unused, exchange-to-exchange bindings, alternate and internal exchanges."""

import pytest

from compat_tests.support import channel_closed, connection_closed, get_body, roundtrip


@pytest.mark.parametrize("kind", ["direct", "fanout", "topic", "headers"])
def test_declare_each_type(ch, names, kind):
    x = names.exchange()
    assert ch.exchange_declare(x, kind).method.NAME == "Exchange.DeclareOk"
    # Redeclaring with the same properties is a no-op.
    ch.exchange_declare(x, kind)
    ch.exchange_declare(x, passive=True)


def test_redeclare_with_other_type_is_406(conn, names):
    x = names.exchange()
    conn.channel().exchange_declare(x, "direct")
    ch = conn.channel()
    with channel_closed(406, f"PRECONDITION_FAILED - inequivalent arg 'type' for exchange '{x}' in vhost '/'"):
        ch.exchange_declare(x, "fanout")
    assert conn.is_open


def test_redeclare_with_other_durable_is_406(conn, names):
    x = names.exchange()
    conn.channel().exchange_declare(x, "direct", durable=False)
    with channel_closed(406, "PRECONDITION_FAILED - inequivalent arg 'durable'"):
        conn.channel().exchange_declare(x, "direct", durable=True)


def test_passive_declare_of_missing_exchange_is_404(conn, names):
    x = names.exchange()
    with channel_closed(404, f"NOT_FOUND - no exchange '{x}' in vhost '/'"):
        conn.channel().exchange_declare(x, passive=True)
    assert conn.is_open


@pytest.mark.parametrize("name", ["amq.direct", "amq.fanout", "amq.topic", "amq.headers", "amq.match"])
def test_builtin_exchanges_exist(ch, name):
    ch.exchange_declare(name, passive=True)


def test_declare_amq_prefixed_exchange_is_403(conn):
    with channel_closed(403, "ACCESS_REFUSED - exchange name 'amq.compat-new' contains reserved prefix 'amq.*'"):
        conn.channel().exchange_declare("amq.compat-new", "direct")


def test_delete_builtin_exchange_is_403(conn):
    with channel_closed(403, "ACCESS_REFUSED"):
        conn.channel().exchange_delete("amq.direct")


def test_delete_missing_exchange_is_ok(ch, names):
    assert ch.exchange_delete(names.exchange()).method.NAME == "Exchange.DeleteOk"


def test_delete_if_unused_with_binding_is_406(conn, names):
    ch = conn.channel()
    x, q = names.exchange(), names.queue()
    ch.exchange_declare(x, "direct")
    ch.queue_declare(q)
    ch.queue_bind(q, x, "k")
    with channel_closed(406, f"PRECONDITION_FAILED - exchange '{x}' in vhost '/' in use"):
        conn.channel().exchange_delete(x, if_unused=True)
    ch2 = conn.channel()
    ch2.queue_unbind(q, x, "k")
    ch2.exchange_delete(x, if_unused=True)
    with channel_closed(404):
        conn.channel().exchange_declare(x, passive=True)


def test_delete_exchange_removes_its_bindings(ch, names):
    x, q = names.exchange(), names.queue()
    ch.exchange_declare(x, "fanout")
    ch.queue_declare(q)
    ch.queue_bind(q, x)
    ch.exchange_delete(x)
    ch.exchange_declare(x, "fanout")
    ch.basic_publish(x, "", b"after-recreate")
    assert ch.queue_declare(q, passive=True).method.message_count == 0


def test_exchange_to_exchange_binding_routes(ch, names):
    src, dst, q = names.exchange(), names.exchange(), names.queue()
    ch.exchange_declare(src, "topic")
    ch.exchange_declare(dst, "direct")
    ch.queue_declare(q)
    ch.exchange_bind(destination=dst, source=src, routing_key="a.*")
    ch.queue_bind(q, dst, "a.b")
    ch.basic_publish(src, "a.b", b"via-e2e")
    ch.basic_publish(src, "a.c", b"not-bound-in-dst")
    ch.basic_publish(src, "b.b", b"not-matching-src")
    assert get_body(ch, q) == b"via-e2e"
    assert ch.queue_declare(q, passive=True).method.message_count == 0


def test_exchange_unbind_stops_routing(ch, names):
    src, dst, q = names.exchange(), names.exchange(), names.queue()
    ch.exchange_declare(src, "fanout")
    ch.exchange_declare(dst, "fanout")
    ch.queue_declare(q)
    ch.queue_bind(q, dst)
    ch.exchange_bind(dst, src)
    ch.exchange_unbind(dst, src)
    ch.basic_publish(src, "", b"x")
    roundtrip(ch)
    assert ch.queue_declare(q, passive=True).method.message_count == 0


def test_exchange_bind_to_missing_source_is_404(conn, names):
    ch = conn.channel()
    dst = names.exchange()
    ch.exchange_declare(dst, "fanout")
    with channel_closed(404, "NOT_FOUND - no exchange"):
        ch.exchange_bind(dst, names.exchange())


def test_alternate_exchange_gets_unroutable(ch, names):
    main, alt, q_alt = names.exchange(), names.exchange(), names.queue()
    ch.exchange_declare(alt, "fanout")
    ch.queue_declare(q_alt)
    ch.queue_bind(q_alt, alt)
    ch.exchange_declare(main, "direct", arguments={"alternate-exchange": alt})
    ch.basic_publish(main, "nobody-bound", b"to-ae")
    assert get_body(ch, q_alt) == b"to-ae"


def test_alternate_exchange_with_mandatory_is_not_returned(conn, names):
    ch = conn.channel()
    main, alt, q_alt = names.exchange(), names.exchange(), names.queue()
    ch.exchange_declare(alt, "fanout")
    ch.queue_declare(q_alt)
    ch.queue_bind(q_alt, alt)
    ch.exchange_declare(main, "direct", arguments={"alternate-exchange": alt})
    ch.confirm_delivery()
    # Routed through the AE counts as routed: no basic.return, so no UnroutableError.
    ch.basic_publish(main, "nobody-bound", b"m", mandatory=True)
    assert get_body(ch, q_alt) == b"m"


def test_internal_exchange_publish_is_403(conn, names):
    ch = conn.channel()
    x = names.exchange()
    ch.exchange_declare(x, "fanout", internal=True)
    ch.basic_publish(x, "", b"x")
    with channel_closed(403, f"ACCESS_REFUSED - cannot publish to internal exchange '{x}' in vhost '/'"):
        roundtrip(ch)


def test_internal_exchange_reachable_through_e2e(ch, names):
    front, inner, q = names.exchange(), names.exchange(), names.queue()
    ch.exchange_declare(inner, "fanout", internal=True)
    ch.exchange_declare(front, "fanout")
    ch.queue_declare(q)
    ch.queue_bind(q, inner)
    ch.exchange_bind(inner, front)
    ch.basic_publish(front, "", b"through")
    assert get_body(ch, q) == b"through"


def test_unknown_exchange_type_rabbitmq3_is_503_connection(conn, names, server_info):
    if not server_info.is_rabbitmq3:
        pytest.skip("RabbitMQ 3.x closes the connection; 4.x closes the channel (see next test)")
    with connection_closed(503, "COMMAND_INVALID - unknown exchange type 'x-compat-bogus'"):
        conn.channel().exchange_declare(names.exchange(), "x-compat-bogus")


@pytest.mark.rabbitmq4
def test_unknown_exchange_type_rabbitmq4_is_406_channel(conn, names):
    with channel_closed(406):
        conn.channel().exchange_declare(names.exchange(), "x-compat-bogus")
    assert conn.is_open


def test_default_exchange_routes_by_queue_name(ch, names):
    q = names.queue()
    ch.queue_declare(q)
    ch.basic_publish("", q, b"default")
    assert get_body(ch, q) == b"default"


def test_default_exchange_cannot_be_bound(conn, names):
    ch = conn.channel()
    q = names.queue()
    ch.queue_declare(q)
    with channel_closed(403, "ACCESS_REFUSED - operation not permitted on the default exchange"):
        ch.queue_bind(q, "", "k")


@pytest.mark.parametrize("second,arg", [
    ({"arguments": {"alternate-exchange": "ae-2"}}, "alternate-exchange"),
    ({}, "alternate-exchange"),
    ({"arguments": {"alternate-exchange": "ae-1"}, "auto_delete": True}, "auto_delete"),
    ({"arguments": {"alternate-exchange": "ae-1"}, "internal": True}, "internal"),
])
def test_redeclare_exchange_inequivalent_args_is_406(conn, names, second, arg):
    x = names.exchange()
    conn.channel().exchange_declare(x, "direct", arguments={"alternate-exchange": "ae-1"})
    with channel_closed(406, f"PRECONDITION_FAILED - inequivalent arg '{arg}' for exchange '{x}' in vhost '/'"):
        conn.channel().exchange_declare(x, "direct", **second)


def test_auto_delete_exchange_deleted_after_last_unbind(conn, names):
    ch = conn.channel()
    x, q = names.exchange(), names.queue()
    ch.exchange_declare(x, "fanout", auto_delete=True)
    ch.queue_declare(q)
    ch.queue_bind(q, x)
    ch.queue_unbind(q, x)
    with channel_closed(404):
        conn.channel().exchange_declare(x, passive=True)


def test_auto_delete_exchange_never_bound_survives(conn, names):
    x = names.exchange()
    conn.channel().exchange_declare(x, "fanout", auto_delete=True)
    conn.channel().exchange_declare(x, passive=True)


def test_auto_delete_exchange_deleted_with_its_last_queue(conn, names):
    ch = conn.channel()
    x, q = names.exchange(), names.queue()
    ch.exchange_declare(x, "fanout", auto_delete=True)
    ch.queue_declare(q)
    ch.queue_bind(q, x)
    ch.queue_delete(q)
    with channel_closed(404):
        conn.channel().exchange_declare(x, passive=True)
