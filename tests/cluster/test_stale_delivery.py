"""A replica catching up does not deliver to its consumer messages the leader has already taken
back from it: a message seen again after a redelivery elsewhere must not come with
redelivered=false.

Found by test_jepsen.py (duplicates "with a repeat marked redelivered=false", seeds 12 and 14
with 3 nodes, 22 and 23 with 5; and "no body for index" warnings in the broker log). Deliveries
run on the consumer's node when its replica applies the entries that hand it messages. A node
that was cut off applies, when it comes back, a batch holding both those entries and the later
NodeDown that returned the messages (which went to another consumer, redelivered=true); the
effects of the whole batch then run, and the stale Deliver still reaches the consumer, with the
delivery count of the time it was made (0: redelivered=false). When the other consumer has
settled them meanwhile the bodies are gone and the replica logs "no body for index" instead.

Fixed for one batch: the effect runner delivers only what the applied state still has checked
out to the consumer when the effects run (`EffectRunner._deliver` in
amqp_broker/queues/quorum_effects.py). When the NodeDown comes in a later batch than the hand-out
(second test), a replica that is catching up (the leader's commit index, from its Appends, is
ahead of what it applies: `NodeDriver.behind`) holds its deliveries until it has caught up and
then hands out only what is still checked out.

Deterministic: consumer A (on rabbit3, higher priority) is handed messages while rabbit3's links
are stalled, the links are then reset (NodeDown returns them to consumer B on rabbit1, which
holds them unacked), and healed.
"""

from __future__ import annotations


import pika

from . import probes
from .checker import Violation, check
from .history import History
from .workload import ThreadConsumer, declare_queue

QUEUE = "stale"


def test_catching_up_replica_does_not_deliver_messages_already_taken_back(make_cluster):
    pc = make_cluster(3)
    cluster = pc.cluster
    declare_queue(cluster.urls[0], QUEUE)  # client-local: rabbit1 leads
    assert probes.on_every_node(cluster, QUEUE)
    far = 2
    far_links = [name for (i, j), name in pc.links.items() if far in (i, j)]
    history = History()
    a = ThreadConsumer(cluster.urls[far], cluster.names[far], history, QUEUE,
                       prefetch=10, priority=10, ack=True)
    conn = pika.BlockingConnection(pika.URLParameters(cluster.urls[0]))
    ch = conn.channel()
    ch.confirm_delivery()
    ch.basic_publish("", QUEUE, b"first", mandatory=True)
    assert probes.wait_until(lambda: history.snapshot()[1] != [], 10)  # A works
    # and its ack of "first" has settled, so the cut below returns only what A holds
    assert probes.wait_until(lambda: probes.counts(cluster, QUEUE)[0] == (0, 0), 10)
    b = ThreadConsumer(cluster.urls[0], cluster.names[0], history, QUEUE,
                       prefetch=10, priority=0, ack=False)

    for name in far_links:
        pc.proxy.stall(name)
    ids = [f"m{i}" for i in range(5)]
    for i in ids:  # committed by rabbit1+rabbit2, handed to A, which cannot see it yet
        history.attempt(i, cluster.names[0])
        ch.basic_publish("", QUEUE, i.encode(), mandatory=True)
        history.outcome(i, "ack")
    for name in far_links:
        pc.proxy.cut(name)  # the links drop: NodeDown returns A's messages, B gets them
    assert probes.wait_until(
        lambda: {d.id for d in history.snapshot()[1] if d.node == cluster.names[0]} >= set(ids),
        15), "B did not get A's messages after rabbit3 went down"
    pc.proxy.heal_all()
    # rabbit3 catches up (its deliveries go out as it applies); then a moment for them to land
    assert probes.wait_until(lambda: probes.caught_up(cluster, far, QUEUE), 15)
    probes.wait_until(lambda: any(d.node == cluster.names[far] and d.id in ids
                                  for d in history.snapshot()[1]), 1)
    conn.close()
    a.close()
    b.close()
    report = check({"first": "ack", **{i: "ack" for i in ids}}, history.snapshot()[1])
    if report.duplicates_not_redelivered:
        raise Violation("delivered again with redelivered=false after a redelivery:\n"
                        + history.explain(report.duplicates_not_redelivered))


def test_no_stale_delivery_when_the_take_back_comes_in_a_later_batch(make_cluster):
    """The same, with 1500 other messages between the hand-out and the NodeDown, so that the
    catching-up replica applies them in several batches (an Append carries 512 entries at
    most). Found by test_jepsen.py after the fix above (e.g. JEPSEN_SEED=3843844799, 3 nodes:
    "isolate rabbit2 (reset)")."""
    pc = make_cluster(3)
    cluster = pc.cluster
    declare_queue(cluster.urls[0], QUEUE)  # client-local: rabbit1 leads
    assert probes.on_every_node(cluster, QUEUE)
    far = 2
    far_links = [name for (i, j), name in pc.links.items() if far in (i, j)]
    history = History()
    a = ThreadConsumer(cluster.urls[far], cluster.names[far], history, QUEUE,
                       prefetch=10, priority=0, ack=True)
    conn = pika.BlockingConnection(pika.URLParameters(cluster.urls[0]))
    ch = conn.channel()
    ch.confirm_delivery()
    ch.basic_publish("", QUEUE, b"first", mandatory=True)
    assert probes.wait_until(lambda: history.snapshot()[1] != [], 10)  # A works
    # and its ack of "first" has settled, so the cut below returns only what A holds
    assert probes.wait_until(lambda: probes.counts(cluster, QUEUE)[0] == (0, 0), 10)

    for name in far_links:
        pc.proxy.stall(name)
    ids = [f"m{i}" for i in range(10)]  # A's prefetch: all handed to A
    for i in ids:
        history.attempt(i, cluster.names[0])
        ch.basic_publish("", QUEUE, i.encode(), mandatory=True)
        history.outcome(i, "ack")
    fillers = [f"f{i}" for i in range(1500)]  # wait in the queue: nobody has credit
    for i in fillers:
        history.attempt(i, cluster.names[0])
        ch.basic_publish("", QUEUE, i.encode(), mandatory=True)
        history.outcome(i, "ack")
    for name in far_links:
        pc.proxy.cut(name)  # NodeDown returns A's ten to the head of the queue
    assert probes.wait_until(lambda: probes.counts(cluster, QUEUE)[0] == (len(ids) + 1500, 0),
                             15), f"A's messages did not come back: {probes.counts(cluster, QUEUE)}"
    b = ThreadConsumer(cluster.urls[0], cluster.names[0], history, QUEUE,
                       prefetch=10, priority=0, ack=False)
    assert probes.wait_until(
        lambda: {d.id for d in history.snapshot()[1] if d.node == cluster.names[0]} >= set(ids),
        15), "B did not get A's messages after rabbit3 went down"
    pc.proxy.heal_all()
    assert probes.wait_until(lambda: probes.caught_up(cluster, far, QUEUE), 30)
    probes.wait_until(lambda: any(d.node == cluster.names[far] and d.id in ids
                                  for d in history.snapshot()[1]), 1)
    conn.close()
    a.close()
    b.close()
    report = check({"first": "ack", **{i: "ack" for i in ids + fillers}},
                   history.snapshot()[1])
    if report.duplicates_not_redelivered:
        raise Violation("delivered again with redelivered=false after a redelivery:\n"
                        + history.explain(report.duplicates_not_redelivered))
