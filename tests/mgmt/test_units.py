"""Pure helpers of the management API: message property and payload conversion, binding
properties keys, routing of paths to handlers."""

from __future__ import annotations

import pytest

from amqp_broker.mgmt.errors import BadRequest, NotFoundError
from amqp_broker.mgmt.messages import (
    jsonable,
    payload_from_json,
    payload_to_json,
    properties_from_json,
    properties_to_json,
)
from amqp_broker.mgmt.routes import Req, dispatch, needs_admin
from amqp_broker.mgmt.rows import properties_key


def test_properties_round_trip():
    props = {"content_type": "application/json", "headers": {"a": 1, "b": "x"}, "delivery_mode": 2,
             "priority": 3, "correlation_id": "c", "reply_to": "r", "expiration": "1000",
             "message_id": "m", "timestamp": 1700000000, "type": "t", "user_id": "guest",
             "app_id": "app"}
    assert properties_to_json(properties_from_json(props)) == props


def test_unknown_property_is_bad_request():
    with pytest.raises(BadRequest):
        properties_from_json({"nope": 1})
    with pytest.raises(BadRequest):
        properties_from_json([1])


def test_payloads():
    assert payload_from_json("aGk=", "base64") == b"hi"
    assert payload_from_json("hi", "string") == b"hi"
    with pytest.raises(BadRequest):
        payload_from_json("***", "base64")
    with pytest.raises(BadRequest):
        payload_from_json("x", "rot13")
    assert payload_to_json(b"hello", "auto", None) == ("hello", "string")
    assert payload_to_json(b"\xff\x00", "auto", None) == ("/wA=", "base64")
    assert payload_to_json(b"hello", "base64", 2) == ("aGU=", "base64")


def test_jsonable_field_values():
    import datetime
    import decimal

    assert jsonable({"a": b"x", "b": [decimal.Decimal("1.5")],
                     "c": datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc)}) == {
        "a": "x", "b": [1.5], "c": 1577836800}


@pytest.mark.parametrize("key,args,want", [
    ("", {}, "~"), ("a.#", {}, "a.%23"), ("a/b", {}, "a%2Fb"), ("plain", {}, "plain")])
def test_properties_key(key, args, want):
    assert properties_key(key, args) == want


def test_properties_key_with_arguments_differs_by_arguments():
    a = properties_key("k", {"x-match": "all"})
    b = properties_key("k", {"x-match": "any"})
    assert a.startswith("k~") and b.startswith("k~") and a != b


def test_admin_only_paths():
    assert needs_admin(Req("GET", ["users"]))
    assert needs_admin(Req("GET", ["definitions"]))
    assert needs_admin(Req("PUT", ["vhosts", "v"]))
    assert not needs_admin(Req("GET", ["vhosts"]))
    assert not needs_admin(Req("GET", ["queues"]))


def test_unknown_paths_are_not_found():
    with pytest.raises(NotFoundError):
        dispatch(object(), Req("GET", ["nope"]))
    with pytest.raises(NotFoundError):
        dispatch(object(), Req("PATCH", ["overview"]))


def test_http_listener_from_broker_settings_or_plain_settings():
    from amqp_broker.config import BrokerSettings, HttpListener
    from amqp_broker.mgmt.http import http_listener
    from amqp_broker.settings import Settings

    s = BrokerSettings(management=HttpListener("127.0.0.2", 1234))
    assert http_listener(s, "management", 15672) == ("127.0.0.2", 1234)
    assert http_listener(s, "prometheus", 15692) == ("0.0.0.0", 15692)
    assert http_listener(Settings(host="127.0.0.1"), "management", 15672) == ("127.0.0.1", 15672)


def test_queue_row_lists_members_when_the_queue_is_replicated():
    from types import SimpleNamespace

    from amqp_broker.mgmt.rows import queue_row
    from amqp_broker.queues import Placement

    where = Placement("b@h", ("a@h", "b@h"), ("b@h",), replicated=True)
    q = SimpleNamespace(message_count=1, unacked_count=2, message_bytes=3, active_consumer=None,
                        placement=lambda node: where)
    rt = SimpleNamespace(queue=q, name="qq", vhost=SimpleNamespace(name="/"), durable=True,
                         auto_delete=False, exclusive=False, arguments={"x-queue-type": "quorum"},
                         queue_type="quorum", consumer_count=0)
    row = queue_row(rt, "a@h", None, {})
    assert row["messages"] == 3 and row["type"] == "quorum"
    # the queue's home is its leader, wherever the listing node is
    assert row["node"] == "b@h"
    assert (row["leader"], row["members"], row["online"]) == ("b@h", ["a@h", "b@h"], ["b@h"])
    # a classic queue reports the node it lives on, and no membership
    where = Placement("a@h", ("a@h",), ("a@h",))
    rt.queue_type = "classic"
    row = queue_row(rt, "a@h", None, {})
    assert row["node"] == "a@h" and "members" not in row and "leader" not in row


def test_http_listener_from_port_attributes():
    from types import SimpleNamespace

    from amqp_broker.mgmt.http import http_listener

    s = SimpleNamespace(host="h", management_host="m", management_port=0, prometheus_port=9)
    assert http_listener(s, "management", 15672) == ("m", 0)
    assert http_listener(s, "prometheus", 15692) == ("h", 9)


def test_channel_row_reads_only_the_public_channel_api():
    from types import SimpleNamespace

    from amqp_broker.mgmt.rows import channel_row, consumer_rows

    class _Ch:
        __slots__ = ("number", "consumers")  # no private attributes to lean on

        def __init__(self):
            self.number, self.consumers = 3, {}

        def statistics(self):
            return {"number": 3, "consumer_count": 0, "messages_unacknowledged": 2,
                    "prefetch_count": 5, "global_prefetch_count": 0, "messages_uncommitted": 0,
                    "confirm": True, "transactional": False}

    session = SimpleNamespace(user="guest", vhost=SimpleNamespace(name="/"), name="c",
                              peer=("127.0.0.1", 5000))
    row = channel_row(session, _Ch(), "node")
    assert (row["number"], row["prefetch_count"], row["messages_unacknowledged"]) == (3, 5, 2)
    assert row["confirm"] is True and consumer_rows(session, _Ch(), "node") == []


def test_paging_sorts_like_erlang_terms_and_validates():
    from amqp_broker.mgmt.paging import PagingError, paginate

    rows = [{"vhost": "/", "name": "b", "n": "x"}, {"vhost": "/", "name": "a", "n": 2},
            {"vhost": "/", "name": "c"}, {"vhost": "/", "name": "d", "n": None}]
    # numbers (a missing value counts as 0) < atoms (null) < strings
    assert [r["name"] for r in paginate(rows, {"sort": "n"})] == ["c", "a", "d", "b"]
    assert [r["name"] for r in paginate(rows, {"sort_reverse": "true"})] == ["d", "c", "b", "a"]
    page = paginate(rows, {"page": "+2", "page_size": "3"})
    assert [r["name"] for r in page["items"]] == ["d"] and page["page_count"] == 2
    for query in ({"page": "1.5"}, {"page": " 1"}, {"page": "1", "page_size": "1e2"}):
        try:
            paginate(rows, query)
        except PagingError as e:
            assert (e.status, e.error, e.reason) == (400, "bad_request", "Pagination parameters are invalid")
        else:
            raise AssertionError(f"{query} accepted")
