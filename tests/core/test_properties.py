"""Property tests: headers matching vs RabbitMQ's merge algorithm; Topology vs a naive model."""

import re

from hypothesis import given
from hypothesis import strategies as st

from amqp_broker.core import Dest, Topology, headers_match
from amqp_broker.core.exchanges import split_words
from amqp_broker.core.fieldtypes import values_equal

# -- headers: a transcription of rabbit_exchange_type_headers:headers_match/5 ----------------


def _erlang_headers_match(args, headers):
    """Merge over key-sorted lists, state (all_match, any_match), as the Erlang code does."""
    kind = {"all": "all", "any": "any", "all-with-x": "all_with_x", "any-with-x": "any_with_x"}.get(
        args.get("x-match"), "all")
    pattern = sorted(args.items(), key=lambda kv: kv[0].encode())
    data = sorted((headers or {}).items(), key=lambda kv: kv[0].encode())
    all_m, any_m = True, False
    while True:
        if kind in ("all", "all_with_x") and not all_m:
            return False
        if kind in ("any", "any_with_x") and any_m:
            return True
        if not pattern:
            return all_m if kind in ("all", "all_with_x") else any_m
        pk, pv = pattern[0]
        if pk == "x-match" or (pk.startswith("x-") and kind in ("all", "any")):
            pattern = pattern[1:]
            continue
        if not data:
            pattern, all_m = [], False
            continue
        dk, dv = data[0]
        if pk.encode() > dk.encode():
            data = data[1:]
        elif pk.encode() < dk.encode():
            pattern, all_m = pattern[1:], False
        elif pv is None:
            pattern, data, any_m = pattern[1:], data[1:], True
        elif values_equal(pv, dv):
            pattern, data, any_m = pattern[1:], data[1:], True
        else:
            pattern, data, all_m = pattern[1:], data[1:], False


_hkeys = st.sampled_from(["a", "b", "c", "x-a", "x-b"])
_hvals = st.one_of(st.none(), st.integers(0, 2), st.sampled_from(["s", "t"]), st.booleans())


@given(
    mode=st.sampled_from([None, "all", "any", "all-with-x", "any-with-x"]),
    args=st.dictionaries(_hkeys, _hvals, max_size=4),
    headers=st.one_of(st.none(), st.dictionaries(_hkeys, _hvals.filter(lambda v: v is not None), max_size=4)),
)
def test_headers_match_agrees_with_erlang_algorithm(mode, args, headers):
    if mode is not None:
        args = {**args, "x-match": mode}
    assert headers_match(args, headers) == _erlang_headers_match(args, headers)


# -- topology: random operations, then invariants and routing vs a naive router --------------


def _topic_ref(pattern, key):
    rx = "".join(
        r"(?:\.[^.]*)*" if w == "#" else r"\.[^.]*" if w == "*" else r"\." + re.escape(w)
        for w in split_words(pattern)
    )
    return re.fullmatch(rx, "".join("." + w for w in split_words(key))) is not None


def _binding_matches(xtype, pattern, key):
    if xtype == "fanout":
        return True
    if xtype == "topic":
        return _topic_ref(pattern, key)
    return pattern == key


def _naive_route(topo, exchange, key):
    out, seen, work = set(), {exchange}, [exchange]
    while work:
        name = work.pop(0)
        x = topo.lookup_exchange(name)
        if x is None:
            continue
        if name == "":
            hits = [b for b in topo.bindings(source="") if b.routing_key == key]
        else:
            hits = [b for b in topo.bindings(source=name) if _binding_matches(x.type, b.routing_key, key)]
        for b in hits:
            if b.dest.is_queue:
                out.add(b.dest.name)
            elif b.dest.name not in seen:
                seen.add(b.dest.name)
                work.append(b.dest.name)
        if not hits and x.alternate is not None and x.alternate not in seen:
            seen.add(x.alternate)
            work.append(x.alternate)
    return out


QUEUES = ["q0", "q1", "q2"]
EXCHANGES = ["x0", "x1", "x2", "x3"]
KEYS = ["", "a", "a.b", "#", "*", "a.*", "b"]

_op = st.one_of(
    st.tuples(st.just("declare"), st.sampled_from(EXCHANGES), st.sampled_from(["direct", "fanout", "topic"]),
              st.booleans(), st.one_of(st.none(), st.sampled_from(EXCHANGES))),
    st.tuples(st.just("bind"), st.sampled_from(EXCHANGES),
              st.sampled_from(QUEUES + EXCHANGES), st.sampled_from(KEYS)),
    st.tuples(st.just("unbind"), st.sampled_from(EXCHANGES),
              st.sampled_from(QUEUES + EXCHANGES), st.sampled_from(KEYS)),
    st.tuples(st.just("add_queue"), st.sampled_from(QUEUES)),
    st.tuples(st.just("delete_queue"), st.sampled_from(QUEUES)),
    st.tuples(st.just("delete_exchange"), st.sampled_from(EXCHANGES)),
)


def _apply(topo, op):
    kind = op[0]
    try:
        if kind == "declare":
            _, name, typ, auto_delete, ae = op
            topo.declare_exchange(name, typ, auto_delete=auto_delete,
                                  arguments={"alternate-exchange": ae} if ae else None)
        elif kind in ("bind", "unbind"):
            _, src, dest, key = op
            d = Dest.queue(dest) if dest in QUEUES else Dest.exchange(dest)
            (topo.bind if kind == "bind" else topo.unbind)(src, d, key)
        elif kind == "add_queue":
            topo.add_queue(op[1])
        elif kind == "delete_queue":
            topo.delete_queue(op[1])
        else:
            topo.delete_exchange(op[1])
    except Exception as e:  # refused operations (404/406) leave the topology unchanged
        assert getattr(e, "reply_code", None) in (404, 406), e


def _check_invariants(topo):
    names = {x.name for x in topo.exchanges()}
    counted = {}
    for x in topo.exchanges():
        if x.name == "":
            continue
        for b in x.bindings():
            assert b.source == x.name
            if b.dest.is_queue:
                assert topo.has_queue(b.dest.name)
            else:
                assert b.dest.name in names
            counted.setdefault(b.dest, {}).setdefault(x.name, 0)
            counted[b.dest][x.name] += 1
    assert counted == topo._sources


@given(ops=st.lists(_op, max_size=25), key=st.sampled_from(["", "a", "a.b", "b", "c.d"]))
def test_topology_random_ops(ops, key):
    topo = Topology("/")
    for op in ops:
        _apply(topo, op)
        _check_invariants(topo)
    for x in topo.exchanges():
        got = topo.route(x.name, key)
        assert len(got) == len(set(got))
        assert set(got) == _naive_route(topo, x.name, key)
