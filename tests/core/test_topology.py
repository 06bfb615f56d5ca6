"""Topology: declare/delete rules and texts, bindings, e2e, alternate exchanges, CC/BCC, auto-delete."""

import pytest

from amqp_broker.core import (
    AccessRefused,
    CommandInvalid,
    Dest,
    NotFound,
    PreconditionFailed,
    Topology,
    routing_keys,
)

Q, X = Dest.queue, Dest.exchange


@pytest.fixture
def topo():
    t = Topology("/")
    for q in ("q1", "q2", "q3"):
        t.add_queue(q)
    return t


def _raises(exc, text, fn, *args, **kwargs):
    with pytest.raises(exc) as e:
        fn(*args, **kwargs)
    assert e.value.reply_text == text
    return e.value


# -- declare / delete ---------------------------------------------------------------------------


def test_standard_exchanges_exist(topo):
    names = {x.name: x.type for x in topo.exchanges()}
    assert names == {"": "direct", "amq.direct": "direct", "amq.fanout": "fanout",
                     "amq.topic": "topic", "amq.headers": "headers", "amq.match": "headers"}


def test_declare_new_then_equivalent(topo):
    x, created = topo.declare_exchange("e", "fanout")
    assert created and x.type == "fanout"
    x2, created2 = topo.declare_exchange("e", "fanout")
    assert x2 is x and not created2
    assert topo.declare_exchange("e", passive=True) == (x, False)


@pytest.mark.parametrize(
    "kwargs,text",
    [
        ({"type": "fanout"}, "inequivalent arg 'type' for exchange 'e' in vhost '/': "
                             "received 'fanout' but current is 'direct'"),
        ({"durable": False}, "inequivalent arg 'durable' for exchange 'e' in vhost '/': "
                             "received 'false' but current is 'true'"),
        ({"auto_delete": True}, "inequivalent arg 'auto_delete' for exchange 'e' in vhost '/': "
                                "received 'true' but current is 'false'"),
        ({"internal": True}, "inequivalent arg 'internal' for exchange 'e' in vhost '/': "
                             "received 'true' but current is 'false'"),
        ({"arguments": {"alternate-exchange": "ae"}},
         "inequivalent arg 'alternate-exchange' for exchange 'e' in vhost '/': "
         "received the value 'ae' of type 'longstr' but current is none"),
    ],
)
def test_declare_inequivalent(topo, kwargs, text):
    topo.declare_exchange("e", "direct")
    e = _raises(PreconditionFailed, "PRECONDITION_FAILED - " + text, topo.declare_exchange, "e", **kwargs)
    assert e.is_soft


def test_other_arguments_are_not_compared(topo):
    topo.declare_exchange("e", "direct", arguments={"foo": 1})
    assert topo.declare_exchange("e", "direct", arguments={"foo": 2})[1] is False


def test_passive_missing_is_404(topo):
    _raises(NotFound, "NOT_FOUND - no exchange 'nope' in vhost '/'",
            topo.declare_exchange, "nope", passive=True)


def test_default_exchange_is_refused(topo):
    text = "ACCESS_REFUSED - operation not permitted on the default exchange"
    _raises(AccessRefused, text, topo.declare_exchange, "", "direct")
    _raises(AccessRefused, text, topo.declare_exchange, "", passive=True)
    _raises(AccessRefused, text, topo.delete_exchange, "")
    _raises(AccessRefused, text, topo.bind, "", Q("q1"), "k")
    _raises(AccessRefused, text, topo.unbind, "", Q("q1"), "q1")
    _raises(AccessRefused, text, topo.bind, "amq.direct", X(""), "k")


def test_amq_prefix(topo):
    _raises(AccessRefused, "ACCESS_REFUSED - exchange name 'amq.mine' contains reserved prefix 'amq.*'",
            topo.declare_exchange, "amq.mine", "direct")
    assert topo.declare_exchange("amq.direct", "direct")[1] is False  # existing: just equivalence
    _raises(AccessRefused, "ACCESS_REFUSED - deletion of system exchange 'amq.topic' in vhost '/' not allowed",
            topo.delete_exchange, "amq.topic")


def test_unknown_type_compat_profiles():
    e = _raises(CommandInvalid, "COMMAND_INVALID - unknown exchange type 'x-nope'",
                Topology().declare_exchange, "e", "x-nope")
    assert e.reply_code == 503 and e.is_hard
    t4 = Topology(unknown_type_error=PreconditionFailed)
    e = _raises(PreconditionFailed, "PRECONDITION_FAILED - unknown exchange type 'x-nope'",
                t4.declare_exchange, "e", "x-nope")
    assert e.is_soft


def test_bad_alternate_exchange_type(topo):
    _raises(PreconditionFailed,
            "PRECONDITION_FAILED - invalid type 'signedint' for arg 'alternate-exchange' in exchange 'e' in vhost '/'",
            topo.declare_exchange, "e", "direct", arguments={"alternate-exchange": 5})


def test_delete_is_idempotent_and_if_unused(topo):
    assert topo.delete_exchange("missing") == []
    topo.declare_exchange("e", "direct")
    topo.bind("e", Q("q1"), "k")
    _raises(PreconditionFailed, "PRECONDITION_FAILED - exchange 'e' in vhost '/' in use",
            topo.delete_exchange, "e", if_unused=True)
    assert topo.delete_exchange("e") == ["e"]
    assert topo.lookup_exchange("e") is None
    assert topo.bindings(dest=Q("q1")) == [b for b in topo.bindings(dest=Q("q1")) if b.source == ""]


# -- bindings -----------------------------------------------------------------------------------


def test_bind_missing_ends(topo):
    _raises(NotFound, "NOT_FOUND - no exchange 'nx' in vhost '/'", topo.bind, "nx", Q("nq"), "k")
    _raises(NotFound, "NOT_FOUND - no queue 'nq' in vhost '/'", topo.bind, "amq.direct", Q("nq"), "k")
    _raises(NotFound, "NOT_FOUND - no exchange 'ny' in vhost '/'", topo.bind, "amq.direct", X("ny"), "k")
    _raises(NotFound, "NOT_FOUND - no exchange 'nx' in vhost '/'", topo.unbind, "nx", Q("q1"), "k")


def test_bind_unbind_idempotent(topo):
    assert topo.bind("amq.direct", Q("q1"), "k") is True
    assert topo.bind("amq.direct", Q("q1"), "k") is False
    assert topo.unbind("amq.direct", Q("q1"), "k").removed is True
    assert topo.unbind("amq.direct", Q("q1"), "k").removed is False


def test_bindings_listing(topo):
    topo.declare_exchange("e", "topic")
    topo.bind("e", Q("q1"), "a.*")
    topo.bind("amq.fanout", Q("q1"), "", {"x": 1})
    topo.bind("e", X("amq.fanout"), "#")
    got = [(b.source, b.dest, b.routing_key) for b in topo.bindings(dest=Q("q1"))]
    assert got == [("", Q("q1"), "q1"), ("e", Q("q1"), "a.*"), ("amq.fanout", Q("q1"), "")]
    assert [(b.dest, b.routing_key) for b in topo.bindings(source="e")] == [(Q("q1"), "a.*"), (X("amq.fanout"), "#")]
    everything = topo.bindings()
    assert ("", Q("q2"), "q2") in [(b.source, b.dest, b.routing_key) for b in everything]
    assert len(everything) == 3 + 3


# -- routing ------------------------------------------------------------------------------------


def test_default_exchange_routes_by_queue_name(topo):
    assert topo.route("", "q2") == ["q2"]
    assert topo.route("", "nope") == []
    topo.delete_queue("q2")
    assert topo.route("", "q2") == []


def test_route_missing_and_internal(topo):
    _raises(NotFound, "NOT_FOUND - no exchange 'nx' in vhost '/'", topo.route, "nx", "k")
    topo.declare_exchange("int", "fanout", internal=True)
    topo.bind("int", Q("q1"))
    _raises(AccessRefused, "ACCESS_REFUSED - cannot publish to internal exchange 'int' in vhost '/'",
            topo.route, "int", "k")
    assert topo.route("int", "k", internal_ok=True) == ["q1"]


def test_cc_and_bcc(topo):
    topo.bind("amq.direct", Q("q1"), "a")
    topo.bind("amq.direct", Q("q2"), "b")
    topo.bind("amq.direct", Q("q3"), "c")
    assert topo.route("amq.direct", "a", {"CC": ["b"], "BCC": ["c", "a"]}) == ["q1", "q2", "q3"]
    assert topo.route("amq.direct", "x", {"CC": ["c", 7]}) == ["q3"]
    assert topo.route("amq.direct", "a", {"CC": "b"}) == ["q1"]  # not an array: ignored
    assert topo.route("", "q1", {"CC": ["q2"]}) == ["q1", "q2"]
    assert routing_keys("a", {"CC": ["b"], "BCC": ["c"]}) == ["a", "b", "c"]
    assert routing_keys("a", {"CC": ["b"], "BCC": ["c"]}, bcc=False) == ["a", "b"]


def test_exchange_to_exchange_each_queue_once(topo):
    topo.declare_exchange("top", "topic")
    topo.declare_exchange("fan", "fanout")
    topo.bind("top", X("fan"), "a.#")
    topo.bind("top", Q("q1"), "a.b")
    topo.bind("fan", Q("q1"))
    topo.bind("fan", Q("q2"))
    assert topo.route("top", "a.b") == ["q1", "q2"]
    assert topo.route("top", "a.c") == ["q1", "q2"]
    assert topo.route("top", "b") == []


def test_e2e_cycle_terminates(topo):
    for n in ("x1", "x2", "x3"):
        topo.declare_exchange(n, "fanout")
    topo.bind("x1", X("x2"))
    topo.bind("x2", X("x3"))
    topo.bind("x3", X("x1"))
    topo.bind("x3", Q("q3"))
    topo.bind("x1", X("x1"))  # self-binding
    assert topo.route("x1", "k") == ["q3"]
    assert topo.route("x2", "k") == ["q3"]


def test_alternate_exchange(topo):
    topo.declare_exchange("ae", "fanout")
    topo.bind("ae", Q("q3"))
    topo.declare_exchange("main", "direct", arguments={"alternate-exchange": "ae"})
    topo.bind("main", Q("q1"), "k")
    assert topo.route("main", "k") == ["q1"]
    assert topo.route("main", "other") == ["q3"]


def test_alternate_exchange_chain_missing_and_loop(topo):
    topo.declare_exchange("a", "direct", arguments={"alternate-exchange": "b"})
    topo.declare_exchange("b", "direct", arguments={"alternate-exchange": "a"})
    assert topo.route("a", "k") == []  # loop guarded
    topo.declare_exchange("c", "direct", arguments={"alternate-exchange": "gone"})
    assert topo.route("c", "k") == []  # dangling AE skipped


def test_alternate_not_used_when_e2e_matched_but_reached_nothing(topo):
    topo.declare_exchange("ae", "fanout")
    topo.bind("ae", Q("q3"))
    topo.declare_exchange("empty", "direct")
    topo.declare_exchange("main", "direct", arguments={"alternate-exchange": "ae"})
    topo.bind("main", X("empty"), "k")
    assert topo.route("main", "k") == []
    assert topo.route("main", "j") == ["q3"]


def test_policy_alternate_exchange_used_when_no_argument(topo):
    topo.declare_exchange("ae", "fanout")
    topo.bind("ae", Q("q2"))
    x, _ = topo.declare_exchange("main", "direct")
    x.policy_alternate = "ae"
    assert topo.route("main", "k") == ["q2"]


def test_headers_routing_through_topology(topo):
    topo.bind("amq.match", Q("q1"), "", {"x-match": "any", "a": 1, "b": 2})
    topo.bind("amq.headers", Q("q2"), "", {"a": 1, "b": 2})
    assert topo.route("amq.match", "", {"b": 2}) == ["q1"]
    assert topo.route("amq.headers", "", {"b": 2}) == []
    assert topo.route("amq.headers", "", {"a": 1, "b": 2}) == ["q2"]


# -- auto-delete and queue deletion -------------------------------------------------------------


def test_auto_delete_when_last_binding_removed(topo):
    topo.declare_exchange("ad", "direct", auto_delete=True)
    topo.bind("ad", Q("q1"), "a")
    topo.bind("ad", Q("q1"), "b")
    assert topo.unbind("ad", Q("q1"), "a").deleted_exchanges == ()
    assert topo.unbind("ad", Q("q1"), "b").deleted_exchanges == ("ad",)
    assert topo.lookup_exchange("ad") is None


def test_auto_delete_never_bound_stays(topo):
    topo.declare_exchange("ad", "direct", auto_delete=True)
    assert topo.delete_queue("q1") == []
    assert topo.lookup_exchange("ad") is not None


def test_delete_queue_removes_bindings_and_cascades(topo):
    topo.declare_exchange("up", "fanout", auto_delete=True)
    topo.declare_exchange("mid", "fanout", auto_delete=True)
    topo.declare_exchange("keep", "fanout")
    topo.bind("up", X("mid"))
    topo.bind("mid", Q("q1"))
    topo.bind("keep", Q("q1"))
    topo.bind("keep", Q("q2"))
    deleted = topo.delete_queue("q1")
    assert deleted == ["mid", "up"]  # mid lost its last binding, then up lost its binding to mid
    assert topo.route("keep", "k") == ["q2"]
    assert topo.bindings(dest=Q("q1")) == []
    assert not topo.has_queue("q1")


def test_delete_exchange_removes_bindings_to_it(topo):
    topo.declare_exchange("src", "fanout", auto_delete=True)
    topo.declare_exchange("dst", "fanout")
    topo.bind("src", X("dst"))
    topo.bind("dst", Q("q1"))
    assert topo.delete_exchange("dst") == ["dst", "src"]
    assert topo.bindings(dest=Q("q1")) == [b for b in topo.bindings(dest=Q("q1")) if b.source == ""]


def test_route_keys_uses_given_keys_only(topo):
    topo.bind("amq.direct", Q("q1"), "a")
    topo.bind("amq.direct", Q("q2"), "b")
    topo.bind("amq.direct", Q("q3"), "c")
    assert topo.route_keys("amq.direct", ["b", "a"], {"CC": ["c"]}) == ["q2", "q1"]
    assert topo.route_keys("amq.direct", []) == []
    topo.declare_exchange("ae", "fanout")
    topo.bind("ae", Q("q3"))
    topo.declare_exchange("m", "direct", internal=True, arguments={"alternate-exchange": "ae"})
    with pytest.raises(AccessRefused):
        topo.route_keys("m", ["x"])
    assert topo.route_keys("m", ["x"], internal_ok=True) == ["q3"]


def test_refresh_policy_alternates_from_policy_store(topo):
    from amqp_broker.core import PolicyStore, make_policy

    store = PolicyStore("/")
    store.set(make_policy("ae", "/", "^(main|own)$", {"alternate-exchange": "ae"}, apply_to="exchanges"))
    topo.declare_exchange("ae", "fanout")
    topo.bind("ae", Q("q1"))
    topo.declare_exchange("main", "direct")
    topo.declare_exchange("own", "direct", arguments={"alternate-exchange": "nowhere"})
    topo.refresh_policy_alternates(store.exchange_alternate)
    assert topo.route("main", "k") == ["q1"]
    assert topo.route("own", "k") == []  # the argument wins over the policy
    store.delete("ae")
    topo.refresh_policy_alternates(store.exchange_alternate)
    assert topo.route("main", "k") == []
