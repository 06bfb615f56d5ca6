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
