"""What a cluster of `amqp-broker` processes on one machine looks like on disk, and when it has
formed.

Used by `amqp-broker-cluster` (`cli/cluster.py`) and by the tests' `LocalCluster`
(`compat_tests/support/cluster.py`), so the command and the tests start clusters the same way.
This module writes files and asks the management API; it starts no process.

Layout under a root directory, one directory per node (the layout of the tests' launcher):

    ROOT/rabbitK/broker.conf   rabbitmq.conf-style: name, ports, every peer (classic_config)
    ROOT/rabbitK/data/         the node's data dir, with the shared .erlang.cookie
    ROOT/rabbitK/broker.log    what the node prints

Node K (1-based) is ``rabbitK@localhost`` and listens on loopback only. A cluster has formed
when every node's ``GET /api/nodes`` lists every node with ``running: true`` (its link to each
peer is up).
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

from amqp_broker.cluster.nodes import read_cookie
from amqp_broker.mgmt.client import ApiClient, ApiError, NodeDown

__all__ = ["LocalNode", "NotFormed", "plan_nodes", "node_config", "share_cookie", "formed",
           "wait_formed", "ports_in_use", "log_tail"]

# defaults derived from the AMQP port, as RabbitMQ's (management +10000, distribution +20000);
# Prometheus gets management + 90 so 5701 -> 15791 stays clear of 15701.. for up to 90 nodes
MANAGEMENT_OFFSET = 10000
PROMETHEUS_OFFSET = 90
DIST_OFFSET = 20000


class NotFormed(RuntimeError):
    """The cluster did not form in time, or a node died: the message says which and why."""


@dataclass(frozen=True, slots=True)
class LocalNode:
    index: int  # 1-based, as in the name
    directory: Path
    amqp_port: int
    management_port: int
    prometheus_port: int
    dist_port: int

    @property
    def name(self) -> str:
        return f"rabbit{self.index}@localhost"

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"

    @property
    def config_path(self) -> Path:
        return self.directory / "broker.conf"

    @property
    def log_path(self) -> Path:
        return self.directory / "broker.log"

    @property
    def management_url(self) -> str:
        return f"http://127.0.0.1:{self.management_port}"

    def ports(self) -> list[int]:
        return [self.amqp_port, self.management_port, self.prometheus_port, self.dist_port]


def plan_nodes(root: Path, count: int, *, amqp: Sequence[int] | int,
               management: Sequence[int] | int | None = None,
               prometheus: Sequence[int] | int | None = None,
               dist: Sequence[int] | int | None = None) -> list[LocalNode]:
    """`count` nodes under `root`. Each port kind is a list (one port per node) or a base port
    (node K gets base + K - 1); missing kinds derive from the AMQP base. ValueError if two
    ports coincide or one is out of range."""
    if count < 1:
        raise ValueError("a cluster needs at least one node")

    def run(spec: Sequence[int] | int, kind: str) -> list[int]:
        ports = [spec + k for k in range(count)] if isinstance(spec, int) else list(spec)
        if len(ports) != count:
            raise ValueError(f"{count} nodes need {count} {kind} ports, got {len(ports)}")
        return ports

    if not isinstance(amqp, int) and (management is None or prometheus is None or dist is None):
        raise ValueError("with a list of AMQP ports give the other port lists too")
    a = run(amqp, "AMQP")
    m = run(management if management is not None else a[0] + MANAGEMENT_OFFSET, "management")
    p = run(prometheus if prometheus is not None else m[0] + PROMETHEUS_OFFSET, "Prometheus")
    d = run(dist if dist is not None else a[0] + DIST_OFFSET, "distribution")
    every = a + m + p + d
    bad = [x for x in every if not 0 < x < 65536]
    if bad:
        raise ValueError(f"port {bad[0]} is out of range (1-65535)")
    if len(set(every)) != len(every):
        raise ValueError("the AMQP, management, Prometheus and distribution port ranges overlap: "
                         f"{a[0]}.., {m[0]}.., {p[0]}.., {d[0]}..")
    root = Path(root)
    return [LocalNode(k + 1, root / f"rabbit{k + 1}", a[k], m[k], p[k], d[k])
            for k in range(count)]


def node_config(node: LocalNode, nodes: Sequence[LocalNode],
                dial_ports: Mapping[str, int] | None = None) -> str:
    """`node`'s broker.conf. `dial_ports` (peer name -> port) routes this node's link to a peer
    through another local port (a test's TCP proxy); it matters only where this node dials,
    i.e. for peers whose names sort after its own (quorum/transport.py)."""
    dial_ports = dict(dial_ports or {})
    lines = [
        f"# node {node.index} of a local cluster of {len(nodes)} (amqp-broker-cluster)",
        f"node_name = {node.name}",
        f"listeners.tcp.default = 127.0.0.1:{node.amqp_port}",
        "management.tcp.ip = 127.0.0.1",
        f"management.tcp.port = {node.management_port}",
        "prometheus.tcp.ip = 127.0.0.1",
        f"prometheus.tcp.port = {node.prometheus_port}",
        f"distribution.listener.port_range.min = {node.dist_port}",
        "cluster_formation.peer_discovery_backend = classic_config",
    ]
    for peer in nodes:
        port = dial_ports.pop(peer.name, peer.dist_port)
        lines.append(f"cluster_formation.classic_config.nodes.{peer.index} = {peer.name}:{port}")
    if dial_ports:
        raise ValueError(f"dial_ports names nodes not in the cluster: {', '.join(dial_ports)}")
    return "\n".join(lines) + "\n"


def share_cookie(nodes: Sequence[LocalNode]) -> bytes:
    """Give every node the same .erlang.cookie: the first node's (created by the broker's own
    rule if it has none yet), copied into the others' data dirs."""
    for node in nodes:
        node.data_dir.mkdir(parents=True, exist_ok=True)
    cookie = read_cookie(nodes[0].data_dir)
    for node in nodes[1:]:
        path = node.data_dir / ".erlang.cookie"
        try:
            if path.read_bytes().strip() == cookie:
                continue
        except FileNotFoundError:
            pass
        # the broker keeps its cookie read-only (0400): replace the file rather than open it
        tmp = path.with_suffix(".tmp")
        tmp.unlink(missing_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
        with os.fdopen(fd, "wb") as f:
            f.write(cookie)
        os.replace(tmp, path)
    return cookie


def ports_in_use(nodes: Sequence[LocalNode]) -> list[int]:
    """The nodes' ports that something on loopback already listens on (checked before start, so
    the error names the port instead of a node dying)."""
    busy = []
    for node in nodes:
        for port in node.ports():
            with socket.socket() as s:
                # as the nodes' listeners (trio sets it): a port whose old connections linger
                # in TIME_WAIT after a stop is free again
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    busy.append(port)
    return busy


def formed(nodes: Sequence[LocalNode], *, user: str = "guest",
           password: str = "guest") -> str | None:
    """None once every node's /api/nodes shows every node running; else what is still missing."""
    want = {n.name for n in nodes}
    for node in nodes:
        try:
            with ApiClient(node.management_url, user, password, timeout=2.0) as client:
                rows = client.get("nodes")
        except (NodeDown, ApiError) as e:
            return f"{node.name}: management API not answering ({e})"
        running = {r.get("name") for r in rows if r.get("running")}
        missing = sorted(want - running)
        if missing:
            return f"{node.name} does not see {', '.join(missing)} running"
    return None


def wait_formed(nodes: Sequence[LocalNode], timeout: float = 30.0, *,
                check: Callable[[], str | None] = lambda: None) -> None:
    """Poll `formed` until it holds; NotFormed when `timeout` passes or `check()` (e.g. "node 2
    exited") returns a reason to stop waiting."""
    deadline = time.monotonic() + timeout
    while True:
        problem = check()
        if problem:
            raise NotFormed(problem)
        missing = formed(nodes)
        if missing is None:
            return
        if time.monotonic() > deadline:
            raise NotFormed(f"the cluster did not form within {timeout:g}s: {missing}")
        time.sleep(0.1)


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        text = "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
    return text or "(empty log)"
