"""Permissions: regex semantics, every AMQP operation's checks and order, RabbitMQ's texts.

Expected texts were checked against RabbitMQ 3.10.8 (PROTOCOL-ERRORS.md rows 9, 32-35, and a
probe user with configure ".*", write/read "^h9\\." for the AE and DLX cases).
"""

import pytest

from amqp_broker.core import AccessRefused, NotAllowed
from amqp_broker.core.permissions import (
    Permission, PermissionError_, PermissionStore, Requirement, access_refused, checker_options, requirements,
)


def _lim():
    store = PermissionStore()
    store.set("lim", "/", r"^lim\.", r"^lim\.", r"^lim\.")
    return store.checker("lim", "/")


def _refused(fn) -> str:
    with pytest.raises(AccessRefused) as info:
        fn()
    assert info.value.reply_code == 403 and info.value.is_soft
    return info.value.reply_text


def _text(kind: str, name: str, user: str = "lim", vhost: str = "/") -> str:
    return f"ACCESS_REFUSED - access to {kind} '{name}' in vhost '{vhost}' refused for user '{user}'"


# ---------------------------------------------------------------- regex semantics

def test_pattern_matches_anywhere_like_re_run():
    p = Permission("u", "/", configure="lim", write="^a$", read="")
    assert p.allows("configure", "xlimx")  # unanchored search
    assert p.allows("write", "a") and not p.allows("write", "ab")
    assert not p.allows("read", "anything")  # "" allows nothing (RabbitMQ's "^$")
    assert p.allows("read", "")


def test_invalid_regex_is_rejected():
    with pytest.raises(PermissionError_, match="invalid write regular expression"):
        PermissionStore().set("u", "/", ".*", "(", ".*")


def test_equality_ignores_compiled_patterns():
    assert Permission("u", "/", "a", "b", "c") == Permission("u", "/", "a", "b", "c")


# ---------------------------------------------------------------- PROTOCOL-ERRORS rows 32-35

def test_row32_declare_outside_pattern():
    assert _refused(lambda: _lim().queue_declare("other.q")) == _text("queue", "other.q")


def test_row33_publish_to_default_exchange_names_amq_default():
    assert _refused(lambda: _lim().basic_publish("")) == _text("exchange", "amq.default")


def test_row34_bind_needs_read_on_the_exchange():
    assert _refused(lambda: _lim().queue_bind("lim.q1", "amq.direct")) == _text("exchange", "amq.direct")


def test_row35_passive_declare_3x_leaks_existence_43_needs_one_permission():
    _lim().queue_declare("other.q", passive=True)  # no check: the server answers 404 or ok
    store = PermissionStore()
    store.set("lim", "/", r"^lim\.", "", "")
    strict = store.checker("lim", "/", passive_needs_any=True)
    assert _refused(lambda: strict.queue_declare("other.q", passive=True)) == _text("queue", "other.q")
    strict.queue_declare("lim.q", passive=True)  # configure alone is enough
    store.set("lim", "/", "", "", r"^lim\.")
    strict.exchange_declare("lim.x", passive=True)  # read alone too
    assert _refused(lambda: strict.exchange_declare("", passive=True)) == _text("exchange", "amq.default")


# ---------------------------------------------------------------- every operation

@pytest.mark.parametrize("operation, names, expected", [
    ("queue.declare", dict(queue="q"), [("queue", "q", "configure")]),
    ("queue.declare", dict(queue="q", arguments={"x-dead-letter-exchange": "dlx"}),
     [("queue", "q", "configure"), ("queue", "q", "read"), ("exchange", "dlx", "write")]),
    ("queue.declare", dict(queue="q", arguments={"x-dead-letter-exchange": b""}),
     [("queue", "q", "configure"), ("queue", "q", "read"), ("exchange", "amq.default", "write")]),
    ("queue.declare", dict(queue="q", arguments={"x-dead-letter-exchange": 5}), [("queue", "q", "configure")]),
    ("queue.declare", dict(queue="q", passive=True), []),
    ("queue.delete", dict(queue="q"), [("queue", "q", "configure")]),
    ("queue.purge", dict(queue="q"), [("queue", "q", "read")]),
    ("queue.bind", dict(queue="q", exchange="x"), [("queue", "q", "write"), ("exchange", "x", "read")]),
    ("queue.unbind", dict(queue="q", exchange="x"), [("queue", "q", "write"), ("exchange", "x", "read")]),
    ("queue.bind", dict(queue="q", exchange=""), [("queue", "q", "write"), ("exchange", "", ""),
                                                  ("exchange", "", "read")]),
    ("exchange.declare", dict(exchange="x"), [("exchange", "x", "configure")]),
    ("exchange.declare", dict(exchange="x", arguments={"alternate-exchange": "ae"}),
     [("exchange", "x", "configure"), ("exchange", "x", "read"), ("exchange", "ae", "write")]),
    ("exchange.declare", dict(exchange="x", passive=True), []),
    ("exchange.delete", dict(exchange="x"), [("exchange", "x", "configure")]),
    ("exchange.bind", dict(destination="d", source="s"), [("exchange", "d", "write"), ("exchange", "s", "read")]),
    ("exchange.unbind", dict(destination="d", source="s"), [("exchange", "d", "write"), ("exchange", "s", "read")]),
    ("basic.publish", dict(exchange="x"), [("exchange", "x", "write")]),
    ("basic.publish", dict(exchange=""), [("exchange", "amq.default", "write")]),
    ("basic.consume", dict(queue="q"), [("queue", "q", "read")]),
    ("basic.get", dict(queue="q"), [("queue", "q", "read")]),
])
def test_requirements_table(operation, names, expected):
    assert requirements(operation, **names) == [Requirement(*e) for e in expected]


def test_unknown_operation_is_a_programming_error():
    with pytest.raises(ValueError, match="basic.qos"):
        requirements("basic.qos")


def _only(kind: str):
    """A checker whose user has exactly one permission, on every name."""
    store = PermissionStore()
    store.set("u", "/", *[".*" if k == kind else "" for k in ("configure", "write", "read")])
    return store.checker("u", "/")


# (call, the one permission that suffices) for every checker method
_CALLS = [
    (lambda c: c.queue_declare("q"), "configure"),
    (lambda c: c.queue_delete("q"), "configure"),
    (lambda c: c.exchange_declare("x"), "configure"),
    (lambda c: c.exchange_delete("x"), "configure"),
    (lambda c: c.basic_publish("x"), "write"),
    (lambda c: c.queue_purge("q"), "read"),
    (lambda c: c.basic_consume("q"), "read"),
    (lambda c: c.basic_get("q"), "read"),
]


@pytest.mark.parametrize("call, needed", _CALLS)
@pytest.mark.parametrize("granted", ["configure", "write", "read"])
def test_each_operation_needs_exactly_its_permission(call, needed, granted):
    if granted == needed:
        call(_only(granted))
    else:
        _refused(lambda: call(_only(granted)))


@pytest.mark.parametrize("call", [
    lambda c: c.queue_bind("q", "x"), lambda c: c.queue_unbind("q", "x"),
    lambda c: c.exchange_bind("d", "s"), lambda c: c.exchange_unbind("d", "s"),
])
def test_bindings_need_write_and_read(call):
    store = PermissionStore()
    store.set("u", "/", "", ".*", ".*")
    call(store.checker("u", "/"))
    for only in ("write", "read"):
        _refused(lambda: call(_only(only)))


def test_bind_checks_the_destination_first():
    store = PermissionStore()
    store.set("u", "/", "", "", "")
    c = store.checker("u", "/")
    assert _refused(lambda: c.queue_bind("q", "x")) == _text("queue", "q", "u")
    assert _refused(lambda: c.exchange_bind("d", "s")) == _text("exchange", "d", "u")


def test_binding_the_default_exchange_is_refused_after_the_write_check():
    c = PermissionStore([Permission("u", "/")]).checker("u", "/")
    expected = "ACCESS_REFUSED - operation not permitted on the default exchange"
    assert _refused(lambda: c.queue_bind("q", "")) == expected
    assert _refused(lambda: c.exchange_bind("", "amq.direct")) == expected
    assert _refused(lambda: c.exchange_unbind("amq.direct", "")) == expected
    # without write on the queue, the write refusal comes first (as in rabbit_channel)
    assert _refused(lambda: _only("read").queue_bind("q", "")) == _text("queue", "q", "u")


def test_dead_letter_and_alternate_exchange_checks_match_rabbitmq():
    store = PermissionStore()
    store.set("h9", "/", ".*", r"^h9\.", r"^h9\.")
    c = store.checker("h9", "/")
    assert _refused(lambda: c.exchange_declare("h9.ex", {"alternate-exchange": "other.ae"})) == \
        _text("exchange", "other.ae", "h9")
    c.exchange_declare("h9.ex2", {"alternate-exchange": "h9.ae"})
    assert _refused(lambda: c.queue_declare("h9.q", {"x-dead-letter-exchange": "other.dlx"})) == \
        _text("exchange", "other.dlx", "h9")
    assert _refused(lambda: c.queue_declare("h9.q3", {"x-dead-letter-exchange": ""})) == \
        _text("exchange", "amq.default", "h9")
    assert _refused(lambda: c.queue_declare("zz.q", {"x-dead-letter-exchange": "h9.x"})) == \
        _text("queue", "zz.q", "h9")
    c.queue_delete("zz.q")
    assert _refused(lambda: c.queue_purge("zz.q")) == _text("queue", "zz.q", "h9")


def test_no_permissions_in_vhost_refuses_everything():
    c = PermissionStore().checker("u", "/")
    for call, _ in _CALLS:
        _refused(lambda: call(c))


def test_checker_sees_later_changes():
    store = PermissionStore()
    c = store.checker("u", "v")
    _refused(lambda: c.basic_get("q"))
    store.set("u", "v", "", "", ".*")
    c.basic_get("q")
    store.clear("u", "v")
    _refused(lambda: c.basic_get("q"))


def test_publish_answer_is_cached_until_the_store_changes():
    store = PermissionStore()
    store.set("u", "/", "", ".*", "")
    c = store.checker("u", "/")
    c.basic_publish("x")
    c.basic_publish("x")  # from the cache
    store.set("u", "/", "", "^y$", "")
    assert _refused(lambda: c.basic_publish("x")) == _text("exchange", "x", "u")
    c.basic_publish("y")
    store.delete_user("u")
    _refused(lambda: c.basic_publish("y"))


def test_newer_text_names_the_permission():
    store = PermissionStore()
    store.set("u", "/", "", "", "")
    c = store.checker("u", "/", name_permission=True)
    assert _refused(lambda: c.basic_publish("")) == \
        "ACCESS_REFUSED - write access to exchange 'amq.default' in vhost '/' refused for user 'u'"
    assert access_refused(Requirement("queue", "q", "read"), "v", "u", True).reply_text == \
        "ACCESS_REFUSED - read access to queue 'q' in vhost 'v' refused for user 'u'"


# ---------------------------------------------------------------- vhost access and the store

def test_vhost_access():
    store = PermissionStore()
    store.set("u", "/", "", "", "")  # any record, even all-empty, grants vhost access
    store.check_vhost_access("u", "/", vhosts={"/"})
    with pytest.raises(NotAllowed) as info:
        store.check_vhost_access("remote", "/")
    assert info.value.reply_code == 530
    assert info.value.reply_text == "NOT_ALLOWED - access to vhost '/' refused for user 'remote'"
    with pytest.raises(NotAllowed) as info:
        store.check_vhost_access("u", "nosuchvhost", vhosts={"/"})
    assert info.value.reply_text == "NOT_ALLOWED - vhost nosuchvhost not found"


def test_store_listing_and_cascading_deletes():
    store = PermissionStore()
    store.set("b", "v1", ".*", ".*", ".*")
    store.set("a", "v2", ".*", ".*", ".*")
    store.set("a", "v1", "x", "y", "z")
    assert [(p.user, p.vhost) for p in store.list()] == [("a", "v1"), ("b", "v1"), ("a", "v2")]
    assert [p.user for p in store.for_vhost("v1")] == ["a", "b"]
    assert [p.vhost for p in store.for_user("a")] == ["v1", "v2"]
    store.delete_user("a")
    assert [(p.user, p.vhost) for p in store.list()] == [("b", "v1")]
    store.delete_vhost("v1")
    assert store.list() == [] and not store.clear("b", "v1")


def test_definition_round_trip():
    p = Permission("u", "/", "^c", "^w", "^r")
    assert Permission.from_definition(p.as_definition()) == p
    assert p.as_definition() == {"user": "u", "vhost": "/", "configure": "^c", "write": "^w", "read": "^r"}


def test_profile_options():
    assert checker_options("rabbitmq-3.10") == {"name_permission": False, "passive_needs_any": False}
    assert checker_options("rabbitmq-4.2") == {"name_permission": True, "passive_needs_any": False}
    assert checker_options("rabbitmq-4.3") == {"name_permission": True, "passive_needs_any": True}
    c = PermissionStore().checker("u", "/", **checker_options("rabbitmq-4.2"))
    assert _refused(lambda: c.queue_delete("q")) == \
        "ACCESS_REFUSED - configure access to queue 'q' in vhost '/' refused for user 'u'"
