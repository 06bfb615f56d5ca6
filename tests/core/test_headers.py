"""Headers exchange: x-match modes, x- keys, void presence, value equality, validation."""

import datetime
from decimal import Decimal

import pytest

from amqp_broker.core import Dest, PreconditionFailed, headers_match, make_exchange

CASES = [
    # binding arguments, message headers, matches
    ({}, {}, True),  # all with no keys matches everything
    ({}, None, True),
    ({"x-match": "any"}, {"a": 1}, False),  # any with no keys matches nothing
    ({"a": 1}, {"a": 1}, True),
    ({"a": 1}, {"a": 2}, False),
    ({"a": 1}, {}, False),
    ({"a": 1}, None, False),
    ({"a": 1, "b": "x"}, {"a": 1, "b": "x", "c": 3}, True),
    ({"a": 1, "b": "x"}, {"a": 1}, False),
    ({"x-match": "all", "a": 1, "b": "x"}, {"a": 1, "b": "y"}, False),
    ({"x-match": "any", "a": 1, "b": "x"}, {"a": 1, "b": "y"}, True),
    ({"x-match": "any", "a": 1, "b": "x"}, {"a": 2, "b": "y"}, False),
    ({"x-match": "any", "a": 1, "b": "x"}, {"c": 1}, False),
    # void binding value: presence only
    ({"a": None}, {"a": "whatever"}, True),
    ({"a": None}, {"b": 1}, False),
    ({"x-match": "any", "a": None, "b": 1}, {"a": 0}, True),
    # x- keys are ignored unless -with-x
    ({"x-foo": "bar"}, {}, True),
    ({"x-match": "any", "x-foo": "bar"}, {"x-foo": "bar"}, False),
    ({"x-match": "all-with-x", "x-foo": "bar"}, {"x-foo": "bar"}, True),
    ({"x-match": "all-with-x", "x-foo": "bar"}, {}, False),
    ({"x-match": "any-with-x", "x-foo": "bar", "a": 1}, {"x-foo": "bar"}, True),
    ({"x-match": "any-with-x", "x-foo": "bar"}, {"x-foo": "baz"}, False),
    ({"x-match": "all-with-x", "a": 1}, {"a": 1, "x-match": "any"}, True),
    # Erlang == semantics
    ({"n": 1}, {"n": 1.0}, True),
    ({"n": 1}, {"n": Decimal("1")}, True),
    ({"n": 1}, {"n": True}, False),
    ({"b": True}, {"b": True}, True),
    ({"b": True}, {"b": 1}, False),
    ({"s": "abc"}, {"s": b"abc"}, True),
    ({"t": {"k": [1, "v"]}}, {"t": {"k": [1, "v"]}}, True),
    ({"t": {"k": [1, "v"]}}, {"t": {"k": [1, "w"]}}, False),
    ({"d": datetime.datetime(2024, 1, 1)}, {"d": datetime.datetime(2024, 1, 1)}, True),
]


@pytest.mark.parametrize("args,headers,expected", CASES)
def test_headers_table(args, headers, expected):
    assert headers_match(args, headers) is expected
    x = make_exchange("headers", "h")
    x.bind(Dest.queue("q"), "", args)
    assert (x.route("ignored", headers) == [Dest.queue("q")]) is expected


def test_same_dest_different_args_are_distinct_bindings():
    x = make_exchange("headers", "h")
    q = Dest.queue("q")
    assert x.bind(q, "", {"a": 1})
    assert x.bind(q, "", {"a": 2})
    assert not x.bind(q, "", {"a": 2})
    assert x.route("", {"a": 2}) == [q]
    assert x.unbind(q, "", {"a": 2})
    assert x.route("", {"a": 2}) == []
    assert x.route("", {"a": 1}) == [q]


def test_arguments_order_does_not_matter_for_identity():
    x = make_exchange("headers", "h")
    q = Dest.queue("q")
    assert x.bind(q, "", {"x-match": "any", "a": 1, "b": 2})
    assert not x.bind(q, "", {"b": 2, "a": 1, "x-match": "any"})
    assert x.unbind(q, "", {"b": 2, "x-match": "any", "a": 1})
    assert not x.has_bindings


def test_routing_key_is_ignored():
    x = make_exchange("headers", "h")
    x.bind(Dest.queue("q"), "some-key", {"a": 1})
    assert x.route("other", {"a": 1}) == [Dest.queue("q")]


@pytest.mark.parametrize(
    "mode,text",
    [
        ("bogus", "PRECONDITION_FAILED - Invalid x-match field value <<\"bogus\">>; "
                  "expected all, any, all-with-x, or any-with-x"),
        (5, "PRECONDITION_FAILED - Invalid x-match field type signedint (value 5); expected longstr"),
    ],
)
def test_invalid_x_match_refused(mode, text):
    x = make_exchange("headers", "h")
    with pytest.raises(PreconditionFailed) as e:
        x.bind(Dest.queue("q"), "", {"x-match": mode})
    assert e.value.reply_code == 406
    assert e.value.reply_text == text
    assert not x.has_bindings
