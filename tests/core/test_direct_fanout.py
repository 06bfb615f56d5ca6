"""Direct and fanout exchanges: binding bookkeeping and routing."""

from amqp_broker.core import Dest, make_exchange

Q = Dest.queue


def test_direct_exact_match_and_refcount_per_args():
    x = make_exchange("direct", "d")
    assert x.bind(Q("a"), "k")
    assert not x.bind(Q("a"), "k")
    assert x.bind(Q("a"), "k", {"v": 1})  # another binding, same dest
    assert x.bind(Q("b"), "k")
    assert x.route("k") == [Q("a"), Q("b")]
    assert x.route("K") == []
    assert x.unbind(Q("a"), "k")
    assert x.route("k") == [Q("a"), Q("b")]  # still bound through the args binding
    assert x.unbind(Q("a"), "k", {"v": 1})
    assert x.route("k") == [Q("b")]
    assert not x.unbind(Q("a"), "k")


def test_direct_empty_key():
    x = make_exchange("direct", "d")
    x.bind(Q("a"), "")
    assert x.route("") == [Q("a")]
    assert x.route("x") == []


def test_fanout_ignores_key_and_dedups():
    x = make_exchange("fanout", "f")
    x.bind(Q("a"), "one")
    x.bind(Q("a"), "two")
    x.bind(Dest.exchange("e"), "")
    assert x.route("whatever") == [Q("a"), Dest.exchange("e")]
    assert x.has_exchange_dests
    assert x.unbind_dest(Q("a")) == 2
    assert x.route("k") == [Dest.exchange("e")]


def test_bindings_listing_in_bind_order():
    x = make_exchange("direct", "d")
    x.bind(Q("b"), "2")
    x.bind(Q("a"), "1", {"x": True})
    listed = [(b.source, b.dest, b.routing_key, dict(b.arguments)) for b in x.bindings()]
    assert listed == [("d", Q("b"), "2", {}), ("d", Q("a"), "1", {"x": True})]
