"""The one dead-letter republish path (`amqp_broker.server.deadletter`): the copy and its targets.

Shared by at-most-once (`route_dead_letters`) and the at-least-once worker's port
(`server.dlx_port.BrokerDlxPort`); real Topology, real property codec, no broker process.
"""

from __future__ import annotations

from pamqp.commands import Basic

from amqp_broker.core.bindings import Dest
from amqp_broker.core.router import Topology
from amqp_broker.protocol.properties import decode_properties, encode_properties
from amqp_broker.queues import Message
from amqp_broker.server.deadletter import find_targets, prepare_copy


def _message(headers=None, expiration=None) -> Message:
    props = encode_properties(Basic.Properties(headers=headers, expiration=expiration))
    return Message.from_publish("ex", "rk", props, b"body")


def _topology(*queues: str) -> Topology:
    t = Topology("/")
    t.declare_exchange("dlx", "direct", internal=True)
    for q in queues:
        t.add_queue(q)
    return t


def test_copy_records_the_death_and_drops_expiration():
    copy = prepare_copy(_message(expiration="5000"), reason="expired", queue="src", dlx="dlx",
                        dlx_routing_key="dead", now_ms=1_700_000_000_000)
    props = decode_properties(copy.message.properties)
    (death,) = props.headers["x-death"]
    assert (death["queue"], death["reason"], death["original-expiration"]) == (
        "src", "expired", "5000")
    assert props.expiration is None and copy.message.expiration_ms is None
    assert (copy.message.exchange, copy.message.routing_key) == ("dlx", "dead")
    assert copy.routing_keys == ["dead"] and copy.message.body == b"body"


def test_targets_on_an_internal_dlx_each_once_with_cc_keys():
    t = _topology("a", "b")
    t.bind("dlx", Dest.queue("a"), "rk")
    t.bind("dlx", Dest.queue("a"), "cc1")
    t.bind("dlx", Dest.queue("b"), "cc1")
    copy = prepare_copy(_message(headers={"CC": ["cc1"]}), reason="rejected", queue="src",
                        dlx="dlx", dlx_routing_key=None, now_ms=0)
    assert copy.routing_keys == ["rk", "cc1"]
    assert "CC" not in copy.match_headers
    assert find_targets(t, copy) == (["a", "b"], [])


def test_an_automatic_loop_back_to_the_source_is_dropped():
    t = _topology("src", "other")
    t.bind("dlx", Dest.queue("src"), "dead")
    t.bind("dlx", Dest.queue("other"), "dead")
    copy = prepare_copy(_message(), reason="expired", queue="src", dlx="dlx",
                        dlx_routing_key="dead", now_ms=0)
    assert find_targets(t, copy) == (["other"], ["src"])
    rejected = prepare_copy(_message(), reason="rejected", queue="src", dlx="dlx",
                            dlx_routing_key="dead", now_ms=0)
    assert find_targets(t, rejected) == (["src", "other"], [])
