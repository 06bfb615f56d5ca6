"""`mgmt/rates.py` on its own: rates from two samples, what a missing or idle object shows,
the node's history, and the message_stats breakdown from channel counters."""

from __future__ import annotations

from hypothesis import given, strategies as st

from amqp_broker.mgmt.rates import CHANNEL_KEYS, Rates, channel_stats, queue_stats
from amqp_broker.server.counters import Counters, QueueCounters


def test_rate_is_the_difference_over_the_time_between_samples():
    r = Rates()
    r.record(10.0, {("queue", "/", "q"): {"publish": 10, "messages": 3}})
    first = r.message_stats(("queue", "/", "q"), ("publish",))
    assert first == {"publish": 10, "publish_details": {"rate": 0.0}}
    r.record(12.0, {("queue", "/", "q"): {"publish": 15, "messages": 1}})
    assert r.message_stats(("queue", "/", "q"), ("publish",)) == {
        "publish": 15, "publish_details": {"rate": 2.5}}
    # a gauge going down has a negative delta: shown as 0, as a count cannot flow backwards
    assert r.details(("queue", "/", "q"), ("messages",)) == {"messages_details": {"rate": 0.0}}


def test_unknown_idle_and_forgotten_objects_have_no_message_stats():
    r = Rates()
    assert r.message_stats(("queue", "/", "q"), ("publish",)) is None
    assert r.details(("queue", "/", "q"), ("messages",)) == {}
    r.record(1.0, {("queue", "/", "q"): {"publish": 0}})
    assert r.message_stats(("queue", "/", "q"), ("publish",)) is None  # no activity yet
    r.record(2.0, {})
    assert r.details(("queue", "/", "q"), ("messages",)) == {}


def test_node_history_keeps_samples_within_the_age():
    r = Rates()
    for i in range(5):
        r.record(float(i), {("node",): {"publish": 10 * i, "messages": i, "messages_ready": i,
                                        "messages_unacknowledged": 0}})
    hist = r.node_history(3600, ("publish", "messages"))
    assert [p["sample"] for p in hist["publish"]] == [40, 30, 20, 10, 0]  # newest first
    assert [p["sample"] for p in hist["messages"]] == [4, 3, 2, 1, 0]
    stamps = [p["timestamp"] for p in hist["publish"]]
    assert stamps == sorted(stamps, reverse=True)
    assert len(r.node_history(0, ("publish",))["publish"]) >= 1


@given(no_ack=st.integers(0, 50), got=st.integers(0, 50), got_no_ack=st.integers(0, 50),
       acked_consume=st.integers(0, 50))
def test_channel_breakdown_adds_up_to_deliver_get(no_ack, got, got_no_ack, acked_consume):
    c = Counters()
    c.messages_delivered = no_ack + got + got_no_ack + acked_consume
    c.messages_delivered_no_ack, c.messages_got, c.messages_got_no_ack = no_ack, got, got_no_ack
    s = channel_stats(c)
    assert set(s) == set(CHANNEL_KEYS)
    assert s["deliver"] == acked_consume
    assert s["deliver"] + s["deliver_no_ack"] + s["get"] + s["get_no_ack"] == s["deliver_get"]


def test_counters_fold_and_queue_deliver_get():
    a, b = Counters(), Counters()
    a.messages_received, b.messages_received = 2, 3
    a.add(b)
    assert a.messages_received == 5 and b.messages_received == 3
    q = QueueCounters()
    q.deliver, q.get_no_ack, q.publish = 2, 1, 7
    assert queue_stats(q)["deliver_get"] == 3


def test_a_failing_sample_is_logged_and_the_sampler_goes_on(caplog):
    import trio

    from amqp_broker.mgmt.rates import run_sampler

    calls = []

    def sample():
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("boom")
        return {("node",): {"publish": len(calls)}}

    rates = Rates()

    async def main():
        with trio.move_on_after(0.35):
            await run_sampler(sample, rates, 100)

    trio.run(main)
    assert len(calls) >= 3
    assert "sampling failed" in caplog.text
    assert rates.message_stats(("node",), ("publish",))["publish"] == len(calls)
