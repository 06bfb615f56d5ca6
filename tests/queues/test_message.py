"""Message.from_publish parses delivery-mode, priority and expiration from the raw property bytes,
equal to what pamqp decodes; headers are decoded lazily."""

import pytest
from hypothesis import given, settings, strategies as st

from amqp_broker.queues import Message, parse_basic_properties

from .helpers import props

short = st.text(alphabet="abcxyz-./", max_size=20)


@pytest.mark.parametrize(
    "kw, expected",
    [
        ({}, (False, 0, None)),
        ({"delivery_mode": 2}, (True, 0, None)),
        ({"delivery_mode": 1}, (False, 0, None)),
        ({"priority": 7}, (False, 7, None)),
        ({"expiration": "1500"}, (False, 0, 1500)),
        ({"expiration": "0"}, (False, 0, 0)),
        ({"expiration": "abc"}, (False, 0, None)),
        ({"content_type": "text/plain", "headers": {"a": 1}, "delivery_mode": 2, "priority": 3,
          "correlation_id": "c", "reply_to": "r", "expiration": "42", "message_id": "m"},
         (True, 3, 42)),
    ],
)
def test_parse_properties_table(kw, expected):
    persistent, priority, expiration, _ = parse_basic_properties(props(**kw))
    assert (persistent, priority, expiration) == expected


@settings(max_examples=150, deadline=None)
@given(
    content_type=st.none() | short,
    content_encoding=st.none() | short,
    headers=st.none() | st.dictionaries(short, st.integers(0, 100) | short, max_size=3),
    delivery_mode=st.none() | st.sampled_from([1, 2]),
    priority=st.none() | st.integers(0, 255),
    correlation_id=st.none() | short,
    reply_to=st.none() | short,
    expiration=st.none() | st.integers(0, 10**9).map(str),
)
def test_parse_matches_pamqp(**kw):
    kw = {k: v for k, v in kw.items() if v is not None}
    m = Message.from_publish("e", "k", props(**kw), b"body")
    assert m.persistent == (kw.get("delivery_mode") == 2)
    assert m.priority == kw.get("priority", 0)
    assert m.expiration_ms == (int(kw["expiration"]) if "expiration" in kw else None)
    assert m.headers == kw.get("headers", {})


def test_headers_lazy_and_size():
    m = Message.from_publish("e", "k", props(headers={"x-death": "no"}), b"12345")
    assert m._headers is None
    assert m.headers == {"x-death": "no"}
    assert m.size == 5
    assert Message.from_publish("e", "k", b"", b"").headers == {}


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=40))
def test_parse_never_raises_on_garbage(raw):
    persistent, priority, expiration, hoff = parse_basic_properties(raw)
    assert isinstance(persistent, bool) and 0 <= priority <= 255
    assert expiration is None or expiration >= 0


def test_truncated_section_gives_defaults():
    raw = props(content_type="text/plain", delivery_mode=2)
    assert parse_basic_properties(raw[:4]) == (False, 0, None, -1)
