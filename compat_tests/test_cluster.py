"""What clients of a 3-node cluster see, the same against this broker and a RabbitMQ 3.10 cluster.

Against this broker (the default) the module starts a `LocalCluster` of `amqp-broker`
processes; with env `COMPAT_RABBIT_CLUSTER=BASEPORT` it starts a RabbitMQ 3.10 cluster with
`.ci/rabbitmq.sh cluster start 3 BASEPORT` instead (scripts/run-tests.sh does). Taking a node
down is `kill -9` + restart for ours and `rabbitmqctl stop_app` / `start_app` for RabbitMQ: both
make the node unavailable to the others. Run against a single given broker (`--broker-url`)
these tests need a cluster and are skipped.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pika
import pytest

from compat_tests.support.cluster import LocalCluster
from compat_tests.support.pika_util import declared

ROOT = Path(__file__).resolve().parent.parent
RABBIT = os.environ.get("COMPAT_RABBIT_CLUSTER")

pytestmark = pytest.mark.timeout(180)


class _Ours:
    def __init__(self, root: Path) -> None:
        self.c = LocalCluster(root, 3).start()
        self.urls = self.c.urls
        self.names = self.c.names
        self.mgmt = self.c.mgmt_urls

    def down(self, i: int) -> None:
        self.c.kill(i)

    def queues(self, i: int, *args: str) -> subprocess.CompletedProcess:
        """amqp-broker-queues ARGS against node i."""
        import sys
        return subprocess.run([sys.executable, "-m", "amqp_broker.cli.queues_cli", "--url",
                               self.mgmt[i], *args], capture_output=True, text=True, timeout=120)

    def up(self, i: int) -> None:
        self.c.restart(i)

    def ctl(self, i: int, *args: str) -> subprocess.CompletedProcess:
        """amqp-brokerctl ARGS against node i."""
        import sys
        return subprocess.run([sys.executable, "-m", "amqp_broker.cli.ctl", "--url",
                               self.mgmt[i], *args], capture_output=True, text=True, timeout=120)

    def restart_all(self) -> None:
        """Every node down at once, then all of them up again."""
        for i in range(len(self.urls)):
            self.c.kill(i)
        for i in range(len(self.urls)):
            self.c.restart(i, wait=False)
        self.c.wait_formed(60)

    def close(self) -> None:
        self.c.close()


class _Rabbit:
    def __init__(self, base: int) -> None:
        self.ports = [base + i for i in range(3)]
        out = subprocess.run(["bash", str(ROOT / ".ci/rabbitmq.sh"), "cluster", "start", "3",
                              str(base)], capture_output=True, text=True, timeout=300)
        if out.returncode != 0:
            raise RuntimeError(f"RabbitMQ cluster did not start:\n{out.stderr[-2000:]}")
        self.urls = [f"amqp://guest:guest@127.0.0.1:{p}/" for p in self.ports]
        self.names = [f"compat{p}@localhost" for p in self.ports]
        self.mgmt = [f"http://127.0.0.1:{p + 10000}" for p in self.ports]

    def _ctl(self, i: int, *args: str) -> None:
        subprocess.run(["bash", str(ROOT / ".ci/rabbitmq.sh"), "ctl", str(self.ports[i]), *args],
                       check=True, capture_output=True, timeout=120)

    def ctl(self, i: int, *args: str) -> subprocess.CompletedProcess:
        """rabbitmqctl ARGS against node i."""
        return subprocess.run(["bash", str(ROOT / ".ci/rabbitmq.sh"), "ctl", str(self.ports[i]),
                               *args], capture_output=True, text=True, timeout=120)

    def down(self, i: int) -> None:
        self._ctl(i, "stop_app")

    def queues(self, i: int, *args: str) -> subprocess.CompletedProcess:
        """rabbitmq-queues ARGS against node i."""
        return subprocess.run(["bash", str(ROOT / ".ci/rabbitmq.sh"), "queues",
                               str(self.ports[i]), *args], capture_output=True, text=True,
                              timeout=120)

    def up(self, i: int) -> None:
        self._ctl(i, "start_app")
        self._ctl(i, "await_startup")

    def restart_all(self) -> None:
        """Every node's app stopped, then all started together (each waits for the others)."""
        for i in reversed(range(len(self.ports))):
            self._ctl(i, "stop_app")
        starts = [subprocess.Popen(["bash", str(ROOT / ".ci/rabbitmq.sh"), "ctl", str(port),
                                    "start_app"], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL) for port in self.ports]
        for proc in starts:
            proc.wait(timeout=300)
        for i in range(len(self.ports)):
            self._ctl(i, "await_startup")

    def close(self) -> None:
        subprocess.run(["bash", str(ROOT / ".ci/rabbitmq.sh"), "cluster", "stop", "3",
                        str(self.ports[0])], capture_output=True, timeout=300)


@pytest.fixture(scope="module")
def cluster(request, tmp_path_factory):
    if RABBIT:
        c = _Rabbit(int(RABBIT))
    elif request.config.getoption("--broker-url") or os.environ.get("BROKER_URL"):
        pytest.skip("cluster tests need a cluster: COMPAT_RABBIT_CLUSTER=BASEPORT for RabbitMQ")
    else:
        c = _Ours(tmp_path_factory.mktemp("compat-cluster"))
    try:
        yield c
    finally:
        c.close()


def _conn(url: str) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.URLParameters(url + "?heartbeat=0"))


def _until(fn, timeout: float = 30.0, what: str = ""):
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = fn()
            if value:
                return value
        except (pika.exceptions.AMQPError, OSError):
            if time.monotonic() > deadline:
                raise
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.2)


def _consume(url: str, queue: str, n: int, timeout: float = 30.0) -> list[tuple[bytes, bool]]:
    conn = _conn(url)
    ch = conn.channel()
    ch.basic_qos(prefetch_count=50)
    got: list = []
    ch.basic_consume(queue, lambda c, m, p, b: (got.append((b, m.redelivered)),
                                                 c.basic_ack(m.delivery_tag)))
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        conn.process_data_events(0.1)
    conn.close()
    return got


def test_declare_on_one_node_publish_on_another_consume_on_a_third(cluster):
    a = _conn(cluster.urls[0])
    ch = a.channel()
    ch.exchange_declare("cc.x", "direct", durable=True)
    ch.queue_declare("cc.qq", durable=True, arguments={"x-queue-type": "quorum"})
    ch.queue_bind("cc.qq", "cc.x", "k")
    a.close()
    b = _conn(cluster.urls[1])
    ch = b.channel()
    ch.confirm_delivery()
    for i in range(100):
        ch.basic_publish("cc.x", "k", b"%d" % i, pika.BasicProperties(delivery_mode=2),
                         mandatory=True)
    b.close()
    got = _consume(cluster.urls[2], "cc.qq", 100)
    assert [body for body, _ in got] == [b"%d" % i for i in range(100)]
    assert not any(redelivered for _, redelivered in got)
    c = _conn(cluster.urls[2])
    c.channel().queue_delete("cc.qq")
    c.channel().exchange_delete("cc.x")
    c.close()


def test_a_classic_queue_is_used_from_every_node(cluster):
    a = _conn(cluster.urls[0])
    a.channel().queue_declare("cc.classic", durable=True)
    a.close()
    b = _conn(cluster.urls[1])
    ch = b.channel()
    ch.confirm_delivery()
    _until(lambda: ch.queue_declare("cc.classic", passive=True), what="cc.classic on node 2")
    for i in range(5):
        ch.basic_publish("", "cc.classic", b"%d" % i, pika.BasicProperties(delivery_mode=2))
    b.close()
    c = _conn(cluster.urls[2])
    ch = c.channel()
    method, _, body = ch.basic_get("cc.classic")
    assert body == b"0" and method.message_count == 4
    ch.basic_reject(method.delivery_tag, requeue=True)
    got = _consume(cluster.urls[2], "cc.classic", 5)
    assert sorted(body for body, _ in got) == [b"%d" % i for i in range(5)]
    assert (b"0", True) in got
    ch.queue_delete("cc.classic")
    c.close()


def test_counts_of_a_classic_queue_on_another_node_are_current(cluster):
    """A passive declare (and a redeclare) on any node answers the home queue's counts as
    they are now, not as they were some seconds ago: publish with confirms on the home node,
    and the other nodes' declare-ok at once shows every message; a consumer added there shows
    at once too; a purge from another node answers how many it removed."""
    a = _conn(cluster.urls[0])
    ach = a.channel()
    ach.queue_declare("cc.counts", durable=True)
    b = _conn(cluster.urls[1])
    bch = b.channel()
    _until(lambda: bch.queue_declare("cc.counts", passive=True), what="cc.counts on node 2")
    ach.confirm_delivery()
    for round_ in range(3):
        for i in range(7):
            ach.basic_publish("", "cc.counts", b"%d" % i, pika.BasicProperties(delivery_mode=2))
        ok = bch.queue_declare("cc.counts", passive=True)
        assert ok.method.message_count == 7 * (round_ + 1)
        assert bch.queue_declare("cc.counts", durable=True).method.message_count == 7 * (round_ + 1)
    c = _conn(cluster.urls[2])
    cch = c.channel()
    ok = cch.queue_declare("cc.counts", passive=True)
    assert (ok.method.message_count, ok.method.consumer_count) == (21, 0)
    assert cch.queue_purge("cc.counts").method.message_count == 21
    assert bch.queue_declare("cc.counts", passive=True).method.message_count == 0
    ach.basic_consume("cc.counts", lambda *args: None)
    ok = bch.queue_declare("cc.counts", passive=True)
    assert (ok.method.message_count, ok.method.consumer_count) == (0, 1)
    cch.queue_delete("cc.counts")
    for conn in (a, b, c):
        conn.close()


def test_a_classic_queue_whose_node_is_down_is_not_found_elsewhere(cluster):
    a = _conn(cluster.urls[0])
    a.channel().queue_declare("cc.home", durable=True)
    a.close()
    cluster.down(0)
    try:
        b = _conn(cluster.urls[1])

        def refused() -> str | None:
            try:
                b.channel().queue_declare("cc.home", passive=True)
            except pika.exceptions.ChannelClosedByBroker as err:
                return f"{err.reply_code} {err.reply_text}"
            return None

        text = _until(refused, what="cc.home unavailable on node 2")
        assert text == (f"404 NOT_FOUND - home node '{cluster.names[0]}' of durable queue "
                        "'cc.home' in vhost '/' is down or inaccessible")
        b.close()
    finally:
        cluster.up(0)
    c = _conn(cluster.urls[1])
    _until(lambda: c.channel().queue_declare("cc.home", passive=True), what="cc.home back")
    c.channel().queue_delete("cc.home")
    c.close()


def test_a_quorum_queue_keeps_serving_when_one_member_is_down(cluster):
    a = _conn(cluster.urls[0])
    ch = a.channel()
    ch.queue_declare("cc.survivor", durable=True, arguments={"x-queue-type": "quorum"})
    ch.confirm_delivery()
    for i in range(10):
        ch.basic_publish("", "cc.survivor", b"%d" % i, pika.BasicProperties(delivery_mode=2))
    a.close()
    cluster.down(0)  # the declaring node: the queue's first leader
    try:
        b = _conn(cluster.urls[1])
        ch = b.channel()
        ch.confirm_delivery()
        for i in range(10, 20):
            _until(lambda: ch.basic_publish("", "cc.survivor", b"%d" % i,
                                            pika.BasicProperties(delivery_mode=2)) or True,
                   what="a confirmed publish with one member down")
        b.close()
        got = _consume(cluster.urls[2], "cc.survivor", 20)
        assert sorted(int(body) for body, _ in got) == list(range(20))
    finally:
        cluster.up(0)
    c = _conn(cluster.urls[2])
    c.channel().queue_delete("cc.survivor")
    c.close()


def _classic_homes(cluster) -> dict[str, int]:
    """Classic queues per home node, from the management API of node 0."""
    import httpx
    rows = httpx.get(f"{cluster.mgmt[0]}/api/queues", auth=("guest", "guest"), timeout=10).json()
    homes = {name: 0 for name in cluster.names}
    for row in rows:
        if row.get("type", "classic") == "classic" and row.get("node") in homes:
            homes[row["node"]] += 1
    return homes


def test_master_locator_min_masters_puts_a_classic_queue_on_a_less_busy_node(cluster):
    import httpx
    conn = _conn(cluster.urls[0])
    ch = conn.channel()
    homes = _classic_homes(cluster)
    k = 0  # node 0 homes more classic queues than any other node
    while homes[cluster.names[0]] <= max(v for n, v in homes.items() if n != cluster.names[0]):
        ch.queue_declare(f"ml.local.{k}", durable=True,
                         arguments={"x-queue-master-locator": "client-local"})
        homes[cluster.names[0]] += 1
        k += 1
    ch.queue_declare("ml.spread", durable=True, arguments={"x-queue-master-locator": "min-masters"})

    def home() -> str:
        r = httpx.get(f"{cluster.mgmt[0]}/api/queues/%2F/ml.spread", auth=("guest", "guest"),
                      timeout=10)
        return r.json().get("node", "") if r.status_code == 200 else ""

    where = _until(home, what="ml.spread listed")
    assert where in cluster.names[1:], (where, homes)
    # used through node 0 as any queue: publish with confirms, get
    ch.confirm_delivery()
    ch.basic_publish("", "ml.spread", b"here", pika.BasicProperties(delivery_mode=2))
    method, _, body = ch.basic_get("ml.spread", auto_ack=True)
    assert body == b"here"
    conn.close()


def test_a_mirrored_queue_survives_its_master_and_cancels_failover_consumers(cluster):
    """ha-mode exactly 2 (RabbitMQ 3.10's classic mirroring; ours on Raft): every confirmed
    message is still there after the master's node goes down, served by another node, and a
    consumer that asked with x-cancel-on-ha-failover hears basic.cancel."""
    import httpx
    r = httpx.put(f"{cluster.mgmt[0]}/api/policies/%2F/compat-ha", auth=("guest", "guest"),
                  timeout=10, json={"pattern": r"^compat-ha\.", "apply-to": "queues",
                                    "definition": {"ha-mode": "exactly", "ha-params": 2}})
    assert r.status_code in (201, 204), r.text
    conn = _conn(cluster.urls[0])
    ch = conn.channel()
    ch.queue_declare("compat-ha.q", durable=True)

    def row() -> dict:
        got = httpx.get(f"{cluster.mgmt[0]}/api/queues/%2F/compat-ha.q",
                        auth=("guest", "guest"), timeout=10)
        return got.json() if got.status_code == 200 else {}

    mirrored = _until(lambda: row().get("synchronised_slave_nodes") and row(),
                      what="compat-ha.q mirrored and in sync")
    master = cluster.names.index(mirrored["node"])
    others = [i for i in range(3) if i != master]
    ch.confirm_delivery()
    bodies = [b"ha%d" % i for i in range(200)]
    for body in bodies:
        ch.basic_publish("", "compat-ha.q", body, pika.BasicProperties(delivery_mode=2))
    conn.close()

    watcher = _conn(cluster.urls[others[1]])
    wch = watcher.channel()
    cancelled: list = []
    wch.add_on_cancel_callback(lambda frame: cancelled.append(frame.method.consumer_tag))
    wch.basic_qos(prefetch_count=1)
    wch.basic_consume("compat-ha.q", lambda c, m, p, b: None, consumer_tag="compat-watcher",
                      arguments={"x-cancel-on-ha-failover": True})
    watcher.process_data_events(0.5)
    cluster.down(master)
    try:
        deadline = time.monotonic() + 30
        while not cancelled and time.monotonic() < deadline:
            watcher.process_data_events(0.1)
        assert cancelled == ["compat-watcher"]
        watcher.close()
        got = _consume(cluster.urls[others[0]], "compat-ha.q", 200)
        assert [b for b, _ in got] == bodies
    finally:
        cluster.up(master)


def _policy(cluster, name: str, pattern: str, definition: dict) -> None:
    import httpx
    r = httpx.put(f"{cluster.mgmt[0]}/api/policies/%2F/{name}", auth=("guest", "guest"),
                  timeout=10, json={"pattern": pattern, "apply-to": "queues",
                                    "definition": definition})
    assert r.status_code in (201, 204), r.text


def test_a_mirrored_queue_checks_if_empty_and_if_unused_on_delete(cluster):
    """A mirrored queue is a classic queue to its clients: queue.delete with if-empty /
    if-unused is 406 while it holds messages / has a consumer, and deletes once it does not
    (a quorum queue refuses both flags with 540)."""
    _policy(cluster, "compat-hadel", r"^compat-hadel\.", {"ha-mode": "all"})
    conn = _conn(cluster.urls[0])
    ch = conn.channel()
    ch.queue_declare("compat-hadel.q", durable=True)
    _until(lambda: _row(cluster, 0, "compat-hadel.q").get("synchronised_slave_nodes"),
           what="compat-hadel.q mirrored")
    ch.confirm_delivery()
    ch.basic_publish("", "compat-hadel.q", b"x", pika.BasicProperties(delivery_mode=2))
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as full:
        ch.queue_delete("compat-hadel.q", if_empty=True)
    assert full.value.reply_code == 406 and "not empty" in full.value.reply_text
    ch = conn.channel()
    ch.queue_purge("compat-hadel.q")
    other = conn.channel()
    other.basic_consume("compat-hadel.q", lambda *a: None)
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as used:
        ch.queue_delete("compat-hadel.q", if_unused=True)
    assert used.value.reply_code == 406 and "in use" in used.value.reply_text
    other.close()
    ch = conn.channel()
    assert ch.queue_delete("compat-hadel.q", if_unused=True, if_empty=True).method.message_count == 0
    conn.close()
    import httpx
    httpx.delete(f"{cluster.mgmt[0]}/api/policies/%2F/compat-hadel", auth=("guest", "guest"),
                 timeout=10)


def _row(cluster, i: int, name: str) -> dict:
    import httpx
    got = httpx.get(f"{cluster.mgmt[i]}/api/queues/%2F/{name}", auth=("guest", "guest"),
                    timeout=10)
    return got.json() if got.status_code == 200 else {}


def _publish(url: str, queue: str, bodies: list[bytes]) -> None:
    conn = _conn(url)
    ch = conn.channel()
    ch.confirm_delivery()
    for body in bodies:
        ch.basic_publish("", queue, body, pika.BasicProperties(delivery_mode=2))
    conn.close()


def test_an_ha_policy_mirrors_a_classic_queue_that_already_has_messages(cluster):
    """A policy added to an existing classic queue mirrors it at once (with ha-sync-mode
    automatic its messages are copied to the mirror); its master's node going down loses
    nothing."""
    conn = _conn(cluster.urls[0])
    conn.channel().queue_declare("compat-conv.q", durable=True)
    conn.close()
    bodies = [b"conv%d" % i for i in range(100)]
    _publish(cluster.urls[0], "compat-conv.q", bodies)
    assert not _row(cluster, 0, "compat-conv.q").get("slave_nodes")

    _policy(cluster, "compat-conv", r"^compat-conv\.",
            {"ha-mode": "exactly", "ha-params": 2, "ha-sync-mode": "automatic"})

    def in_sync() -> dict:
        row = _row(cluster, 0, "compat-conv.q")
        mirrors = row.get("slave_nodes")
        return (mirrors and sorted(mirrors) == sorted(row.get("synchronised_slave_nodes"))
                and row.get("messages") == 100 and row)  # RabbitMQ's counts come later

    row = _until(in_sync, what="compat-conv.q mirrored, every mirror in sync")
    assert row["node"] == cluster.names[0]
    cluster.down(0)
    try:
        got = _consume(cluster.urls[1], "compat-conv.q", 100)
        assert [b for b, _ in got] == bodies
    finally:
        cluster.up(0)


def test_ha_sync_mode_manual_leaves_a_new_mirror_unsynchronised_until_sync_queue(cluster):
    """A mirror added by a policy change to a queue with messages: with ha-sync-mode manual
    it is listed in slave_nodes but not in synchronised_slave_nodes until sync_queue."""
    names = cluster.names
    _policy(cluster, "compat-sync", r"^compat-sync\.", {"ha-mode": "nodes", "ha-params": names[:1]})
    conn = _conn(cluster.urls[0])
    conn.channel().queue_declare("compat-sync.q", durable=True)
    conn.close()
    _publish(cluster.urls[0], "compat-sync.q", [b"s%d" % i for i in range(20)])
    _policy(cluster, "compat-sync", r"^compat-sync\.",
            {"ha-mode": "nodes", "ha-params": names[:2], "ha-sync-mode": "manual"})
    row = _until(lambda: names[1] in (_row(cluster, 0, "compat-sync.q").get("slave_nodes") or ())
                 and _row(cluster, 0, "compat-sync.q"), what="a mirror on the second node")
    assert row["node"] == names[0]
    assert names[1] not in row["synchronised_slave_nodes"]

    done = cluster.ctl(0, "sync_queue", "compat-sync.q")
    assert done.returncode == 0, done.stderr
    _until(lambda: names[1] in (_row(cluster, 0, "compat-sync.q")
                                .get("synchronised_slave_nodes") or ()),
           what="the second node in sync after sync_queue")


def test_master_locator_min_masters_places_a_mirrored_queues_master(cluster):
    """x-queue-master-locator min-masters on a queue an ha policy mirrors: its master goes to
    a node with fewer masters than the declaring one, and it has a mirror."""
    _policy(cluster, "compat-loc", r"^compat-loc\.",
            {"ha-mode": "exactly", "ha-params": 2, "ha-sync-mode": "automatic"})
    conn = _conn(cluster.urls[0])
    ch = conn.channel()
    homes = _classic_homes(cluster)
    k = 0  # node 0 is master of more queues than any other node
    while homes[cluster.names[0]] <= max(v for n, v in homes.items() if n != cluster.names[0]):
        ch.queue_declare(f"compat-loc.local.{k}", durable=True,
                         arguments={"x-queue-master-locator": "client-local"})
        homes[cluster.names[0]] += 1
        k += 1
    ch.queue_declare("compat-loc.spread", durable=True,
                     arguments={"x-queue-master-locator": "min-masters"})
    row = _until(lambda: _row(cluster, 0, "compat-loc.spread").get("slave_nodes")
                 and _row(cluster, 0, "compat-loc.spread"), what="compat-loc.spread mirrored")
    assert row["node"] in cluster.names[1:], (row["node"], homes)
    assert row["node"] not in row["slave_nodes"]
    ch.confirm_delivery()
    ch.basic_publish("", "compat-loc.spread", b"here", pika.BasicProperties(delivery_mode=2))
    body = _until(lambda: ch.basic_get("compat-loc.spread", auto_ack=True)[2],
                  what="the message back")
    assert body == b"here"
    conn.close()


def test_a_mirrored_queue_keeps_strict_priorities_beyond_two_levels(cluster):
    """x-max-priority 10 on a mirrored classic queue: consumed from another node, higher
    priorities first (each level its own, capped at the maximum), FIFO within a level."""
    _policy(cluster, "compat-prio", r"^compat-prio\.", {"ha-mode": "all"})
    conn = _conn(cluster.urls[0])
    ch = conn.channel()
    ch.queue_declare("compat-prio.q", durable=True, arguments={"x-max-priority": 10})
    _until(lambda: _row(cluster, 0, "compat-prio.q").get("slave_nodes"),
           what="compat-prio.q mirrored")
    ch.confirm_delivery()
    sent = [(i, p) for i, p in enumerate([1, 5, 9, 5, 0, 9, 3, 2, 7, 12, 4, 6, 8, 1])]
    for i, p in sent:
        ch.basic_publish("", "compat-prio.q", b"%d" % i,
                         pika.BasicProperties(delivery_mode=2, priority=p))
    conn.close()
    expected = [b"%d" % i for i, p in sorted(sent, key=lambda s: (-min(s[1], 10), s[0]))]
    got = _consume(cluster.urls[2], "compat-prio.q", len(sent))
    assert [b for b, _ in got] == expected


def test_the_queues_tool_changes_members_and_prints_what_rabbitmq_queues_prints(cluster):
    """add_member, delete_member, grow, shrink and the critical checks: exit codes and output
    lines as rabbitmq-queues 3.10 prints them (ours: amqp-broker-queues)."""
    import httpx
    names = cluster.names
    conn = _conn(cluster.urls[0])
    conn.channel().queue_declare("compat-qm", durable=True, arguments={
        "x-queue-type": "quorum", "x-quorum-initial-group-size": 1})
    conn.close()

    def members() -> list[str]:
        got = httpx.get(f"{cluster.mgmt[0]}/api/queues/%2F/compat-qm", auth=("guest", "guest"),
                        timeout=10)
        return sorted(got.json().get("members") or []) if got.status_code == 200 else []

    added = cluster.queues(0, "add_member", "compat-qm", names[1])
    assert (added.returncode, added.stdout) == (
        0, f"Adding a replica for queue compat-qm on node {names[1]}...\n")
    _until(lambda: members() == sorted(names[:2]), what="two members")
    removed = cluster.queues(0, "delete_member", "compat-qm", names[1])
    assert (removed.returncode, removed.stdout) == (
        0, f"Removing a replica of queue compat-qm on node {names[1]}...\n")
    _until(lambda: members() == names[:1], what="one member again")
    last = cluster.queues(0, "delete_member", "compat-qm", names[0])
    assert (last.returncode, last.stderr) == (69, "Error:\nlast_node\n")
    stranger = cluster.queues(0, "add_member", "compat-qm", "nobody@localhost")
    assert (stranger.returncode, stranger.stderr) == (69, "Error:\nnode_not_running\n")

    grown = cluster.queues(0, "grow", names[2], "all", "--queue-pattern", "^compat-qm$")
    assert grown.returncode == 0
    assert grown.stdout.splitlines() == [f"Growing all quorum queues on {names[2]}...",
                                         "vhost\tname\tsize\tresult", "/\tcompat-qm\t2\tok"]
    _until(lambda: members() == sorted([names[0], names[2]]), what="grown onto node 3")
    shrunk = cluster.queues(0, "shrink", names[2])
    assert shrunk.returncode == 0 and "/\tcompat-qm\t1\tok" in shrunk.stdout.splitlines()
    assert shrunk.stdout.splitlines()[:2] == [f"Shrinking quorum queues on {names[2]}...",
                                              "vhost\tname\tsize\tresult"]
    _until(lambda: members() == names[:1], what="shrunk off node 3")

    # node 1 holds compat-qm's only member: quorum-critical; no mirrored queue needs it alone
    critical = cluster.queues(0, "check_if_node_is_quorum_critical")
    assert critical.returncode == 69
    assert (f"queue 'compat-qm' in vhost '/' would lose quorum if node {names[0]} is stopped"
            in critical.stderr.splitlines())
    calm = cluster.queues(1, "check_if_node_is_mirror_sync_critical")
    assert calm.returncode == 0 and calm.stdout.splitlines() == [
        f"Checking if node {names[1]} is critical for data safety of any classic mirrored "
        f"queues ...",
        f"Node {names[1]} reported no classic mirrored queues without online synchronised "
        f"mirrors"]
    conn = _conn(cluster.urls[0])
    conn.channel().queue_delete("compat-qm")
    conn.close()


def test_quorum_status_and_rebalance_as_rabbitmq_queues_prints_them(cluster):
    """quorum_status (plain, JSON, and for a queue that does not exist) and rebalance: the
    lines, the exit codes and the columns both brokers share (3.10 has "Log Index" and
    "Machine Version", ours the 4.x-style "Last Log Index", "Membership" and sync columns);
    rebalance spreads three queues led by one node to one leader per node."""
    import json

    import httpx
    names = cluster.names
    queues = [f"compat-rb-{i}" for i in range(3)]
    conn = _conn(cluster.urls[0])
    for q in queues:
        conn.channel().queue_declare(q, durable=True, arguments={"x-queue-type": "quorum"})
    conn.close()

    plain = cluster.queues(0, "quorum_status", queues[0])
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.splitlines()[0] == f"Status of quorum queue {queues[0]} on node {names[0]} ..."
    as_json = cluster.queues(0, "quorum_status", queues[0], "--formatter", "json")
    assert as_json.returncode == 0, as_json.stderr
    rows = json.loads(as_json.stdout)
    assert sorted(r["Node Name"] for r in rows) == sorted(names)
    assert sorted(r["Raft State"] for r in rows) == ["follower", "follower", "leader"]
    for row in rows:
        assert {"Node Name", "Raft State", "Commit Index", "Snapshot Index", "Term"} <= set(row)
    [leader] = [r for r in rows if r["Raft State"] == "leader"]
    assert leader["Node Name"] == names[0] and leader["Term"] >= 1 and leader["Commit Index"] >= 1

    missing = cluster.queues(0, "quorum_status", "compat-rb-none")
    assert (missing.returncode, missing.stderr) == (69, "Error:\nnot_found\n")
    assert missing.stdout.splitlines() == [
        f"Status of quorum queue compat-rb-none on node {names[0]} ..."]

    def leaders() -> dict[str, int]:
        rows = httpx.get(f"{cluster.mgmt[0]}/api/queues", auth=("guest", "guest"),
                         timeout=10).json()
        out: dict[str, int] = {}
        for r in rows:
            if r["name"] in queues:
                out[r.get("leader")] = out.get(r.get("leader"), 0) + 1
        return out

    _until(lambda: leaders() == {names[0]: 3}, 60, "three queues led by node 1")
    moved = cluster.queues(0, "rebalance", "quorum", "--queue-pattern", "^compat-rb-")
    assert moved.returncode == 0, moved.stderr
    assert moved.stdout.splitlines()[0] == "Re-balancing leaders of quorum queues..."
    # the statistics behind /api/queues lag a few seconds on RabbitMQ
    _until(lambda: leaders() == {n: 1 for n in names}, 60, "one leader per node")
    conn = _conn(cluster.urls[0])
    for q in queues:
        conn.channel().queue_delete(q)
    conn.close()


def _refused(url: str) -> bool:
    """Whether a connection to `url` is refused at connection.open (else it is closed again)."""
    try:
        conn = _conn(url)
    except (pika.exceptions.ProbableAccessDeniedError, pika.exceptions.ConnectionClosedByBroker):
        return True
    conn.close()
    return False


def test_a_vhost_connection_limit_counts_the_connections_of_every_node(cluster):
    import httpx
    auth = ("guest", "guest")
    api = cluster.mgmt[0] + "/api"
    assert httpx.put(api + "/vhosts/climit", auth=auth, json={}).status_code in (201, 204)
    try:
        assert httpx.put(api + "/permissions/climit/guest", auth=auth,
                         json={"configure": ".*", "write": ".*", "read": ".*"}).status_code in (201, 204)
        assert httpx.put(api + "/vhost-limits/climit/max-connections", auth=auth,
                         json={"value": 2}).status_code == 204
        urls = [u.rsplit("/", 1)[0] + "/climit" for u in cluster.urls]
        _until(lambda: not _refused(urls[2]), what="the vhost on the third node")
        a, b = _conn(urls[0]), _conn(urls[1])  # one on each of two nodes: the limit is reached
        _until(lambda: _refused(urls[2]), what="the third node to refuse a third connection")
        a.close()
        _until(lambda: not _refused(urls[2]), what="a place freed on another node to count")
        b.close()
    finally:
        httpx.delete(api + "/vhosts/climit", auth=auth)


@pytest.mark.timeout(420)  # rolling and full restarts, and (last in the module) the teardown
def test_transient_exchange_lives_while_a_node_runs_and_goes_when_all_restart(cluster):
    """Runs last: it restarts every node. A transient exchange survives nodes going down one at
    a time (the others keep it) and is gone once the whole cluster has restarted; a durable
    one stays."""
    conn = _conn(cluster.urls[0])
    ch = conn.channel()
    ch.exchange_declare("compat.transient.x", "fanout", durable=False)
    ch.exchange_declare("compat.durable.x", "fanout", durable=True)
    conn.close()
    for i in (1, 2):
        cluster.down(i)
        cluster.up(i)
    _until(lambda: all(declared(u, "compat.transient.x", "exchange") for u in cluster.urls), 30,
           "the transient exchange on every node after a rolling restart")
    cluster.restart_all()
    _until(lambda: not any(declared(u, "compat.transient.x", "exchange")
                           for u in cluster.urls), 60,
           "the transient exchange gone after the whole cluster restarted")
    assert all(declared(u, "compat.durable.x", "exchange") for u in cluster.urls)
