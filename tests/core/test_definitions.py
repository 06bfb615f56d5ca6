"""Definitions JSON: RabbitMQ's export format in and out, validation messages, round trips."""

import copy
import json

import pytest

from amqp_broker.core.definitions import (
    Binding, Definitions, DefinitionsError, Exchange, Queue, VHost, export_definitions, parse_definitions,
)
from amqp_broker.core.permissions import Permission
from amqp_broker.core.policies import APPLY_TO_3_10, make_policy
from amqp_broker.core.users import User

# Shaped like `GET /api/definitions` of RabbitMQ 3.10.8, with one of everything added.
RABBITMQ_EXPORT = {
    "rabbit_version": "3.10.8", "rabbitmq_version": "3.10.8",
    "product_name": "RabbitMQ", "product_version": "3.10.8",
    "users": [
        {"name": "guest", "password_hash": "J/ly2BBEdM+yuF3V9yLDmaAnJ0loE/Nr7zDugSrrCp7QhEn5",
         "hashing_algorithm": "rabbit_password_hashing_sha256", "tags": ["administrator"], "limits": {}},
        {"name": "app", "password_hash": "", "hashing_algorithm": "rabbit_password_hashing_sha256",
         "tags": [], "limits": {"max-connections": 10}},
    ],
    "vhosts": [{"name": "/"}, {"name": "prod", "description": "production", "tags": ["a"],
                                "default_queue_type": "quorum", "limits": {"max-queues": 100}}],
    "permissions": [{"user": "guest", "vhost": "/", "configure": ".*", "write": ".*", "read": ".*"},
                    {"user": "app", "vhost": "prod", "configure": "^app\\.", "write": ".*", "read": ""}],
    "topic_permissions": [{"user": "app", "vhost": "prod", "exchange": "amq.topic", "write": "^a", "read": ".*"}],
    "parameters": [{"value": {"uri": "amqp://remote"}, "vhost": "prod", "component": "federation-upstream",
                    "name": "up1"}],
    "global_parameters": [{"name": "internal_cluster_id", "value": "rabbitmq-cluster-id-zlvZwRaPtzSO06WIN3ecbg"}],
    "policies": [{"vhost": "prod", "name": "ha", "pattern": "^app\\.", "apply-to": "queues",
                  "definition": {"max-length": 1000, "dead-letter-exchange": "dlx"}, "priority": 5}],
    "queues": [{"name": "probe.aad62b", "vhost": "/", "durable": True, "auto_delete": False,
                "arguments": {"x-queue-type": "quorum"}},
               {"name": "app.q", "vhost": "prod", "durable": True, "auto_delete": False, "arguments": {}}],
    "exchanges": [{"name": "app.x", "vhost": "prod", "type": "topic", "durable": True, "auto_delete": False,
                   "internal": False, "arguments": {"alternate-exchange": "ae"}}],
    "bindings": [{"source": "app.x", "vhost": "prod", "destination": "app.q", "destination_type": "queue",
                  "routing_key": "app.#", "arguments": {}}],
}


def _problems(document, **kw) -> list[str]:
    with pytest.raises(DefinitionsError) as info:
        parse_definitions(document, **kw)
    return info.value.problems


def test_reads_a_rabbitmq_export():
    d = parse_definitions(RABBITMQ_EXPORT)
    assert d.users[0].verify("guest") and d.users[1].limits == {"max-connections": 10}
    assert d.vhosts == (VHost("/"), VHost("prod", "production", ("a",), "quorum", {"max-queues": 100}))
    assert d.permissions[1] == Permission("app", "prod", "^app\\.", ".*", "")
    assert d.topic_permissions[0].exchange == "amq.topic"
    assert d.parameters[0].value == {"uri": "amqp://remote"}
    assert d.global_parameters[0].name == "internal_cluster_id"
    assert (d.policies[0].apply_to, d.policies[0].priority, d.policies[0].definition["max-length"]) == ("queues", 5, 1000)
    assert d.queues[0].queue_type == "quorum" and d.queues[1].queue_type == "classic"
    assert d.exchanges == (Exchange("app.x", "prod", "topic", True, False, False, {"alternate-exchange": "ae"}),)
    assert d.bindings == (Binding("app.x", "prod", "app.q", "queue", "app.#", {}),)
    assert d.versions["rabbit_version"] == "3.10.8" and d.skipped == ()


def test_round_trip_through_export_and_json_text():
    d = parse_definitions(RABBITMQ_EXPORT)
    doc = export_definitions(d, product_name="amqp-broker", product_version="4.2.0")
    assert set(doc) == set(RABBITMQ_EXPORT)
    assert (doc["rabbit_version"], doc["rabbitmq_version"], doc["product_name"]) == ("4.2.0", "4.2.0", "amqp-broker")
    again = parse_definitions(json.dumps(doc))
    for section in ("users", "vhosts", "permissions", "topic_permissions", "parameters", "global_parameters",
                    "policies", "queues", "exchanges", "bindings"):
        assert getattr(again, section) == getattr(d, section), section
    for key in ("users", "permissions", "topic_permissions", "parameters", "global_parameters", "policies",
                "queues", "exchanges", "bindings"):
        assert doc[key] == RABBITMQ_EXPORT[key], key


def test_vhost_export_carries_both_flat_and_metadata_fields():
    doc = export_definitions(Definitions(vhosts=(VHost("v", "d", ("t",), "quorum"),)),
                             product_name="p", product_version="1", rabbit_version="4.2.0")
    assert doc["vhosts"] == [{"name": "v", "description": "d", "tags": ["t"], "default_queue_type": "quorum",
                              "metadata": {"description": "d", "tags": ["t"], "default_queue_type": "quorum"}}]
    assert doc["rabbit_version"] == "4.2.0" and doc["product_version"] == "1"
    assert parse_definitions(doc).vhosts[0] == VHost("v", "d", ("t",), "quorum")


def test_server_filled_definitions_export():
    d = Definitions(
        users=(User("guest", "", tags=("administrator",)),),
        vhosts=(VHost("/"),),
        permissions=(Permission("guest", "/"),),
        policies=(make_policy("p", "/", ".*", {"message-ttl": 1000}),),
        queues=(Queue("q", "/"),),
        exchanges=(Exchange("amq.direct", "/", "direct"), Exchange("x", "/", "fanout")),
        bindings=(Binding("x", "/", "q", "queue"),),
    )
    doc = export_definitions(d, product_name="amqp-broker", product_version="4.2.0")
    assert [x["name"] for x in doc["exchanges"]] == ["x"]  # built-in exchanges are not exported
    assert doc["policies"] == [{"vhost": "/", "name": "p", "pattern": ".*", "apply-to": "all",
                                "definition": {"message-ttl": 1000}, "priority": 0}]
    assert json.loads(json.dumps(doc)) == doc


def test_missing_sections_are_empty_and_null_is_allowed():
    d = parse_definitions({"users": None, "queues": [{"name": "q", "vhost": "/"}]})
    assert d.users == () and d.queues == (Queue("q", "/", True, False, {}),)


def test_per_vhost_export_imports_into_the_given_vhost():
    doc = {"rabbit_version": "3.10.8", "queues": [{"name": "q", "durable": True, "auto_delete": False,
                                                   "arguments": {}}],
           "exchanges": [{"name": "x", "type": "direct", "durable": True, "auto_delete": False,
                          "internal": False, "arguments": {}}],
           "bindings": [{"source": "x", "destination": "q", "destination_type": "queue", "routing_key": "k",
                         "arguments": {}}],
           "policies": [{"name": "p", "pattern": ".*", "definition": {"expires": 1000}}]}
    d = parse_definitions(doc, vhost="tenant")
    assert {d.queues[0].vhost, d.exchanges[0].vhost, d.bindings[0].vhost, d.policies[0].vhost} == {"tenant"}
    assert "queues[0].vhost: missing" in _problems(doc)


def test_reserved_exchanges_are_skipped_with_a_reason():
    doc = {"exchanges": [{"name": "amq.direct", "vhost": "/", "type": "direct"},
                         {"name": "", "vhost": "/", "type": "direct"},
                         {"name": "ok", "vhost": "/", "type": "direct"}]}
    d = parse_definitions(doc)
    assert [x.name for x in d.exchanges] == ["ok"]
    assert d.skipped == ("exchange 'amq.direct' in vhost '/': names starting with 'amq.' are reserved",
                         "the default exchange in vhost '/' cannot be redefined")


def test_older_formats_tag_string_quoted_booleans_and_type_field():
    d = parse_definitions({
        "users": [{"name": "u", "password_hash": "", "tags": "administrator,monitoring"}],
        "queues": [{"name": "q", "vhost": "/", "durable": "true", "auto_delete": "false", "type": "quorum"}],
    })
    assert d.users[0].tags == ("administrator", "monitoring")
    assert d.users[0].hashing_algorithm == "rabbit_password_hashing_sha256"
    assert (d.queues[0].durable, d.queues[0].auto_delete, d.queues[0].queue_type) == (True, False, "quorum")


def test_every_problem_is_reported_with_its_place():
    bad = copy.deepcopy(RABBITMQ_EXPORT)
    bad["users"][1]["hashing_algorithm"] = "rabbit_password_hashing_sha1"
    bad["vhosts"].append({"name": ""})
    bad["permissions"][0]["configure"] = "("
    bad["queues"][0]["durable"] = "yes"
    bad["queues"][1]["arguments"] = {"x-queue-type": "lazy"}
    bad["exchanges"][0]["type"] = "fanciful"
    bad["bindings"][0]["destination_type"] = "topic"
    bad["policies"][0]["apply-to"] = "everything"
    bad["parameters"][0].pop("value")
    bad["global_parameters"] = "nope"
    problems = _problems(bad)
    assert problems == [
        "global_parameters: expected a list, got 'nope'",
        "users[1]: unknown hashing algorithm 'rabbit_password_hashing_sha1' (known: rabbit_password_hashing_sha256, "
        "rabbit_password_hashing_sha512, rabbit_password_hashing_md5)",
        "vhosts[2].name: expected a non-empty string, got ''",
        "permissions[0]: invalid configure regular expression '(': missing ), unterminated subpattern at position 0",
        "parameters[0].value: missing",
        "policies[0]: apply-to 'everything' unrecognised; should be one of: 'all', 'queues', 'exchanges', "
        "'classic_queues', 'quorum_queues', 'streams'",
        "queues[0].durable: expected true or false, got 'yes'",
        "queues[1].arguments: x-queue-type: expected classic, quorum, stream or partitioned, got 'lazy'",
        "exchanges[0].type: unknown exchange type 'fanciful'",
        "bindings[0].destination_type: expected queue or exchange, got 'topic'",
    ]
    assert str(DefinitionsError(problems)).startswith("invalid definitions:\nglobal_parameters:")


def test_policy_apply_to_follows_the_profile():
    doc = {"policies": [{"vhost": "/", "name": "p", "pattern": ".*", "apply-to": "quorum_queues",
                         "definition": {"max-length": 1}}]}
    parse_definitions(doc)
    assert _problems(doc, apply_to_values=APPLY_TO_3_10)[0].startswith("policies[0]: apply-to 'quorum_queues'")


@pytest.mark.parametrize("document, problem", [
    ("{not json", "not valid JSON"),
    ([1, 2], "expected a JSON object, got list"),
    ({"queues": [5]}, "queues[0]: expected an object, got 5"),
    ({"queues": [{"vhost": "/"}]}, "queues[0].name: missing"),
    ({"queues": [{"name": "q", "vhost": "/", "arguments": []}]}, "queues[0].arguments: expected an object, got []"),
    ({"users": [{"name": "u", "tags": [1]}]}, "users[0].tags: expected a list of strings, got [1]"),
    ({"vhosts": [{"name": "v", "default_queue_type": "lazy"}]},
     "vhosts[0].default_queue_type: expected classic, quorum or stream, got 'lazy'"),
    ({"policies": [{"vhost": "/", "name": "p", "pattern": ".*", "definition": {"max-length": "x"}}]},
     "policies[0]: "),
    ({"queues": [{"name": "q", "vhost": "/"}, {"name": "q", "vhost": "/"}]},
     "queues: queue 'q' in vhost '/' is defined twice"),
    ({"users": [{"name": "u"}, {"name": "u"}]}, "users: user 'u' is defined twice"),
    ({"permissions": [{"user": "u", "vhost": "/", "configure": "", "write": "", "read": ""}] * 2},
     "permissions: permissions of user 'u' in vhost '/' is defined twice"),
])
def test_single_problems(document, problem):
    assert _problems(document)[0].startswith(problem)


def test_the_same_name_in_two_vhosts_is_fine():
    d = parse_definitions({"queues": [{"name": "q", "vhost": "a"}, {"name": "q", "vhost": "b"}]})
    assert len(d.queues) == 2


def test_initial_definitions_from_settings_fields():
    from amqp_broker.config import BrokerSettings
    from amqp_broker.core.definitions import initial_definitions

    s = BrokerSettings()
    d = initial_definitions(s.default_user, s.default_pass, s.default_vhost, s.default_permissions,
                            s.default_user_tags, random_bytes=lambda n: b"\x01" * n)
    assert d.users[0].name == "guest" and d.users[0].verify("guest") and d.users[0].is_administrator
    assert d.vhosts == (VHost("/"),)
    assert d.permissions == (Permission("guest", "/", ".*", ".*", ".*"),)
    doc = export_definitions(d, product_name="amqp-broker", product_version="4.2.0")
    assert parse_definitions(doc).users == d.users


def test_a_partitioned_queue_round_trips():
    doc = {"queues": [{"name": "orders", "vhost": "/", "durable": True, "auto_delete": False,
                       "arguments": {"x-queue-type": "partitioned", "x-partitions": 16}}]}
    defs = parse_definitions(doc)
    assert defs.queues[0].queue_type == "partitioned"
    again = parse_definitions(export_definitions(defs, product_name="p", product_version="1"))
    assert again.queues == defs.queues
