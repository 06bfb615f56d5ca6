"""GroupLog's lookup of where an entry lives (`_locate`), against the rule it implements.

The rule, from quorum/log/group.py: an index is served by the newest source (memory tables
newest first, then segments newest first) that contains it, valid up to just below the first
index of any newer source starting above it, and never past `last_index`. The lookup bisects
segments that do not overlap; these tests check it gives what the rule gives, for ordered and
overlapping layouts alike.
"""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from quorum.log.group import GroupLog, Mem
from quorum.log.segment import SegmentInfo


def _by_the_rule(g: GroupLog, index: int):
    sources = [(m.first, m.end - 1, m) for m in reversed(g.mems) if m.items]
    sources += [(s.first, s.last_written, s) for s in reversed(g.segments)]
    bound = g.last_index
    for first, last, src in sources:
        if first <= index <= last:
            return src, min(last, bound)
        if first > index:
            bound = min(bound, first - 1)
    return None


def _segment(counter: int, first: int, last: int) -> SegmentInfo:
    return SegmentInfo(f"/nonexistent/{counter}-{first}-{last}.seg", counter, first, last)


ranges = st.lists(st.tuples(st.integers(1, 200), st.integers(0, 40)), max_size=12)


@settings(max_examples=300, deadline=None)
@given(segs=ranges, mems=st.lists(st.tuples(st.integers(1, 260), st.integers(0, 20)), max_size=3),
       ordered=st.booleans(), last_index=st.integers(0, 300))
def test_lookup_follows_the_rule(segs, mems, ordered, last_index):
    if ordered:  # consecutive or with gaps, never overlapping: the bisected layout
        laid, nxt = [], 1
        for gap, length in segs:
            first = nxt + gap % 3
            laid.append((first, first + length))
            nxt = first + length + 1
    else:
        laid = [(first, first + length) for first, length in segs]
    g = GroupLog("g", "/nonexistent")
    g.segments = [_segment(i, first, last) for i, (first, last) in enumerate(laid)]
    g.mems = []
    for first, length in mems:
        m = Mem(first)
        m.items = [(1, b"")] * length
        g.mems.append(m)
    if not g.mems:
        g.mems = [Mem()]
    g.last_index = last_index
    for index in range(0, 320):
        assert g._locate(index) == _by_the_rule(g, index), index


def test_a_deep_log_of_ordered_segments_is_bisected_and_overlaps_fall_back():
    g = GroupLog("g", "/nonexistent")
    g.segments = [_segment(i, 1 + 100 * i, 100 * (i + 1)) for i in range(3000)]
    g.last_index = 300_000
    src, upto = g._locate(150)
    assert (src.first, upto) == (101, 200)
    assert g._locate(300_001) is None
    # a newer segment that rewrote from index 150 on: the older one serves only up to 149
    g.segments = g.segments[:2] + [_segment(9999, 150, 160)]
    assert g._seg_firsts is None
    src, upto = g._locate(120)
    assert (src.first, upto) == (101, 149)
    assert g._locate(155)[0].counter == 9999
