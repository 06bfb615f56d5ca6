"""configure / write / read permissions checked per resource (PROTOCOL-ERRORS.md rows 32-35): a
user limited to names under one prefix, through pika, gets RabbitMQ's 403 channel errors naming
the refused resource (3.10's texts, which this broker sends whatever its compat profile; 4.x
names the permission).  The user is made over the management API (`restricted_conn`).  The extra
checks of a dead-letter exchange are in test_dead_letter_policies.py.

Passive declares are where we differ on purpose (PROTOCOL-ERRORS.md row 35): RabbitMQ 3.x checks
no permission (a missing name is 404, an existing one answers), we follow RabbitMQ 4.3.1+ (at
least one permission on the name, else 403); the test says which it expects from which server.
"""

from __future__ import annotations

import pika
import pika.exceptions


def _attempt(conn: pika.BlockingConnection, action) -> tuple[int, str]:
    """Run `action(channel)` on a fresh channel; (200, "ok") or the channel.close it caused."""
    ch = conn.channel()
    try:
        action(ch)
        ch.basic_qos(prefetch_count=0)  # a round trip checking no resource: a close arrives first
        return 200, "ok"
    except pika.exceptions.ChannelClosedByBroker as err:
        return err.reply_code, err.reply_text


def test_each_operation_needs_its_permission_on_each_resource(restricted_conn, names):
    prefix = names.queue() + "."
    user, conn = restricted_conn(prefix)
    own, other = names.track_queue(prefix + "q"), names.queue()
    own_x, other_ae = names.track_exchange(prefix + "x"), names.exchange()

    def refused(kind: str, name: str) -> tuple[int, str]:
        return 403, f"ACCESS_REFUSED - access to {kind} '{name}' in vhost '/' refused for user '{user}'"

    # configure on the queue
    assert _attempt(conn, lambda ch: ch.queue_declare(own)) == (200, "ok")
    assert _attempt(conn, lambda ch: ch.queue_declare(other)) == refused("queue", other)
    # write on the exchange published to: the default exchange is checked as "amq.default"
    assert _attempt(conn, lambda ch: ch.basic_publish("", own, b"x")) == refused("exchange", "amq.default")
    # queue.bind: write on the queue and read on the exchange
    assert _attempt(conn, lambda ch: ch.queue_bind(own, "amq.direct", "k")) == refused("exchange", "amq.direct")
    # exchange.declare with an alternate exchange: write on the alternate exchange
    declare_with_ae = lambda ch: ch.exchange_declare(own_x, arguments={"alternate-exchange": other_ae})
    assert _attempt(conn, declare_with_ae) == refused("exchange", other_ae)
    # the refused operations changed nothing, and the user still reads its own queue
    assert _attempt(conn, lambda ch: ch.queue_declare(own, passive=True)) == (200, "ok")


def test_passive_declare_without_permission(restricted_conn, names, conn, server_info):
    prefix = names.queue() + "."
    user, limited = restricted_conn(prefix)
    existing, missing = names.queue(), names.queue()
    conn.channel().queue_declare(existing)

    def refused(kind: str, name: str) -> tuple[int, str]:
        return 403, f"ACCESS_REFUSED - access to {kind} '{name}' in vhost '/' refused for user '{user}'"

    got = [_attempt(limited, lambda ch: ch.queue_declare(missing, passive=True)),
           _attempt(limited, lambda ch: ch.queue_declare(existing, passive=True)),
           _attempt(limited, lambda ch: ch.exchange_declare("amq.direct", passive=True))]
    if server_info.is_rabbitmq3:  # no check at all: existence leaks
        assert got == [(404, f"NOT_FOUND - no queue '{missing}' in vhost '/'"), (200, "ok"), (200, "ok")]
    else:  # the 4.3.1+ rule
        assert got == [refused("queue", missing), refused("queue", existing),
                       refused("exchange", "amq.direct")]
