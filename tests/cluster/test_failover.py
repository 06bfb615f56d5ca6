"""Failover of a quorum queue in a real 3-node cluster, driven by pika and by aio-pika: declare
on node 1 (which then leads), publish with confirms on node 2, consume with manual acks on node
3; kill -9 the leader mid-stream; every confirmed message must be consumed at least once, and a
message delivered again must say so (redelivered). Then the killed node restarts and catches up:
`amqp-broker-queues quorum_status` shows it in sync, asked on the new leader (its match index
covers the commit index) and on the node itself (it has applied what the leader committed).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading

import aio_pika
import pika
import pytest

from . import probes
from .checker import check
from .history import History

QUEUE = "failover"
TOTAL = 1500        # messages published
KILL_AFTER = 300    # confirmed before the leader is killed
ARGS = {"x-queue-type": "quorum"}


def quorum_status(mgmt_url: str) -> list[dict]:
    """`amqp-broker-queues quorum_status QUEUE --formatter json` against one node."""
    p = subprocess.run([sys.executable, "-m", "amqp_broker.cli.queues_cli", "--url", mgmt_url,
                        "--formatter", "json", "quorum_status", QUEUE],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def _row(rows: list[dict], node: str) -> dict:
    return next(r for r in rows if r["Node Name"] == node)


# -- pika: a publisher thread and a consumer thread ------------------------------------------
def _pika_publisher(url: str, history: History, stop: threading.Event) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    ch.confirm_delivery()
    for n in range(TOTAL):
        mid = f"m{n}"
        history.attempt(mid, "node2")
        try:
            ch.basic_publish("", QUEUE, mid.encode(), pika.BasicProperties(delivery_mode=2),
                             mandatory=True)
        except pika.exceptions.UnroutableError:
            history.outcome(mid, "returned")
        except pika.exceptions.NackError:
            history.outcome(mid, "nack")
        else:
            history.outcome(mid, "ack")
        if stop.is_set():
            break
    conn.close()


def _pika_consumer(url: str, history: History, stop: threading.Event) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=50)
    for method, _p, body in ch.consume(QUEUE, inactivity_timeout=0.1):
        if stop.is_set():
            break
        if method is not None:
            ch.basic_ack(method.delivery_tag)
            history.delivered(body.decode(), "node3", bool(method.redelivered), True)
    conn.close()


def _run_pika(urls: list[str], history: History, stop: threading.Event) -> list[threading.Thread]:
    threads = [threading.Thread(target=_pika_consumer, args=(urls[2], history, stop)),
               threading.Thread(target=_pika_publisher, args=(urls[1], history, stop))]
    for t in threads:
        t.start()
    return threads


# -- aio-pika: one event loop in a thread, publisher and consumer tasks -----------------------
async def _aio_main(urls: list[str], history: History, stop: threading.Event) -> None:
    await asyncio.gather(_aio_consumer(urls[2], history, stop), _aio_publisher(urls[1], history))


async def _aio_publisher(url: str, history: History) -> None:
    conn = await aio_pika.connect(url)
    ch = await conn.channel(publisher_confirms=True, on_return_raises=True)
    for n in range(TOTAL):
        mid = f"m{n}"
        history.attempt(mid, "node2")
        try:
            await ch.default_exchange.publish(
                aio_pika.Message(mid.encode(), delivery_mode=aio_pika.DeliveryMode.PERSISTENT),
                routing_key=QUEUE, mandatory=True, timeout=30)
        except aio_pika.exceptions.PublishError:
            history.outcome(mid, "returned")
        except aio_pika.exceptions.DeliveryError:
            history.outcome(mid, "nack")
        else:
            history.outcome(mid, "ack")
    await conn.close()


async def _aio_consumer(url: str, history: History, stop: threading.Event) -> None:
    conn = await aio_pika.connect(url)
    ch = await conn.channel()
    await ch.set_qos(prefetch_count=50)
    queue = await ch.get_queue(QUEUE, ensure=False)

    async def on_message(msg: aio_pika.abc.AbstractIncomingMessage) -> None:
        await msg.ack()
        history.delivered(msg.body.decode(), "node3", bool(msg.redelivered), True)

    await queue.consume(on_message)
    while not stop.is_set():
        await asyncio.sleep(0.1)
    await conn.close()


def _declare_pika(url: str) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    conn.channel().queue_declare(QUEUE, durable=True, arguments=ARGS)
    conn.close()


async def _declare_aio(url: str) -> None:
    conn = await aio_pika.connect(url)
    await (await conn.channel()).declare_queue(QUEUE, durable=True, arguments=ARGS)
    await conn.close()


def _run_aio(urls: list[str], history: History, stop: threading.Event) -> list[threading.Thread]:
    t = threading.Thread(target=lambda: asyncio.run(_aio_main(urls, history, stop)))
    t.start()
    return [t]


@pytest.mark.parametrize("client", ["pika", "aio-pika"])
def test_leader_killed_mid_stream_loses_nothing_and_catches_up(make_cluster, client):
    pc = make_cluster(3, proxied=False)
    cluster = pc.cluster
    urls = [cluster.urls[i] for i in range(3)]
    if client == "pika":
        _declare_pika(urls[0])
    else:
        asyncio.run(_declare_aio(urls[0]))
    # the other nodes apply the declaration a little after declare-ok (test_metadata.py)
    assert probes.wait_until(lambda: all(probes.queue_on(cluster, i, QUEUE) is not None
                                         for i in range(3)), 10)
    # client-local: the declaring node starts the first election and wins it
    assert probes.wait_until(lambda: probes.leader_index(cluster, QUEUE) == 0, 10), \
        f"the declaring node should lead, not {probes.leader_index(cluster, QUEUE)}"
    history = History()
    stop = threading.Event()
    threads = (_run_pika if client == "pika" else _run_aio)(urls, history, stop)
    try:
        assert probes.wait_until(lambda: history.count("ack") >= KILL_AFTER, 60), \
            "publishing did not start"
        leader = probes.leader_index(cluster, QUEUE)
        # the clients are on the other two nodes; the kill must not take one of them with it
        assert leader == 0, f"node {leader} was elected under load before the kill"
        cluster.kill(leader)
        history.note(f"killed {cluster.names[leader]} at {history.count('ack')} confirmed")
        assert probes.wait_until(lambda: history.count(None) == 0
                                 and len(history.published) == TOTAL, 120), \
            f"publishing stalled after the kill: {history.count('ack')} confirmed"
        cluster.restart(leader)
        assert probes.wait_until(lambda: check(*history.snapshot()).lost == [], 60)
        assert probes.wait_until(lambda: probes.empty_everywhere(cluster, QUEUE), 30), \
            f"(ready, unacked) per node: {probes.counts(cluster, QUEUE)}"
    finally:
        stop.set()
        for t in threads:
            t.join(30)

    report = check(*history.snapshot())
    print(report.summary())
    assert report.confirmed == TOTAL  # the queue took every publish, across the failover
    assert report.lost == [] and report.unexpected == [], report.summary()
    assert report.duplicates_not_redelivered == [], report.summary()

    restarted = cluster.names[leader]
    new_leader = probes.leader_index(cluster, QUEUE)
    assert new_leader is not None and new_leader != leader

    def in_sync() -> bool:
        on_leader = _row(quorum_status(cluster.mgmt_urls[new_leader]), restarted)
        mine = _row(quorum_status(cluster.mgmt_urls[leader]), restarted)
        lead = _row(quorum_status(cluster.mgmt_urls[new_leader]), cluster.names[new_leader])
        return (on_leader["In Sync"] is True and on_leader["Online"] is True
                and mine["Raft State"] == "follower"
                and mine["Last Applied"] == mine["Commit Index"] == lead["Commit Index"]
                and mine["Term"] == lead["Term"])

    assert probes.wait_until(in_sync, 30), (quorum_status(cluster.mgmt_urls[new_leader]),
                                            quorum_status(cluster.mgmt_urls[leader]))
