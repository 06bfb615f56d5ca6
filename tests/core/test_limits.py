"""core/limits.py: validation of limit definitions (RabbitMQ 3.10's 400 texts) and `reached`."""

import pytest

from amqp_broker.core.limits import (
    LimitError,
    reached,
    validate_user_limits,
    validate_vhost_limits,
)


def test_valid_definitions_pass_through():
    assert validate_vhost_limits({"max-connections": 10, "max-queues": -1}) == {
        "max-connections": 10, "max-queues": -1}
    assert validate_user_limits({"max-channels": 0}) == {"max-channels": 0}


@pytest.mark.parametrize("check, defn, text", [
    (validate_vhost_limits, {"max-foo": 1},
     'Validation failed\n\nUnrecognised terms [{<<"max-foo">>,1}] in limits\n'),
    (validate_vhost_limits, {"max-queues": "x"},
     'Validation failed\n\nmax-queues should be a number, actually was <<"x">>\n'),
    (validate_vhost_limits, {"max-queues": True},
     "Validation failed\n\nmax-queues should be a number, actually was true\n"),
    (validate_user_limits, {"max-queues": 1},
     'Unrecognised terms [{<<"max-queues">>,1}] in user-limits'),
    (validate_user_limits, [1], "user-limits should be a JSON object"),
])
def test_invalid_definitions_are_refused_with_rabbitmq_texts(check, defn, text):
    with pytest.raises(LimitError) as info:
        check(defn)
    assert str(info.value) == text


@pytest.mark.parametrize("limits, current, expected", [
    (None, 5, None), ({}, 5, None), ({"max-queues": -1}, 5, None), ({"max-queues": 3}, 2, None),
    ({"max-queues": 3}, 3, 3), ({"max-queues": 0}, 0, 0), ({"max-connections": 1}, 9, None),
])
def test_reached(limits, current, expected):
    assert reached(limits, "max-queues", current) == expected
