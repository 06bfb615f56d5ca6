"""Fixtures: one 3-node `LocalCluster` (compat_tests/support/cluster.py: real `amqp-broker`
processes on loopback) per module, `wait_until` for what a cluster learns a moment later, and
`make_cluster` for the fault tests: a cluster of the test's own whose inter-node links go
through the link proxy (`proxy.py`).

`make_cluster` uses fixed ports from this package's range (AMQP 5721+, management 15721+,
Prometheus 15821+, distribution 25721+, proxy links 26721+; CLUSTER_PORT_OFFSET=10 moves them
all, to run two by hand side by side) so the proxy knows its targets before the nodes start.
The node logs are copied to the test's tmp_path/logs when it ends (the cluster's directories
go with it).
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass

import pytest

from compat_tests.support.cluster import LocalCluster

from .proxy import Proxy

_OFFSET = int(os.environ.get("CLUSTER_PORT_OFFSET", "0"))
AMQP_BASE = 5721 + _OFFSET
MGMT_BASE = 15721 + _OFFSET
PROMETHEUS_BASE = 15821 + _OFFSET
DIST_BASE = 25721 + _OFFSET
PROXY_BASE = 26721 + 4 * _OFFSET


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with LocalCluster(tmp_path_factory.mktemp("cluster"), 3) as c:
        yield c


def wait_until(predicate, timeout: float = 10.0, what: str = "condition"):
    """Poll `predicate` until it returns something true; fail the test with `what` if not."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


@dataclass
class ProxiedCluster:
    cluster: LocalCluster
    proxy: Proxy | None
    links: dict[tuple[int, int], str]  # (i, j), i < j -> the proxy link carrying that pair


@pytest.fixture
def make_cluster(tmp_path):
    """`make_cluster(size, proxied=True, config="")` -> a started `ProxiedCluster`."""
    made: list[ProxiedCluster] = []

    def make(size: int, *, proxied: bool = True, config: str = "") -> ProxiedCluster:
        proxy = Proxy().start() if proxied else None
        links: dict[tuple[int, int], str] = {}
        dial: dict[tuple[int, int], tuple[str, int]] = {}
        if proxy is not None:
            k = 0
            for i in range(size):
                for j in range(i + 1, size):  # the smaller name dials the larger
                    name = f"n{i + 1}->n{j + 1}"
                    port = proxy.add_link(name, ("127.0.0.1", DIST_BASE + j), PROXY_BASE + k)
                    dial[(i, j)] = ("127.0.0.1", port)
                    links[(i, j)] = name
                    k += 1
        cluster = LocalCluster(tmp_path / f"cluster{len(made)}", size, port=AMQP_BASE,
                               management_port=MGMT_BASE, prometheus_port=PROMETHEUS_BASE,
                               dist_port=DIST_BASE, dial_overrides=dial, config=config)
        pc = ProxiedCluster(cluster, proxy, links)
        made.append(pc)
        cluster.start()
        return pc

    yield make
    for pc in made:
        logs = tmp_path / "logs"
        logs.mkdir(exist_ok=True)
        for n in pc.cluster.plan:
            if n.log_path.exists():
                shutil.copy(n.log_path, logs / f"{n.name.split('@')[0]}.log")
        pc.cluster.close()
        if pc.proxy is not None:
            pc.proxy.close()
