"""`ReadyQueue.head(n)` looks at the messages `pop` would hand out next, in the same order,
without changing the queue (the management API's get on a quorum queue relies on it)."""
from hypothesis import given, settings
from hypothesis import strategies as st

from quorum.fifo.messages import Message, ReadyQueue

from .settings import EXAMPLES

# ops: ("push", high?), ("return",), ("pop",)
_ops = st.lists(st.one_of(st.tuples(st.just("push"), st.booleans()),
                          st.tuples(st.just("return")), st.tuples(st.just("pop"))),
                max_size=40)


def _build(ops) -> ReadyQueue:
    q = ReadyQueue()
    index = 0
    for op in ops:
        if op[0] == "push":
            index += 1
            q.push(Message(index, 1, hi=op[1]))
        elif op[0] == "return":
            index += 1
            q.push_return(Message(index, 1))
        else:
            q.pop()
    return q


@settings(max_examples=EXAMPLES)
@given(_ops, st.integers(min_value=0, max_value=50))
def test_head_is_what_pop_gives_next(ops, n):
    q = _build(ops)
    before = (len(q), q.bytes, q.counter)
    seen = [m.index for m in q.head(n)]
    assert (len(q), q.bytes, q.counter) == before  # untouched
    popped = []
    while len(popped) < n and (m := q.pop()) is not None:
        popped.append(m.index)
    assert seen == popped


def test_head_serves_high_two_to_one():
    q = ReadyQueue()
    for i, hi in enumerate([False, False, True, True, True, True], start=1):
        q.push(Message(i, 1, hi=hi))
    q.push_return(Message(7, 1))
    assert [m.index for m in q.head(10)] == [7, 3, 4, 1, 5, 6, 2]


# -- strict levels (a mirrored classic queue's x-max-priority) -----------------------------
_strict_ops = st.lists(st.one_of(st.tuples(st.just("push"), st.integers(0, 5)),
                                 st.tuples(st.just("pop"),)), max_size=60)


@settings(max_examples=EXAMPLES)
@given(_strict_ops, st.integers(min_value=0, max_value=60))
def test_strict_levels_pop_the_highest_level_first_fifo_within(ops, n):
    """Against a model (highest level first, then index order): pop, head and a wire round
    trip (a snapshot) agree; bytes and length are counted."""
    q, model, index = ReadyQueue(), [], 0
    for op in ops:
        if op[0] == "push":
            index += 1
            q.push(Message(index, 2, hi=op[1]))
            model.append((op[1], index))
        else:
            got = q.pop()
            want = min(model, key=lambda m: (-m[0], m[1])) if model else None
            assert (got.index if got else None) == (want[1] if want else None)
            if want:
                model.remove(want)
    assert len(q) == len(model) and q.bytes == 2 * len(model)
    expected = [i for _, i in sorted(model, key=lambda m: (-m[0], m[1]))]
    assert [m.index for m in q.head(n)] == expected[:n]
    copy = ReadyQueue.from_wire(q.to_wire())
    assert [m.index for m in copy.clear()] == expected == [m.index for m in q.head(len(q))]


def test_strict_levels_in_the_machine_cap_priorities_at_the_maximum():
    """A mirrored classic queue's config (max_priority 3): priorities above 3 share level 3,
    unset is 0, and higher levels are served first whatever came first."""
    from quorum.fifo import Checkout, QueueConfig

    from .harness import C1, Harness, delivered
    h = Harness(QueueConfig(name="q", max_priority=3, delivery_limit=None))
    for p in (None, 1, 9, 3, 0, 2):
        h.publish(priority=p)
    order = [d.index for d in delivered(h(Checkout(C1, prefetch=10)))]
    assert order == [3, 4, 6, 2, 1, 5]
