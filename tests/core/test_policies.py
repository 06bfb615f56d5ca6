"""Policies: validation messages, selection by priority/apply-to/type, and effective settings."""

import pytest

from amqp_broker.core import (
    PolicyError,
    PolicyStore,
    effective_definition,
    make_policy,
    resolve_queue_settings,
    select_policy,
)
from amqp_broker.core.policies import APPLY_TO_3_10


def P(name, pattern=".*", definition=None, priority=0, apply_to="all", **kw):
    return make_policy(name, "/", pattern, definition or {"max-length": 10}, priority, apply_to, **kw)


# -- validation ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "definition,message",
    [
        ({}, "no policy provided"),
        ([("max-length", 1)], "definition must be a dictionary"),
        ({"bogus": 1}, "'bogus' is not recognised policy settings"),
        ({"bogus": 1, "alsobad": 2}, "'alsobad', 'bogus' are not recognised policy settings"),
        ({"max-length": -1}, "-1 is not a valid maximum length (key 'max-length')"),
        ({"max-length": "10"}, "'10' is not a valid maximum length"),
        ({"message-ttl": True}, "True is not a valid message TTL"),
        ({"expires": 0}, "0 is not a valid queue expiry"),
        ({"overflow": "drop-tail"}, "'drop-tail' is not a valid overflow value"),
        ({"dead-letter-exchange": 5}, "5 is not a valid dead letter exchange name"),
        ({"dead-letter-strategy": "sometimes"}, "'sometimes' is not a valid dead-letter-strategy value"),
        ({"delivery-limit": 1.5}, "1.5 is not a valid delivery limit"),
        ({"max-age": "7 days"}, "'7 days' is not a valid max age"),
        ({"ha-params": 2}, "ha-params cannot be set without ha-mode"),
        ({"ha-mode": "all", "ha-params": 2}, 'ha-mode="all" does not take parameters'),
        ({"ha-mode": "exactly"}, 'ha-mode="exactly" takes a positive integer, None given'),
        ({"ha-mode": "nodes", "ha-params": []}, 'ha-mode="nodes" takes a non-empty list of node names'),
    ],
)
def test_invalid_definitions(definition, message):
    with pytest.raises(PolicyError) as e:
        make_policy("p", "/", ".*", definition)
    assert message in str(e.value)


def test_valid_definitions_accepted():
    make_policy("p", "/", "^q", {"ha-mode": "exactly", "ha-params": 2, "ha-sync-mode": "automatic"})
    make_policy("p", "/", "^q", {"ha-mode": "nodes", "ha-params": ["rabbit@a", "rabbit@b"]})
    make_policy("p", "/", "^q", {"delivery-limit": -1, "dead-letter-strategy": "at-least-once",
                                  "overflow": "reject-publish", "dead-letter-exchange": "dlx"})
    make_policy("p", "/", "^q", {"max-age": "7D", "queue-leader-locator": "balanced"})


def test_other_policy_fields_validated():
    with pytest.raises(PolicyError, match="priority must be a number"):
        make_policy("p", "/", ".*", {"max-length": 1}, priority="high")
    assert make_policy("p", "/", ".*", {"max-length": 1}, priority="5").priority == 5
    with pytest.raises(PolicyError, match="apply-to 'topics' unrecognised"):
        make_policy("p", "/", ".*", {"max-length": 1}, apply_to="topics")
    with pytest.raises(PolicyError, match="apply-to 'quorum_queues' unrecognised"):
        make_policy("p", "/", ".*", {"max-length": 1}, apply_to="quorum_queues", apply_to_values=APPLY_TO_3_10)
    with pytest.raises(PolicyError, match="not a valid regular expression"):
        make_policy("p", "/", "(", {"max-length": 1})


def test_operator_policy_keys():
    make_policy("op", "/", ".*", {"max-length": 5, "delivery-limit": 3}, operator=True)
    with pytest.raises(PolicyError, match="'dead-letter-exchange' is not recognised operator policy settings"):
        make_policy("op", "/", ".*", {"dead-letter-exchange": "x"}, operator=True)


# -- selection ----------------------------------------------------------------------------------


def test_highest_priority_wins_and_ties_go_to_first():
    a, b, c = P("a", priority=1), P("b", priority=5), P("c", priority=5)
    assert select_policy([a, b, c], "queue", "q") is b
    assert select_policy([a, c, b], "queue", "q") is c
    assert select_policy([], "queue", "q") is None


def test_pattern_is_unanchored_regex():
    p = P("p", pattern="orders")
    assert p.matches("queue", "eu.orders.v1")
    assert not P("p", pattern="^orders$").matches("queue", "eu.orders")


@pytest.mark.parametrize(
    "apply_to,kind,qtype,expected",
    [
        ("all", "queue", "classic", True),
        ("all", "exchange", None, True),
        ("queues", "queue", "quorum", True),
        ("queues", "exchange", None, False),
        ("exchanges", "queue", "classic", False),
        ("exchanges", "exchange", None, True),
        ("classic_queues", "queue", "classic", True),
        ("classic_queues", "queue", "quorum", False),
        ("quorum_queues", "queue", "quorum", True),
        ("quorum_queues", "queue", "classic", False),
        ("streams", "queue", "stream", True),
    ],
)
def test_apply_to(apply_to, kind, qtype, expected):
    assert P("p", apply_to=apply_to).matches(kind, "x", qtype) is expected


def test_classic_only_keys_keep_policy_off_quorum_queues():
    ha = P("ha", definition={"ha-mode": "all"})
    assert ha.matches("queue", "q", "classic")
    assert not ha.matches("queue", "q", "quorum")


def test_store_sorted_and_lookup():
    s = PolicyStore("/")
    s.set(P("zeta", priority=1, definition={"max-length": 1}))
    s.set(P("alpha", priority=1, definition={"max-length": 2}))
    s.set(P("ops", pattern="^q", definition={"max-length": 1}, operator=True))
    s.set(P("ae", pattern="^x", apply_to="exchanges", priority=10, definition={"alternate-exchange": "alt"}))
    pol, op = s.for_queue("q1")
    assert pol.name == "alpha"  # tie broken by name
    assert op.name == "ops"
    assert s.exchange_alternate("x1") == "alt"
    assert s.exchange_alternate("y") is None
    assert [p.name for p in s.list()] == ["alpha", "zeta", "ae"]
    assert s.delete("alpha") and not s.delete("alpha")
    assert s.for_queue("q1")[0].name == "zeta"
    assert s.get("ops", operator=True).as_dict()["definition"] == {"max-length": 1}


# -- effective settings -------------------------------------------------------------------------


def test_argument_wins_for_dead_lettering():
    pol = P("p", definition={"dead-letter-exchange": "pdlx", "dead-letter-routing-key": "prk",
                             "dead-letter-strategy": "at-least-once"})
    s = resolve_queue_settings({"x-dead-letter-exchange": "adlx", "x-dead-letter-strategy": "at-most-once"},
                               pol, queue_type="quorum")
    assert s.dead_letter_exchange == "adlx"
    assert s.dead_letter_routing_key == "prk"
    assert s.dead_letter_strategy == "at-most-once"
    assert s.policy == "p"


@pytest.mark.parametrize("key", ["message-ttl", "expires", "max-length", "max-length-bytes"])
def test_lower_wins(key):
    pol = P("p", definition={key: 100})
    assert resolve_queue_settings({f"x-{key}": 50}, pol).get(key) == 50
    assert resolve_queue_settings({f"x-{key}": 500}, pol).get(key) == 100
    assert resolve_queue_settings({}, pol).get(key) == 100
    assert resolve_queue_settings({f"x-{key}": 7}, None).get(key) == 7


def test_overflow_policy_wins_on_quorum_argument_on_classic():
    pol = P("p", definition={"overflow": "reject-publish"})
    args = {"x-overflow": "drop-head"}
    assert resolve_queue_settings(args, pol, queue_type="quorum").overflow == "reject-publish"
    assert resolve_queue_settings(args, pol, queue_type="classic").overflow == "drop-head"


@pytest.mark.parametrize(
    "policy_val,arg_val,expected",
    [(10, 5, 5), (5, 10, 5), (-1, 5, 5), (5, -1, 5), (-1, -1, -1), (0, 3, 0)],
)
def test_delivery_limit(policy_val, arg_val, expected):
    pol = P("p", definition={"delivery-limit": policy_val})
    got = resolve_queue_settings({"x-delivery-limit": arg_val}, pol, queue_type="quorum").delivery_limit
    assert got == expected  # lower unless either is negative, then the higher


def test_operator_policy_caps_user_policy():
    pol = P("p", definition={"max-length": 100, "dead-letter-exchange": "d", "delivery-limit": -1})
    op = P("op", definition={"max-length": 10, "delivery-limit": 20}, operator=True)
    merged = effective_definition(pol, op)
    assert merged == {"max-length": 10, "dead-letter-exchange": "d", "delivery-limit": 20}
    s = resolve_queue_settings({"x-max-length": 50}, pol, op, queue_type="quorum")
    assert s.max_length == 10 and s.operator_policy == "op"
    assert effective_definition(None, op) == {"max-length": 10, "delivery-limit": 20}
    assert effective_definition(None, None) == {}


def test_dead_letter_mode():
    assert resolve_queue_settings({}).dead_letter_mode is None
    s = resolve_queue_settings({"x-dead-letter-exchange": "d", "x-dead-letter-strategy": "at-least-once"},
                               queue_type="quorum")
    assert s.dead_letter_mode == "at-most-once"  # drop-head (default) forces at-most-once
    s = resolve_queue_settings({"x-dead-letter-exchange": "d", "x-dead-letter-strategy": "at-least-once",
                                "x-overflow": "reject-publish"}, queue_type="quorum")
    assert s.dead_letter_mode == "at-least-once"
