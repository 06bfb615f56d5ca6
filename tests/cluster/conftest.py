"""Fixtures of the cluster tests: a factory of local clusters whose inter-node links can go
through the link proxy (`proxy.py`), stopped after the test.

Ports come from this package's range (AMQP 5721+, distribution 25721+, proxy links 26721+) so
that a node keeps its AMQP address across restarts and peers know where to dial; management and
metrics bind free ports (read back from the logs by the launcher).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest

from .interim_cluster import LocalCluster
from .proxy import Proxy

# CLUSTER_PORT_OFFSET=10 moves all three (two runs side by side by hand)
_OFFSET = int(os.environ.get("CLUSTER_PORT_OFFSET", "0"))
AMQP_BASE = 5721 + _OFFSET
DIST_BASE = 25721 + _OFFSET
PROXY_BASE = 26721 + 4 * _OFFSET


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
        ports: dict[tuple[int, int], int] = {}
        if proxy is not None:
            k = 0
            for i in range(size):
                for j in range(i + 1, size):  # the smaller name dials the larger
                    name = f"n{i + 1}->n{j + 1}"
                    ports[(i, j)] = proxy.add_link(name, ("127.0.0.1", DIST_BASE + j),
                                                   PROXY_BASE + k)
                    links[(i, j)] = name
                    k += 1
        cluster = LocalCluster(tmp_path / f"cluster{len(made)}", size, amqp_base=AMQP_BASE,
                               dist_base=DIST_BASE, dial=lambda i, j: ports.get((i, j)),
                               extra_config=config)
        pc = ProxiedCluster(cluster, proxy, links)
        made.append(pc)
        cluster.start()
        return pc

    yield make
    for pc in made:
        pc.cluster.stop()
        if pc.proxy is not None:
            pc.proxy.close()
