"""Topic exchange: table-driven RabbitMQ cases and a property test against a regex reference."""

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from amqp_broker.core import Dest, make_exchange
from amqp_broker.core.exchanges import split_words

Q = Dest.queue


def _reference(pattern: str, key: str) -> bool:
    """Independent matcher: each word becomes '.word', so empty words and keys stay exact."""
    rx = "".join(
        r"(?:\.[^.]*)*" if w == "#" else r"\.[^.]*" if w == "*" else r"\." + re.escape(w)
        for w in split_words(pattern)
    )
    return re.fullmatch(rx, "".join("." + w for w in split_words(key))) is not None


CASES = [
    # pattern, key, matches
    ("a.b.c", "a.b.c", True),
    ("a.b.c", "a.b", False),
    ("a.*.c", "a.b.c", True),
    ("a.*.c", "a..c", True),
    ("a.*.c", "a.c", False),
    ("a.#", "a", True),
    ("a.#", "a.b.c", True),
    ("a.#", "ab", False),
    ("#", "", True),
    ("#", "anything.at.all", True),
    ("*", "", False),
    ("*", "x", True),
    ("*", "x.y", False),
    ("", "", True),
    ("", "x", False),
    ("#.c", "c", True),
    ("#.c", "a.b.c", True),
    ("#.c", "a.b.cc", False),
    ("a.#.z", "a.z", True),
    ("a.#.z", "a.b.c.z", True),
    ("a.#.z", "a.b.c.y", False),
    ("#.#", "", True),
    ("#.#", "a.b", True),
    ("*.#", "", False),
    ("*.#", "a", True),
    ("#.*", "a.b", True),
    ("a.", "a.", True),
    ("a.", "a", False),
    ("..", "..", True),
    ("*.*", ".", True),
    ("*.*.*", "..", True),
    ("a.*.#.b", "a.x.b", True),
    ("a.*.#.b", "a.b", False),
]


@pytest.mark.parametrize("pattern,key,expected", CASES)
def test_topic_table(pattern, key, expected):
    x = make_exchange("topic", "t")
    x.bind(Q("q"), pattern)
    assert (x.route(key) == [Q("q")]) is expected
    assert _reference(pattern, key) is expected  # the reference agrees with the table


def test_only_hash_fast_path_and_removal():
    x = make_exchange("topic", "t")
    x.bind(Q("all"), "#")
    assert x.route("x.y") == [Q("all")]
    x.bind(Q("ab"), "a.b")
    assert x.route("a.b") == [Q("all"), Q("ab")]
    x.unbind(Q("ab"), "a.b")
    assert x.route("a.b") == [Q("all")]
    x.unbind(Q("all"), "#")
    assert x.route("a.b") == []
    assert not x.has_bindings
    assert x._root.is_empty()  # pruned


def test_cache_invalidated_on_bind():
    x = make_exchange("topic", "t")
    x.bind(Q("a"), "k.*")
    assert x.route("k.1") == [Q("a")]
    x.bind(Q("b"), "k.1")
    assert x.route("k.1") == [Q("a"), Q("b")]
    x.unbind(Q("a"), "k.*")
    assert x.route("k.1") == [Q("b")]


def test_dest_reached_by_two_patterns_listed_once():
    x = make_exchange("topic", "t")
    x.bind(Q("a"), "#")
    x.bind(Q("a"), "k.*")
    x.bind(Dest.exchange("e2"), "k.#")
    assert x.route("k.v") == [Q("a"), Dest.exchange("e2")]


_words = st.sampled_from(["a", "b", "", "c"])
_pattern_words = st.sampled_from(["a", "b", "", "*", "#"])


@st.composite
def _keys(draw, words):
    n = draw(st.integers(0, 5))
    return ".".join(draw(words) for _ in range(n))


@given(patterns=st.lists(_keys(_pattern_words), min_size=1, max_size=6), key=_keys(_words))
def test_trie_agrees_with_regex_reference(patterns, key):
    x = make_exchange("topic", "t")
    for i, p in enumerate(patterns):
        x.bind(Q(f"q{i}"), p)
    got = {d.name for d in x.route(key)}
    want = {f"q{i}" for i, p in enumerate(patterns) if _reference(p, key)}
    assert got == want


@given(
    patterns=st.lists(_keys(_pattern_words), min_size=1, max_size=6, unique=True),
    drop=st.data(),
    key=_keys(_words),
)
def test_trie_after_unbinds_agrees_with_reference(patterns, drop, key):
    x = make_exchange("topic", "t")
    for p in patterns:
        x.bind(Q(p or "<empty>"), p)
    removed = drop.draw(st.lists(st.sampled_from(patterns), unique=True))
    for p in removed:
        assert x.unbind(Q(p or "<empty>"), p)
    kept = [p for p in patterns if p not in removed]
    got = {d.name for d in x.route(key)}
    assert got == {p or "<empty>" for p in kept if _reference(p, key)}
    if not kept:
        assert x._root.is_empty()
