"""Routing through each exchange type, seen from the queues: direct, fanout, topic (* and #),
headers (all/any, x-* ignored), and the CC/BCC sender-selected distribution headers."""

import pika
import pytest

from compat_tests.support import get_n, wait_until


def _queues(ch, names, n):
    out = []
    for _ in range(n):
        q = names.queue()
        ch.queue_declare(q)
        out.append(q)
    return out


def _ready(ch, q) -> int:
    return ch.queue_declare(q, passive=True).method.message_count


def _drain(ch, q) -> list[bytes]:
    out = []
    while True:
        method, _, body = ch.basic_get(q, auto_ack=True)
        if method is None:
            return out
        out.append(body)


def test_direct_routes_on_exact_key(confirm_ch, names):
    x = names.exchange()
    confirm_ch.exchange_declare(x, "direct")
    qa, qb = _queues(confirm_ch, names, 2)
    confirm_ch.queue_bind(qa, x, "a")
    confirm_ch.queue_bind(qb, x, "b")
    confirm_ch.queue_bind(qb, x, "a")  # one queue, two keys
    for key in ("a", "b", "c", "A"):
        confirm_ch.basic_publish(x, key, key.encode())
    assert _drain(confirm_ch, qa) == [b"a"]
    assert _drain(confirm_ch, qb) == [b"a", b"b"]


def test_direct_duplicate_bindings_deliver_once(confirm_ch, names):
    x = names.exchange()
    confirm_ch.exchange_declare(x, "direct")
    q, = _queues(confirm_ch, names, 1)
    confirm_ch.queue_bind(q, x, "k")
    confirm_ch.queue_bind(q, x, "k")
    confirm_ch.basic_publish(x, "k", b"once")
    assert _drain(confirm_ch, q) == [b"once"]


def test_fanout_ignores_routing_key(confirm_ch, names):
    x = names.exchange()
    confirm_ch.exchange_declare(x, "fanout")
    qs = _queues(confirm_ch, names, 3)
    for i, q in enumerate(qs):
        confirm_ch.queue_bind(q, x, f"ignored-{i}")
    confirm_ch.basic_publish(x, "whatever", b"all")
    assert [_drain(confirm_ch, q) for q in qs] == [[b"all"]] * 3


@pytest.mark.parametrize("pattern,key,match", [
    ("a.*.c", "a.b.c", True),
    ("a.*.c", "a.c", False),
    ("a.*.c", "a.b.b.c", False),
    ("a.#", "a", True),
    ("a.#", "a.b.c", True),
    ("#.c", "c", True),
    ("#.c", "a.b.c", True),
    ("#", "", True),
    ("#", "anything.at.all", True),
    ("*", "", False),          # RabbitMQ: an empty key has no word for * to match
    ("*", "a.b", False),
    ("a.#.c", "a.c", True),
    ("a.#.c", "a.x.y.c", True),
    ("*.*", "a.", True),       # trailing empty word
    ("a.b", "a.b", True),
    ("a.b", "a.B", False),
    ("#.#", "a.b", True),
    ("*.#", "", False),
])
def test_topic_matching(confirm_ch, names, pattern, key, match):
    x = names.exchange()
    confirm_ch.exchange_declare(x, "topic")
    q, = _queues(confirm_ch, names, 1)
    confirm_ch.queue_bind(q, x, pattern)
    confirm_ch.basic_publish(x, key, b"m")
    assert _drain(confirm_ch, q) == ([b"m"] if match else [])


def test_topic_overlapping_bindings_deliver_once(confirm_ch, names):
    x = names.exchange()
    confirm_ch.exchange_declare(x, "topic")
    q, = _queues(confirm_ch, names, 1)
    for pattern in ("a.*", "#", "a.b"):
        confirm_ch.queue_bind(q, x, pattern)
    confirm_ch.basic_publish(x, "a.b", b"once")
    assert _drain(confirm_ch, q) == [b"once"]


def _headers_setup(ch, names, binding_args):
    x = names.exchange()
    ch.exchange_declare(x, "headers")
    q, = _queues(ch, names, 1)
    ch.queue_bind(q, x, "", arguments=binding_args)
    return x, q


@pytest.mark.parametrize("headers,match", [
    ({"format": "pdf", "type": "report"}, True),
    ({"format": "pdf", "type": "report", "extra": 1}, True),
    ({"format": "pdf"}, False),
    ({"format": "zip", "type": "report"}, False),
    (None, False),
])
def test_headers_all(confirm_ch, names, headers, match):
    x, q = _headers_setup(confirm_ch, names, {"x-match": "all", "format": "pdf", "type": "report"})
    confirm_ch.basic_publish(x, "rk-ignored", b"h", pika.BasicProperties(headers=headers))
    assert _drain(confirm_ch, q) == ([b"h"] if match else [])


@pytest.mark.parametrize("headers,match", [
    ({"format": "pdf"}, True),
    ({"type": "report"}, True),
    ({"format": "zip", "type": "log"}, False),
    ({}, False),
])
def test_headers_any(confirm_ch, names, headers, match):
    x, q = _headers_setup(confirm_ch, names, {"x-match": "any", "format": "pdf", "type": "report"})
    confirm_ch.basic_publish(x, "", b"h", pika.BasicProperties(headers=headers))
    assert _drain(confirm_ch, q) == ([b"h"] if match else [])


def test_headers_default_match_is_all(confirm_ch, names):
    x, q = _headers_setup(confirm_ch, names, {"a": 1, "b": 2})
    confirm_ch.basic_publish(x, "", b"one", pika.BasicProperties(headers={"a": 1}))
    confirm_ch.basic_publish(x, "", b"both", pika.BasicProperties(headers={"a": 1, "b": 2}))
    assert _drain(confirm_ch, q) == [b"both"]


def test_headers_binding_without_keys_matches_everything(confirm_ch, names):
    x, q = _headers_setup(confirm_ch, names, {"x-match": "all"})
    confirm_ch.basic_publish(x, "", b"plain")
    assert _drain(confirm_ch, q) == [b"plain"]


def test_headers_value_types_must_match(confirm_ch, names):
    x, q = _headers_setup(confirm_ch, names, {"x-match": "all", "n": 1})
    confirm_ch.basic_publish(x, "", b"str", pika.BasicProperties(headers={"n": "1"}))
    confirm_ch.basic_publish(x, "", b"int", pika.BasicProperties(headers={"n": 1}))
    assert _drain(confirm_ch, q) == [b"int"]


def test_cc_header_adds_routing_keys(confirm_ch, names):
    x = names.exchange()
    confirm_ch.exchange_declare(x, "direct")
    qa, qb, qc = _queues(confirm_ch, names, 3)
    confirm_ch.queue_bind(qa, x, "a")
    confirm_ch.queue_bind(qb, x, "b")
    confirm_ch.queue_bind(qc, x, "c")
    confirm_ch.basic_publish(x, "a", b"cc", pika.BasicProperties(headers={"CC": ["b"]}))
    (_, props, _), = get_n(confirm_ch, qb, 1)
    assert props.headers["CC"] == ["b"]  # CC stays on the message
    assert _drain(confirm_ch, qa) == [b"cc"]
    assert _drain(confirm_ch, qc) == []


def test_bcc_header_routes_and_is_removed(confirm_ch, names):
    x = names.exchange()
    confirm_ch.exchange_declare(x, "direct")
    qa, qb = _queues(confirm_ch, names, 2)
    confirm_ch.queue_bind(qa, x, "a")
    confirm_ch.queue_bind(qb, x, "b")
    confirm_ch.basic_publish(x, "a", b"bcc", pika.BasicProperties(headers={"BCC": ["b"], "keep": "me"}))
    for q in (qa, qb):
        (_, props, body), = get_n(confirm_ch, q, 1)
        assert body == b"bcc"
        assert "BCC" not in props.headers
        assert props.headers["keep"] == "me"


def test_cc_via_default_exchange(confirm_ch, names):
    qa, qb = _queues(confirm_ch, names, 2)
    confirm_ch.basic_publish("", qa, b"both", pika.BasicProperties(headers={"CC": [qb]}))
    assert _drain(confirm_ch, qa) == [b"both"]
    assert _drain(confirm_ch, qb) == [b"both"]


def test_one_message_to_many_queues_keeps_properties(confirm_ch, names):
    x = names.exchange()
    confirm_ch.exchange_declare(x, "fanout")
    qs = _queues(confirm_ch, names, 2)
    for q in qs:
        confirm_ch.queue_bind(q, x)
    props = pika.BasicProperties(content_type="text/plain", correlation_id="c1", message_id="m1",
                                 headers={"h": "v"}, delivery_mode=2, app_id="compat", type="t",
                                 user_id="guest", reply_to="r", timestamp=1700000000,
                                 content_encoding="utf-8", priority=4)
    confirm_ch.basic_publish(x, "", b"props", props)
    for q in qs:
        (method, got, body), = get_n(confirm_ch, q, 1)
        assert body == b"props" and method.exchange == x and method.routing_key == ""
        for field in ("content_type", "correlation_id", "message_id", "headers", "delivery_mode",
                      "app_id", "type", "user_id", "reply_to", "timestamp", "content_encoding",
                      "priority"):
            assert getattr(got, field) == getattr(props, field), field


def test_unroutable_without_mandatory_is_dropped_and_acked(confirm_ch, names):
    x = names.exchange()
    confirm_ch.exchange_declare(x, "direct")
    confirm_ch.basic_publish(x, "nobody", b"dropped")  # confirm channel: returns only after the ack
    assert confirm_ch.is_open


def test_large_body_is_split_and_reassembled(confirm_ch, names):
    q, = _queues(confirm_ch, names, 1)
    body = bytes(range(256)) * 2048  # 512 KiB, several frames at frame_max 131072
    confirm_ch.basic_publish("", q, body)
    got = get_n(confirm_ch, q, 1)
    assert got[0][2] == body


def test_empty_body(confirm_ch, names):
    q, = _queues(confirm_ch, names, 1)
    confirm_ch.basic_publish("", q, b"")
    assert wait_until(confirm_ch.connection, lambda: _ready(confirm_ch, q) == 1)
    assert get_n(confirm_ch, q, 1)[0][2] == b""
