"""The packed FIFOs behave as a deque of `Message`s / ints would, across chunk boundaries and
through their snapshot form; old (one list per message) snapshots still load."""
from __future__ import annotations

from collections import deque

import pytest
from hypothesis import given, settings, strategies as st

from quorum import packed
from quorum.fifo import packed as fifo_packed
from quorum.fifo.messages import LiveIndexes, Message, ReadyQueue
from quorum.fifo.packed import PackedInts, PackedMessages
from quorum.packed import ColumnFifo

from .settings import EXAMPLES


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    monkeypatch.setattr(packed, "CHUNK", 3)   # every few messages cross a chunk boundary
    monkeypatch.setattr(fifo_packed, "_HOT", 2)     # all but the first two are packed
    monkeypatch.setattr(fifo_packed, "_REFILL", 2)
    monkeypatch.setattr(fifo_packed, "_BATCH", 2)      # the newest wait unpacked in pairs


def _wire(m: Message) -> list:
    return m.to_wire()


_msgs = st.builds(Message, index=st.integers(1, 2**40), size=st.integers(0, 2**31),
                  expiry=st.none() | st.integers(1, 2**45), hi=st.just(False),
                  persistent=st.booleans(), acquired=st.integers(0, 50),
                  delivery_failed=st.integers(0, 50))
_ops = st.lists(st.one_of(st.tuples(st.just("append"), _msgs), st.just(("pop",)),
                          st.just(("snapshot",)), st.tuples(st.just("appendleft"), _msgs)),
                max_size=40)


@settings(max_examples=EXAMPLES, deadline=None)
@given(_ops)
def test_packed_messages_match_a_deque(ops):
    model: deque[Message] = deque()
    fifo = PackedMessages(Message)
    for op in ops:
        if op[0] == "append":
            model.append(op[1])
            fifo.append(op[1])
        elif op[0] == "appendleft":
            model.appendleft(op[1])
            fifo.appendleft(op[1])
        elif op[0] == "pop" and model:
            assert _wire(fifo.popleft()) == _wire(model.popleft())
        elif op[0] == "snapshot":
            restored = PackedMessages(Message)
            restored.load_wire(fifo.to_wire())
            fifo = restored
        assert len(fifo) == len(model) and bool(fifo) == bool(model)
        assert [_wire(m) for m in fifo] == [_wire(m) for m in model]
        assert fifo.total_size() == sum(m.size for m in model)
        for i in range(len(model)):
            assert fifo.index_at(i) == model[i].index
            assert _wire(fifo[i]) == _wire(model[i])
        if model:
            assert _wire(fifo[-1]) == _wire(model[-1])


def test_a_level_keeps_its_priority_and_partition():
    fifo = PackedMessages(Message, hi=7, part=2)
    for i in range(5):
        fifo.append(Message(i, 10, hi=7, part=2))
    again = PackedMessages(Message, hi=7, part=2)
    again.load_wire(fifo.to_wire())   # every one packed: hi and part are the level's
    assert [(m.index, m.hi, m.part) for m in (again.popleft() for _ in range(5))] == \
        [(i, 7, 2) for i in range(5)]
    with pytest.raises(IndexError):
        again.popleft()


def test_old_snapshots_of_a_ready_queue_still_load():
    old = [[], [[3, 1, None, True, True, 0, 0]],
           [[1, 4, 99, False, True, 1, 0], [2, 5, None, False, False, 0, 0]], 1]
    q = ReadyQueue.from_wire(old)
    assert [m.index for m in q.head(3)] == [3, 1, 2]   # high first (the 2:1 cycle is at 1)
    assert q.lo[0].expiry == 99 and q.lo[1].persistent is False
    assert q.bytes == 10
    again = ReadyQueue.from_wire(q.to_wire())
    assert [m.to_wire() for m in again.head(3)] == [m.to_wire() for m in q.head(3)]


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.lists(st.integers(1, 2**50), max_size=30), st.data())
def test_live_indexes_find_the_smallest_and_survive_snapshots(adds, data):
    adds = sorted(set(adds))
    live = LiveIndexes()
    for i in adds:
        live.add(i)
    removed = data.draw(st.sets(st.sampled_from(adds)) if adds else st.just(set()))
    for i in removed:
        live.remove(i)
    expect = [i for i in adds if i not in removed]
    assert live.live() == expect
    assert live.smallest() == (expect[0] if expect else None)
    restored = LiveIndexes.from_wire(live.to_wire())
    assert restored.live() == expect and restored.smallest() == live.smallest()
    assert LiveIndexes.from_wire(expect).live() == expect   # a snapshot's old list form


def test_packed_ints_pop_in_order():
    p = PackedInts(range(10))
    assert [p.popleft() for _ in range(4)] == [0, 1, 2, 3]
    assert p.head() == 4 and len(p) == 6
    assert list(PackedInts.from_bytes(p.to_bytes())) == list(range(4, 10))


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.lists(st.one_of(st.tuples(st.integers(0, 2**40), st.sampled_from([7, 7, 7, 9])),
                          st.none()), max_size=30))
def test_a_defaulted_column_is_stored_only_where_a_row_departs_from_it(ops):
    rows: deque[tuple] = deque()
    fifo = ColumnFifo("qq", (None, 7))
    for op in ops:
        if op is None:
            if rows:
                assert fifo.popleft() == rows.popleft()
        else:
            rows.append(op)
            fifo.append(op)
        assert list(fifo) == list(rows) and list(fifo.column(1)) == [r[1] for r in rows]
        again = ColumnFifo("qq", (None, 7))
        again.load_wire(fifo.to_wire())
        assert list(again) == list(rows)
    if all(op is None or op[1] == 7 for op in ops):   # no row ever departed from the default
        assert fifo.to_wire()[1] == b""


_row_st = st.tuples(st.integers(0, 2**40), st.sampled_from([7, 7, 7, 9]))


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.lists(st.one_of(st.tuples(st.just("extend"), st.lists(_row_st, max_size=8)),
                          st.tuples(st.just("pop"), st.integers(0, 8)),
                          st.tuples(st.just("append"), _row_st), st.just(("popleft",))),
                max_size=30))
def test_column_wise_extend_and_pop_match_rows(ops):
    """`extend_columns` / `pop_columns` (the packing of a batch at once) keep the same rows
    in the same order as appending and popping them one by one, across chunk boundaries."""
    rows: deque[tuple] = deque()
    fifo = ColumnFifo("qq", (None, 7))
    for op in ops:
        if op[0] == "extend":
            new = op[1]
            if new:
                fifo.extend_columns([[r[0] for r in new], [r[1] for r in new]])
                rows.extend(new)
        elif op[0] == "pop":
            expect = [rows.popleft() for _ in range(min(op[1], len(rows)))]
            firsts, seconds = fifo.pop_columns(op[1])
            assert list(zip(firsts, seconds)) == expect
        elif op[0] == "append":
            fifo.append(op[1])
            rows.append(op[1])
        elif rows:
            assert fifo.popleft() == rows.popleft()
        assert len(fifo) == len(rows) and list(fifo) == list(rows)
    half = ColumnFifo("qq", (None, 7))   # a snapshot of three parts, e.g. hot, packed, tail
    wire = ColumnFifo.concat_wire(fifo, half, fifo)
    again = ColumnFifo("qq", (None, 7))
    again.load_wire(wire)
    assert list(again) == list(rows) * 2


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.lists(st.one_of(st.integers(0, 2**40), st.none()), max_size=40))
def test_packed_ints_match_a_deque(ops):
    model: deque[int] = deque()
    p = PackedInts()
    for op in ops:
        if op is None:
            if model:
                assert p.popleft() == model.popleft()
        else:
            p.append(op)
            model.append(op)
        assert len(p) == len(model) and bool(p) == bool(model) and list(p) == list(model)
        assert list(PackedInts.from_bytes(p.to_bytes())) == list(model)
