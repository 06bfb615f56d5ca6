"""A classic queue's publisher flow (classic.py's FLOW_READY): past the flow mark, while a
consumer keeps up, the queue asks its publishers to pause until it is under half the mark; a
consumer that does not keep up sets the pace itself and the backlog grows, as RabbitMQ's."""

from amqp_broker.queues import ClassicQueue
from amqp_broker.queues.classic import _FLOW_MIN, DEFAULT_MEMORY_BUDGET, ENTRY_OVERHEAD, FLOW_READY

from .helpers import consumer, msg


class Pace:
    """A consumer's `keeping_up`, set by the test."""

    def __init__(self, keeping_up: bool = True) -> None:
        self.value = keeping_up

    def __call__(self) -> bool:
        return self.value


def _queue_with_consumer(keeping_up: bool = True, prefetch: int | None = 0):
    q = ClassicQueue("q")
    c = consumer("c", prefetch=prefetch)
    pace = Pace(keeping_up)
    c.keeping_up = pace
    q.add_consumer(c, 0)
    return q, c, pace


def _publish_until_flow(q: ClassicQueue, body: bytes, limit: int) -> int:
    sent = 0
    while not q.flow and sent < limit:
        q.publish(msg(body), 0)
        sent += 1
    return sent


def test_small_messages_ask_for_flow_past_the_count_mark_and_go_on_under_half_of_it():
    q, c, _ = _queue_with_consumer(prefetch=0)  # its window is full: nothing dispatched yet
    sent = _publish_until_flow(q, b"x", 2 * FLOW_READY)
    assert q.flow and FLOW_READY < sent <= FLOW_READY + 16
    ended: list[str] = []
    q.when_flow_ends(lambda: ended.append("a"))
    q.when_flow_ends(lambda: ended.append("b"))
    c.take_credit.n = q.message_count - FLOW_READY // 2 - 1
    q.dispatch(0)
    assert q.flow and not ended  # one above half the mark
    c.take_credit.n = 1
    q.dispatch(0)
    assert not q.flow and ended == ["a", "b"]
    q.when_flow_ends(lambda: ended.append("now"))  # no flow: called at once
    assert ended[-1] == "now"


def test_large_messages_ask_for_flow_once_past_the_memory_budget():
    q, _, _ = _queue_with_consumer(prefetch=0)
    body = b"x" * (64 << 10)
    sent = _publish_until_flow(q, body, FLOW_READY)
    assert q.flow
    assert sent * (len(body) + ENTRY_OVERHEAD) > DEFAULT_MEMORY_BUDGET and sent < FLOW_READY // 4
    assert sent > _FLOW_MIN


def test_no_flow_while_no_consumer_keeps_up_or_without_consumers():
    q, _, pace = _queue_with_consumer(keeping_up=False, prefetch=0)
    assert _publish_until_flow(q, b"x", 3 * FLOW_READY) == 3 * FLOW_READY and not q.flow
    lone = ClassicQueue("lone")
    assert _publish_until_flow(lone, b"x", 3 * FLOW_READY) == 3 * FLOW_READY
    assert not lone.flow
    pace.value = True  # the consumer catches up: the next check asks
    assert _publish_until_flow(q, b"x", 32) <= 16 and q.flow


def test_flow_ends_when_the_consumer_stops_keeping_up_leaves_or_the_queue_is_purged():
    ended: list[str] = []
    q, c, pace = _queue_with_consumer(prefetch=0)
    _publish_until_flow(q, b"x", 2 * FLOW_READY)
    q.when_flow_ends(lambda: ended.append("slow"))
    pace.value = False
    q.dispatch(0)  # nothing delivered, and its consumer lags now: the backlog is its pace
    assert not q.flow and ended == ["slow"]

    q, c, _ = _queue_with_consumer(prefetch=0)
    _publish_until_flow(q, b"x", 2 * FLOW_READY)
    q.when_flow_ends(lambda: ended.append("left"))
    q.remove_consumer(c.channel, c.tag, 0)
    assert not q.flow and ended[-1] == "left"

    q, c, _ = _queue_with_consumer(prefetch=0)
    _publish_until_flow(q, b"x", 2 * FLOW_READY)
    q.when_flow_ends(lambda: ended.append("purged"))
    q.purge()
    assert not q.flow and ended[-1] == "purged"
