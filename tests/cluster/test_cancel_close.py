"""Messages the leader handed to a consumer that then cancels and closes its channel, before its
node's replica delivered them, go back to the queue.

Found by test_jepsen.py (JEPSEN_SEED=4, 3 nodes): after the drain got stuck (see
test_catch_up.py) the consumers reconnected, and the messages stuck with the old consumer on
rabbit2 still never came back. pika closes a consuming channel with basic.cancel first: the
queue proposed Cancel (the consumer stays, "cancelled", holding what it has checked out), and
the channel forgot the consumer; when the channel then closed, `Channel.release` told a queue
only if the channel held unacked deliveries of it, so no ConsumerDown came and what the
cancelled consumer held stayed checked out for good. Fixed on main (d27d3ab: such a delivery
takes the channel down); this test keeps it so.

Deterministic without any snapshot: the consumer's node is cut off by a stalled link while
the leader hands it messages, so its replica has not delivered them when the client cancels and
closes; when the link heals, the Deliver finds the channel gone.
"""

from __future__ import annotations


import pika

from . import probes
from .checker import Violation
from .history import History
from .workload import ThreadConsumer, declare_queue

QUEUE = "cancelclose"


def test_messages_in_flight_to_a_cancelled_and_closed_consumer_return(make_cluster):
    pc = make_cluster(3)
    cluster = pc.cluster
    declare_queue(cluster.urls[0], QUEUE)  # client-local: rabbit1 leads
    assert probes.on_every_node(cluster, QUEUE)
    far = 2
    conn = pika.BlockingConnection(pika.URLParameters(cluster.urls[far]))
    consumer = conn.channel()
    consumer.basic_qos(prefetch_count=10)
    got: list[bytes] = []
    consumer.basic_consume(QUEUE, lambda ch, m, p, body: got.append(body))
    pub_conn = pika.BlockingConnection(pika.URLParameters(cluster.urls[0]))
    pub = pub_conn.channel()
    pub.confirm_delivery()
    pub.basic_publish("", QUEUE, b"first", mandatory=True)
    assert probes.wait_until(lambda: conn.process_data_events(0.05) or got == [b"first"], 10)
    consumer.basic_ack(1)  # the consumer is checked out and works

    for (i, j), name in pc.links.items():
        if far in (i, j):
            pc.proxy.stall(name)
    ids = [f"m{i}" for i in range(5)]
    for i in ids:  # committed by rabbit1 and rabbit2, handed to the consumer on rabbit3
        pub.basic_publish("", QUEUE, i.encode(), mandatory=True)
    pub_conn.close()
    conn.close()  # basic.cancel, then channel.close and connection.close
    pc.proxy.heal_all()

    history = History()
    fresh = ThreadConsumer(cluster.urls[0], cluster.names[0], history, QUEUE)
    probes.wait_until(lambda: len({d.id for d in history.snapshot()[1]}) == len(ids), 10)
    left = probes.counts(cluster, QUEUE)
    fresh.close()
    missing = [i for i in ids if i not in {d.id for d in history.snapshot()[1]}]
    if missing:
        raise Violation(f"never delivered to a fresh consumer: {missing}; (ready, unacked) "
                        f"per node: {left}")
