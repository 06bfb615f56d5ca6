"""Once a declaration's -ok came back on one node, clients of every other node see it: a
publish on node 2 right after exchange.declare / queue.declare / queue.bind on node 1 routes.

RabbitMQ 3.x commits a declaration on every node before it answers -ok (a Mnesia transaction),
so an application may declare through one node and publish through another. Found while writing
test_failover.py ("declare on node 1, publish on node 2"): the -ok came once the declaring node
had applied the change, and a publish on another node in between was unroutable (a quorum
queue: NO_ROUTE, about half the time) or refused (an exchange: 404). Now the -ok waits until
every node that is up has applied it; the first test keeps it so.

The second: a non-durable exchange is cluster-wide too (RabbitMQ keeps transient exchanges on
every node); it was first not replicated at all, so other nodes answered 404 for it.
"""

from __future__ import annotations

import pika
import pika.exceptions
import pytest

from . import probes
from .checker import Violation
from .workload import QUORUM_ARGS

ROUNDS = 10


def _publish_after_declaring(cluster, *, durable: bool) -> list[str]:
    """Declare exchange, quorum queue and binding on node 1, publish through each at once on
    node 2; what went wrong, per round."""
    c1 = pika.BlockingConnection(pika.URLParameters(cluster.urls[0]))
    c2 = pika.BlockingConnection(pika.URLParameters(cluster.urls[1]))
    declare = c1.channel()
    tag = "d" if durable else "t"
    failures = []
    try:
        for i in range(ROUNDS):
            pub = c2.channel()
            pub.confirm_delivery()
            declare.exchange_declare(f"x{tag}{i}", "direct", durable=durable)
            declare.queue_declare(f"q{tag}{i}", durable=True, arguments=QUORUM_ARGS)
            declare.queue_bind(f"q{tag}{i}", f"x{tag}{i}", "k")
            try:
                pub.basic_publish(f"x{tag}{i}", "k", b"m", mandatory=True)
            except pika.exceptions.UnroutableError:
                failures.append(f"x{tag}{i}: returned unroutable")
            except pika.exceptions.ChannelClosedByBroker as e:
                failures.append(f"x{tag}{i}: {e.reply_code} {e.reply_text}")
    finally:
        c1.close()
        c2.close()
    return failures


@pytest.fixture
def cluster3(make_cluster):
    return make_cluster(3, proxied=False).cluster


def test_publish_on_another_node_right_after_declare_routes(cluster3):
    failures = _publish_after_declaring(cluster3, durable=True)
    assert not failures, f"{len(failures)}/{ROUNDS} publishes on node 2 failed: {failures[:3]}"


def test_a_transient_exchange_is_known_on_every_node(cluster3):
    failures = _publish_after_declaring(cluster3, durable=False)
    # not just late: still unknown on node 2 a while later
    c2 = pika.BlockingConnection(pika.URLParameters(cluster3.urls[1]))

    def known() -> bool:
        try:
            c2.channel().exchange_declare("xt0", passive=True)
            return True
        except pika.exceptions.ChannelClosedByBroker:
            return False

    later = probes.wait_until(known, 3)
    c2.close()
    if failures or not later:
        raise Violation(f"{len(failures)}/{ROUNDS} publishes on node 2 failed "
                        f"({failures[:2]}); known on node 2 3 s later: {later}")
