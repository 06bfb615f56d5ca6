"""Who is in the cluster and how to reach them: node names, inter-node addresses, the cookie.

Built once by `server/node.py` from the settings (`cluster_config(settings)`) and handed to
`install_quorum`. Pure apart from reading (or, on first start, writing) the cookie file.

Names and ports, as RabbitMQ: a node is ``name@host``; it listens for its peers on the
distribution port (``RABBITMQ_DIST_PORT``, else ``distribution.listener.port_range.min``, else
AMQP port + 20000). Peers come from ``cluster_formation.classic_config.nodes.N``. A peer is
dialled at its host on the default distribution port 25672 unless its entry names another:
``rabbit2@localhost:25702`` (an extension for several nodes on one host, where RabbitMQ would
ask epmd; the node's name is still ``rabbit2@localhost``).

The cookie is the shared secret the nodes prove to each other on every link (never sent):
``RABBITMQ_ERLANG_COOKIE``, else ``<data_dir>/.erlang.cookie``, generated on first start. Copy
it to every node of a cluster, as with RabbitMQ.

Membership changes at run time (`amqp-brokerctl join_cluster`, `forget_cluster_node`, `reset`):
the node list as last known is kept in ``<data_dir>/cluster_nodes.json`` (as Mnesia's
cluster_nodes.config) and, once it exists, wins over classic_config, which only seeds a node's
first start.
With ``inter_node_tls = true`` (this broker's key) the links also run over mutual TLS with the
``ssl_options`` certificate, key and CA files (`tls.link_contexts`), on top of the cookie.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from amqp_broker.tls import link_contexts

__all__ = ["ClusterConfig", "cluster_config", "parse_peer", "default_node_name", "read_cookie",
           "DEFAULT_DIST_PORT", "read_membership", "write_membership", "MEMBERSHIP_FILE"]

MEMBERSHIP_FILE = "cluster_nodes.json"

DEFAULT_DIST_PORT = 25672


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    node: str                                # this node's name
    listen: tuple[str, int]                  # inter-node listener
    peers: dict[str, tuple[str, int]]        # the other nodes -> where to dial them
    cookie: bytes
    # where the other nodes dial this one: the host of its name, its distribution port
    advertise: tuple[str, int] = ("127.0.0.1", 0)
    # set by join_cluster: this node's replica of the metadata starts with no members and
    # learns them from the cluster's leader
    joining: bool = False
    tls: Any = None                          # (accepting, dialling) SSLContexts: links over TLS
    ticktime: float = 60.0                   # a link silent this long (s) is down (net_ticktime)

    @property
    def nodes(self) -> list[str]:
        """Every node of the cluster, this one included, sorted (the same list everywhere)."""
        return sorted({self.node, *self.peers})

    @property
    def clustered(self) -> bool:
        return bool(self.peers)


def default_node_name() -> str:
    """``RABBITMQ_NODENAME``, else ``rabbit@<short host name>`` (RabbitMQ's default)."""
    env = os.environ.get("RABBITMQ_NODENAME")
    if env:
        return env if "@" in env else f"{env}@{socket.gethostname().split('.')[0]}"
    return f"rabbit@{socket.gethostname().split('.')[0]}"


def parse_peer(spec: str) -> tuple[str, tuple[str, int]]:
    """``name@host[:port]`` -> (``name@host``, (host, port))."""
    name, _, port = spec.partition(":")
    host = name.partition("@")[2]
    return name, (host, int(port) if port else DEFAULT_DIST_PORT)


def read_cookie(data_dir: Path) -> bytes:
    env = os.environ.get("RABBITMQ_ERLANG_COOKIE")
    if env:
        return env.encode()
    path = Path(data_dir) / ".erlang.cookie"
    try:
        return path.read_bytes().strip()
    except FileNotFoundError:
        pass
    cookie = "".join(secrets.choice(string.ascii_uppercase) for _ in range(20)).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
    with os.fdopen(fd, "wb") as f:
        f.write(cookie)
    return cookie


def read_membership(data_dir: Path) -> dict | None:
    """The node list a membership change left (None: never changed; classic_config rules):
    ``{"nodes": {name: [host, port]}, "joining": bool}``."""
    try:
        with open(Path(data_dir) / MEMBERSHIP_FILE) as f:
            data = json.load(f)
    except FileNotFoundError:
        return None
    return {"nodes": {n: (a[0], int(a[1])) for n, a in data["nodes"].items()},
            "joining": bool(data.get("joining"))}


def write_membership(data_dir: Path, nodes: dict, joining: bool = False) -> None:
    """Keep the node list (every node, this one included) for the next start, atomically."""
    path = Path(data_dir) / MEMBERSHIP_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as f:
        json.dump({"nodes": {n: list(a) for n, a in sorted(nodes.items())},
                   "joining": joining}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def cluster_config(settings) -> ClusterConfig:
    """The cluster as `settings` (BrokerSettings, or plain Settings: a lone node) and the
    node list left by membership changes describe it."""
    node = getattr(settings, "node_name", None) or default_node_name()
    peers: dict[str, tuple[str, int]] = {}
    joining = False
    kept = read_membership(settings.data_dir)
    if kept is not None:
        peers = {n: a for n, a in kept["nodes"].items() if n != node}
        joining = kept["joining"]
    else:
        cluster = getattr(settings, "cluster", None)
        for spec in getattr(cluster, "nodes", ()) or ():
            name, addr = parse_peer(spec)
            if name != node:
                peers[name] = addr
    env_port = os.environ.get("RABBITMQ_DIST_PORT")
    port = (int(env_port) if env_port else getattr(settings, "dist_port", None)
            or settings.port + 20000)
    host = settings.host if settings.host not in ("", "::") else "0.0.0.0"
    # every node has a cookie and its links' TLS: a lone node too can be joined
    cookie = read_cookie(settings.data_dir)
    advertise = (node.partition("@")[2] or "127.0.0.1", port)
    tls = None
    if getattr(settings, "inter_node_tls", False):
        tls = link_contexts(settings.ssl_options)  # the same files as the AMQPS listeners
    return ClusterConfig(node, (host, port), peers, cookie, advertise, joining, tls,
                         float(getattr(settings, "net_ticktime", 60)))
