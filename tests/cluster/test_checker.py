"""The checker (`checker.py`) and the history it reads (`history.py`) on hand-made histories."""

from __future__ import annotations

import pytest

from .checker import check
from .history import Delivery, History


def D(msg_id: str, redelivered: bool = False, acked: bool = True, node: str = "n1") -> Delivery:
    return Delivery(msg_id, node, redelivered, acked)


def test_clean_history_is_ok():
    r = check({"a": "ack", "b": "ack"}, [D("a"), D("b")])
    assert r.ok
    assert (r.attempted, r.confirmed, r.consumed, r.deliveries) == (2, 2, 2, 2)
    assert r.lost == [] and r.unexpected == [] and r.duplicated == 0


def test_confirmed_never_consumed_is_lost():
    r = check({"a": "ack", "b": "ack", "c": "ack"}, [D("b")])
    assert not r.ok
    assert r.lost == ["a", "c"]


def test_delivery_whose_ack_failed_is_not_consumption():
    r = check({"a": "ack"}, [D("a", acked=False)])
    assert r.lost == ["a"]
    r = check({"a": "ack"}, [D("a", acked=False), D("a", redelivered=True)])
    assert r.ok and r.consumed == 1


@pytest.mark.parametrize("outcome", ["nack", "unknown", None])
def test_unconfirmed_may_go_either_way(outcome):
    assert check({"a": outcome}, []).ok
    r = check({"a": outcome}, [D("a")])
    assert r.ok
    assert (r.unknown_consumed, r.nacked_consumed) == \
        ((0, 1) if outcome == "nack" else (1, 0))


def test_consumed_but_never_published_is_unexpected():
    r = check({"a": "ack"}, [D("a"), D("zz"), D("zz", redelivered=True)])
    assert not r.ok
    assert r.unexpected == ["zz"]


def test_returned_but_consumed_is_unexpected():
    r = check({"a": "returned"}, [D("a")])
    assert r.unexpected == ["a"]
    assert check({"a": "returned"}, []).ok


def test_duplicates_are_counted_with_their_redelivered_flag():
    history = [D("a"), D("a", redelivered=True), D("a", redelivered=True),
               D("b"), D("b", redelivered=False), D("c", redelivered=True)]
    r = check({"a": "ack", "b": "ack", "c": "unknown"}, history)
    assert r.ok  # duplicates are allowed
    assert r.duplicated == 2
    assert r.duplicate_deliveries == 3
    assert r.duplicates_redelivered == 2
    assert r.duplicates_not_redelivered == ["b"]
    assert r.first_redelivered == 1  # c: someone we did not see had it before


def test_counts_by_outcome_and_summary():
    published = {"a": "ack", "b": "nack", "c": "returned", "d": "unknown", "e": None}
    r = check(published, [D("a")])
    assert (r.attempted, r.confirmed, r.nacked, r.returned, r.unknown) == (5, 1, 1, 1, 2)
    text = r.summary()
    assert "lost 0" in text and "unexpected 0" in text and "confirmed 1" in text


def test_summary_names_the_lost_ids():
    r = check({f"m{i}": "ack" for i in range(12)}, [])
    assert "lost 12: m0, m1," in r.summary()
    assert "(+2)" in r.summary()


def test_history_records_and_refuses_a_reused_id():
    h = History()
    h.attempt("a")
    h.attempt("b")
    h.outcome("a", "ack")
    h.delivered("a", "n2", False, True)
    with pytest.raises(ValueError):
        h.attempt("a")
    with pytest.raises(ValueError):
        h.outcome("b", "maybe")
    published, deliveries = h.snapshot()
    assert published == {"a": "ack", "b": None}
    assert [(d.id, d.node, d.acked) for d in deliveries] == [("a", "n2", True)]
    assert h.count("ack") == 1 and h.count(None) == 1
    assert check(published, deliveries).ok
