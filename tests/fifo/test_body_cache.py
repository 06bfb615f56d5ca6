"""The quorum queue's body cache (`quorum_machine.BodyCache`): when it is full it keeps the
oldest live bodies, the ones a consumer reading the queue from its head wants next, and lets
the bodies of messages no longer live go first."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from amqp_broker.queues.message import Message
from amqp_broker.queues.quorum_machine import BodyCache, QuorumMachine, encode_payload
from quorum.fifo import ConsumerKey, Dequeue, Enqueue, Meta, QueueConfig, Settle, encode_command

from .settings import EXAMPLES


def test_a_full_cache_keeps_the_head_and_refuses_newer_bodies():
    live = {1, 2, 3, 4, 5}
    cache = BodyCache(max_bytes=300, max_count=10)
    for i in range(1, 6):
        cache.put(i, f"m{i}", 100, lambda: min(live))
    assert list(cache.items) == [1, 2, 3]           # 4 and 5 found no room: read from the log
    assert cache.take(1) == "m1"
    live.discard(1)
    cache.put(6, "m6", 100, lambda: min(live))
    assert list(cache.items) == [2, 3, 6] and cache.bytes == 300


def test_bodies_no_longer_live_go_first_when_full():
    cache = BodyCache(max_bytes=10_000, max_count=3)
    for i in (1, 2, 3):
        cache.put(i, f"m{i}", 10, lambda: 1)
    cache.put(4, "m4", 10, lambda: 3)     # 1 and 2 were removed without a delivery
    assert list(cache.items) == [3, 4] and cache.bytes == 20
    cache.put(5, "m5", 10, lambda: 3)
    cache.put(6, "m6", 10, lambda: None)  # full, and nothing live: every older body is stale
    assert list(cache.items) == [6] and cache.bytes == 10


def _machine(cache_bytes: int) -> tuple[QuorumMachine, dict[int, bytes]]:
    log: dict[int, bytes] = {}
    config = QueueConfig(name="q")
    return QuorumMachine(config, reader=log.get, cache_bytes=cache_bytes, cache_count=8192), log


def _message(n: int) -> Message:
    return Message.from_publish("", "q", b"\0\0", b"body %06d" % n + b"." * 200)


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.integers(1, 12), st.lists(st.integers(0, 4), min_size=1, max_size=40))
def test_a_consumer_behind_the_cache_reads_the_head_from_it(cache_n, batches):
    """Enqueue in bursts and take one message at a time from the head, as a consumer behind
    the publisher does, with room in the cache for `cache_n` bodies: every body comes back
    whole, in order, the cache stays within its bounds, and the first `cache_n` of a backlog are
    served from memory, not the log (a cache that dropped its oldest body read them back)."""
    size = _message(0).size
    m, log = _machine(cache_n * size)
    state = m.init()
    getter = ConsumerKey("", "getter", "n")
    index = 0
    sent = 0
    got: list[bytes] = []

    def apply(cmd):
        nonlocal state, index
        index += 1
        log[index] = encode_command(cmd)
        state, reply, _ = m.apply(Meta(index, 1, index), m.decode(log[index]), state)
        return reply

    def take() -> None:
        delivery, message = apply(Dequeue(getter, settled=False))
        got.append(message.body)
        apply(Settle(getter, (delivery.delivery.msg_id,)))

    for burst in batches:
        for _ in range(burst):
            sent += 1
            msg = _message(sent)
            apply(Enqueue("pub", sent, msg.size, encode_payload(msg)))
        if sent > len(got):
            reads_before = m.log_reads
            take()
            if len(got) <= cache_n:   # the head of the backlog was kept
                assert m.log_reads == reads_before
        assert m.cache.bytes <= cache_n * size
    while len(got) < sent:
        take()
    assert got == [_message(i).body for i in range(1, sent + 1)]
