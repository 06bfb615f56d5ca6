"""Policies: validation messages, selection by priority/apply-to/type, and effective settings."""

import pytest

from amqp_broker.core import (
    PolicyError,
    PolicyStore,
    QueueSettings,
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


# -- effective settings: arguments + policy, the one implementation every queue type uses --------


def resolve(args, policy=None, op=None, queue_type="classic"):
    return resolve_queue_settings(args, effective_definition(policy, op), queue_type)


QUEUE_TYPES = ["classic", "quorum"]


def test_arguments_alone():
    s = resolve_queue_settings({
        "x-max-length": 10, "x-max-length-bytes": 100, "x-overflow": "reject-publish",
        "x-message-ttl": 0, "x-expires": 1000, "x-max-priority": 5,
        "x-single-active-consumer": True, "x-dead-letter-exchange": b"dlx",
        "x-dead-letter-routing-key": "dk", "x-dead-letter-strategy": "at-least-once",
        "x-delivery-limit": 3, "x-consumer-timeout": 60000, "x-queue-mode": "lazy",
    })
    assert s == QueueSettings(
        max_length=10, max_length_bytes=100, overflow="reject-publish", message_ttl=0,
        expires=1000, max_priority=5, single_active_consumer=True, dead_letter_exchange="dlx",
        dead_letter_routing_key="dk", dead_letter_strategy="at-least-once", delivery_limit=3,
        consumer_timeout=60000, queue_mode="lazy")
    assert resolve_queue_settings(None) == resolve_queue_settings({}, {}) == QueueSettings()
    assert QueueSettings().overflow == "drop-head"
    assert QueueSettings().dead_letter_strategy == "at-most-once"


def test_unvalidated_arguments_of_the_wrong_type_count_as_unset():
    # classic queues ignore x-delivery-limit / x-dead-letter-strategy, so nothing validated them
    s = resolve_queue_settings({"x-delivery-limit": "3", "x-dead-letter-strategy": 1},
                               {"delivery-limit": 7})
    assert (s.delivery_limit, s.dead_letter_strategy) == (7, "at-most-once")
    assert resolve_queue_settings({"x-max-length": True}).max_length is None


@pytest.mark.parametrize("queue_type", QUEUE_TYPES)
def test_argument_wins_for_dead_lettering(queue_type):
    pol = P("p", definition={"dead-letter-exchange": "pdlx", "dead-letter-routing-key": "prk",
                             "dead-letter-strategy": "at-least-once"})
    s = resolve({"x-dead-letter-exchange": "adlx", "x-dead-letter-strategy": "at-most-once"},
                pol, queue_type=queue_type)
    assert s.dead_letter_exchange == "adlx"
    assert s.dead_letter_routing_key == "prk"
    assert s.dead_letter_strategy == "at-most-once"
    s = resolve({}, pol, queue_type=queue_type)
    assert (s.dead_letter_exchange, s.dead_letter_strategy) == ("pdlx", "at-least-once")


@pytest.mark.parametrize("queue_type", QUEUE_TYPES)
@pytest.mark.parametrize("key", ["message-ttl", "expires", "max-length", "max-length-bytes",
                                 "consumer-timeout"])
def test_lower_wins(key, queue_type):
    field = key.replace("-", "_")
    pol = P("p", definition={key: 100})
    assert getattr(resolve({f"x-{key}": 50}, pol, queue_type=queue_type), field) == 50
    assert getattr(resolve({f"x-{key}": 500}, pol, queue_type=queue_type), field) == 100
    assert getattr(resolve({}, pol, queue_type=queue_type), field) == 100
    assert getattr(resolve({f"x-{key}": 7}, None, queue_type=queue_type), field) == 7


@pytest.mark.parametrize(
    "queue_type,arg,policy,expected",
    [
        # rabbit_quorum_queue: the policy has precedence
        ("quorum", "drop-head", "reject-publish", "reject-publish"),
        ("quorum", "reject-publish", "drop-head", "drop-head"),
        # rabbit_amqqueue_process: res_arg, the argument wins
        ("classic", "drop-head", "reject-publish", "drop-head"),
        ("classic", "reject-publish", "drop-head", "reject-publish"),
        ("classic", "reject-publish-dlx", "reject-publish", "reject-publish-dlx"),
        # only one of them set: that one
        ("classic", None, "reject-publish", "reject-publish"),
        ("quorum", "reject-publish", None, "reject-publish"),
        ("classic", None, None, "drop-head"),
    ],
)
def test_overflow(queue_type, arg, policy, expected):
    args = {} if arg is None else {"x-overflow": arg}
    pol = None if policy is None else P("p", definition={"overflow": policy})
    assert resolve(args, pol, queue_type=queue_type).overflow == expected


@pytest.mark.parametrize(
    "policy_val,arg_val,expected",
    [(10, 5, 5), (5, 10, 5), (-1, 5, 5), (5, -1, 5), (-1, -1, -1), (0, 3, 0), (None, -1, -1),
     (7, None, 7), (None, None, None)],
)
def test_delivery_limit(policy_val, arg_val, expected):
    pol = None if policy_val is None else P("p", definition={"delivery-limit": policy_val})
    args = {} if arg_val is None else {"x-delivery-limit": arg_val}
    # lower unless either is negative (unlimited), then the higher
    assert resolve(args, pol, queue_type="quorum").delivery_limit == expected


@pytest.mark.parametrize("queue_type", QUEUE_TYPES)
def test_operator_policy_caps_user_policy(queue_type):
    pol = P("p", definition={"max-length": 100, "dead-letter-exchange": "d", "delivery-limit": -1})
    op = P("op", definition={"max-length": 10, "delivery-limit": 20}, operator=True)
    merged = effective_definition(pol, op)
    assert merged == {"max-length": 10, "dead-letter-exchange": "d", "delivery-limit": 20}
    s = resolve({"x-max-length": 50}, pol, op, queue_type=queue_type)
    assert (s.max_length, s.delivery_limit, s.dead_letter_exchange) == (10, 20, "d")
    assert effective_definition(None, op) == {"max-length": 10, "delivery-limit": 20}
    assert effective_definition(None, None) == {}


def test_policy_cannot_set_argument_only_keys():
    s = resolve_queue_settings({"x-max-priority": 3}, {"max-priority": 9, "single-active-consumer": True})
    assert (s.max_priority, s.single_active_consumer) == (3, False)


def test_queue_mode_argument_wins_over_the_policy():
    assert resolve_queue_settings({}, {"queue-mode": "lazy"}).queue_mode == "lazy"
    assert resolve_queue_settings({"x-queue-mode": "default"},
                                  {"queue-mode": "lazy"}).queue_mode == "default"
