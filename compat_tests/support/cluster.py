"""`LocalCluster`: N real `amqp-broker` processes on loopback forming one cluster, for tests and
benchmarks.

Used by tests/cluster/ (and by whoever needs a cluster: partition tests, bench/). The layout
(directories, broker.conf, the shared cookie) and the "formed" check come from the product's
`amqp_broker.cli.local_cluster`, the same code `amqp-broker-cluster start` runs; each node is
one `launcher.Broker` (its process, log and ready line). Ports are fixed for the cluster's
life (peers must find each other, and `restart(i)` keeps them): free ones from `free_ports`
unless base ports are given.

Nodes are numbered from 0 here (``cluster.urls[i]``, ``kill(i)``); node i is named
``rabbit{i+1}@localhost``. `dial_overrides={(i, j): (host, port)}` sends node i's link to
node j through ``host:port`` (a TCP proxy the test controls, which forwards to
``node(j).dist_port``). Only the node whose name sorts first dials a link, so (i, j) must be
that order, and the host must be loopback (a peer entry carries a port, the host is the name's).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from amqp_broker.cli.local_cluster import (LocalNode, NotFormed, formed, node_config,
                                           plan_nodes, share_cookie, wait_formed)
from amqp_broker.mgmt.client import ApiClient

from .launcher import Broker, LaunchError, free_ports

__all__ = ["LocalCluster", "NodeInfo"]

_LOOPBACK = ("localhost", "127.0.0.1")


@dataclass(frozen=True, slots=True)
class NodeInfo:
    index: int
    name: str
    url: str  # AMQP
    mgmt_url: str
    amqp_port: int
    management_port: int
    prometheus_port: int
    dist_port: int
    pid: int | None  # None when the process is not running
    data_dir: Path
    log_path: Path


class LocalCluster:
    """`LocalCluster(root, 3).start()` (or `with LocalCluster(...) as c:`). `root`: where the
    node directories go (a new temporary directory if None); `config`: rabbitmq.conf text added
    to every node's file; `env`: extra environment for the processes."""

    def __init__(self, root: Path | None = None, size: int = 3, *, port: int | None = None,
                 management_port: int | None = None, prometheus_port: int | None = None,
                 dist_port: int | None = None,
                 dial_overrides: dict[tuple[int, int], tuple[str, int]] | None = None,
                 config: str = "", env: dict[str, str] | None = None) -> None:
        self._own_root = root is None
        self.root = Path(tempfile.mkdtemp(prefix="amqp-cluster-") if root is None else root)
        if port is None:
            ports = free_ports(4 * size)
            amqp, mgmt, prom, dist = (ports[k * size:(k + 1) * size] for k in range(4))
        else:
            amqp, mgmt, prom, dist = port, management_port, prometheus_port, dist_port
        self.plan: list[LocalNode] = plan_nodes(self.root, size, amqp=amqp, management=mgmt,
                                                prometheus=prom, dist=dist)
        dial = self._dial_ports(dial_overrides or {})
        self.brokers = [Broker(n.directory, port=n.amqp_port, env=env,
                               config=node_config(n, self.plan, dial.get(i)) + config)
                        for i, n in enumerate(self.plan)]
        for b, n in zip(self.brokers, self.plan):
            assert b.data_dir == n.data_dir and b.log_path == n.log_path  # one layout

    def _dial_ports(self, overrides: dict[tuple[int, int], tuple[str, int]]) -> dict[int, dict]:
        out: dict[int, dict[str, int]] = {}
        for (i, j), (host, port) in overrides.items():
            dialer, peer = self.plan[i].name, self.plan[j].name
            if not dialer < peer:
                raise ValueError(f"{dialer} does not dial {peer} (the smaller name dials): "
                                 f"give ({j}, {i})")
            if host not in _LOOPBACK:
                raise ValueError(f"dial override host {host!r}: only loopback ({_LOOPBACK}) "
                                 f"can be routed, the host comes from the node name")
            out.setdefault(i, {})[peer] = port
        return out

    # -- life cycle -----------------------------------------------------------------------------
    def start(self, timeout: float = 30.0) -> "LocalCluster":
        """Start every node (all spawned before any is waited for) and wait until formed."""
        share_cookie(self.plan)
        for b in self.brokers:
            b.spawn()
        try:
            for b in self.brokers:
                b.wait_ready(timeout)
            self.wait_formed(timeout)
        except (LaunchError, NotFormed) as e:
            tails = self.log_tails()
            self.close()
            raise LaunchError(f"{e}\n{tails}") from None
        return self

    def wait_formed(self, timeout: float = 30.0) -> None:
        """Until every node's /api/nodes shows every node running (all nodes must be up)."""
        wait_formed(self.plan, timeout, check=self._dead)

    def is_formed(self) -> bool:
        return formed(self.plan) is None

    def _dead(self) -> str | None:
        for b, n in zip(self.brokers, self.plan):
            if b.proc is None or b.proc.poll() is not None:
                return f"{n.name} is not running"
        return None

    def kill(self, i: int) -> None:
        """SIGKILL node i."""
        self.brokers[i].kill()

    def stop(self, i: int) -> int | None:
        """SIGTERM node i and wait for it (its exit code; None if it had to be killed)."""
        return self.brokers[i].stop()

    def pause(self, i: int) -> None:
        """SIGSTOP node i: frozen, sockets still open."""
        self.brokers[i].pause()

    def resume(self, i: int) -> None:
        self.brokers[i].resume()

    def restart(self, i: int, timeout: float = 30.0, *, wait: bool = True) -> None:
        """Stop node i if it runs, start it on the same data dir and ports, and (by default)
        wait until the whole cluster has formed again."""
        b = self.brokers[i]
        b.stop()
        try:
            b.start(timeout)
            if wait:
                self.wait_formed(timeout)
        except (LaunchError, NotFormed) as e:
            raise LaunchError(f"{e}\n{self.log_tails()}") from None

    def close(self) -> None:
        """Stop every node (SIGTERM, SIGKILL after a grace) and remove the node directories."""
        for b in self.brokers:
            b.stop()
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)
        else:
            for n in self.plan:
                shutil.rmtree(n.directory, ignore_errors=True)

    def __enter__(self) -> "LocalCluster":
        return self.start()

    def __exit__(self, exc_type, *_exc) -> None:
        if exc_type is not None:  # the logs go with the node directories: show them first
            print(f"node logs at the failure:\n{self.log_tails(40)}", file=sys.stderr)
        self.close()

    # -- facts ----------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.plan)

    @property
    def names(self) -> list[str]:
        return [n.name for n in self.plan]

    @property
    def urls(self) -> list[str]:
        """AMQP URLs, node 0 first."""
        return [f"amqp://guest:guest@127.0.0.1:{n.amqp_port}/%2F" for n in self.plan]

    @property
    def mgmt_urls(self) -> list[str]:
        return [n.management_url for n in self.plan]

    def node(self, i: int) -> NodeInfo:
        n, b = self.plan[i], self.brokers[i]
        alive = b.proc is not None and b.proc.poll() is None
        return NodeInfo(i, n.name, self.urls[i], n.management_url, n.amqp_port,
                        n.management_port, n.prometheus_port, n.dist_port,
                        b.proc.pid if alive else None, n.data_dir, n.log_path)

    def api(self, i: int) -> ApiClient:
        """A management API client of node i (close it, or use `with`)."""
        return ApiClient(self.plan[i].management_url, timeout=5.0)

    def log_tails(self, lines: int = 20) -> str:
        return "\n".join(f"--- {n.name} ({n.log_path}) ---\n{b.log_tail(lines)}"
                         for n, b in zip(self.plan, self.brokers))
