"""The typed, frozen result of reading rabbitmq.conf: ``BrokerSettings`` and its parts.

``BrokerSettings`` extends the server's ``amqp_broker.settings.Settings`` (same fields, same
defaults), so anything that takes a ``Settings`` takes it too. ``host``/``port`` are the primary
AMQP listener (``listeners.tcp.default``, else the first one in the file); other
``listeners.tcp.NAME`` entries are ``extra_listeners``. Durations are seconds (floats), as in
``Settings``, even where rabbitmq.conf writes milliseconds. Built by ``amqp_broker.config.schema``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from amqp_broker.settings import Settings
from amqp_broker.tls import TlsOptions

__all__ = [
    "BrokerSettings", "ClusterSettings", "HttpListener", "HttpsListener", "Listener", "LogSettings",
    "MembershipReconciliation", "PROFILES", "QuorumQueueSettings", "RaftSettings",
]

# Compatibility profiles (CLIENT-EXPECTATIONS.md, "Design implications"): the version we
# advertise and whose behaviour we follow. product.version in the file overrides the version.
PROFILES: dict[str, str] = {
    "rabbitmq-3.10": "3.10.8",
    "rabbitmq-4.2": "4.2.0",
    "rabbitmq-4.3": "4.3.0",
}
DEFAULT_PROFILE = "rabbitmq-4.2"

LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency", "none")


@dataclass(frozen=True, slots=True)
class Listener:
    """One AMQP listener: ``listeners.tcp.NAME = [IP:]PORT``."""

    name: str
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class HttpListener:
    """Where an HTTP endpoint (management API, Prometheus) listens."""

    host: str
    port: int


@dataclass(frozen=True, slots=True)
class HttpsListener:
    """``management.ssl.*``: the management API over TLS."""

    host: str
    port: int
    tls: TlsOptions


@dataclass(frozen=True, slots=True)
class LogSettings:
    """log.* keys. Levels are RabbitMQ's names; ``python_level`` maps them to ``logging``."""

    file: str | None = None  # log.file; None (or `false`) = no log file
    file_level: str = "info"
    console: bool = True
    console_level: str = "info"
    default_level: str = "info"  # log.default.level (alias: log.level)

    @staticmethod
    def python_level(level: str) -> int:
        """``logging`` level number for a RabbitMQ level name ("none" silences everything)."""
        return {"debug": 10, "info": 20, "notice": 25, "warning": 30, "error": 40,
                "critical": 50, "alert": 50, "emergency": 50, "none": 100}[level]


@dataclass(frozen=True, slots=True)
class MembershipReconciliation:
    """quorum_queue.continuous_membership_reconciliation.* (RabbitMQ 3.13+)."""

    enabled: bool = False
    auto_remove: bool = False
    interval: float = 3600.0  # seconds between background checks (file: ms, default 60 min)
    trigger_interval: float = 10.0  # seconds after a node joins/leaves (file: ms)
    target_group_size: int | None = None  # None: queues without a target are not grown
    # our extension: a member whose node has been unreachable this long (seconds; file: ms)
    # is replaced by a running node that is not a member, keeping the target size; 0: never
    replace_unreachable_after: float = 0.0


@dataclass(frozen=True, slots=True)
class QuorumQueueSettings:
    initial_cluster_size: int = 3
    commands_soft_limit: int = 32
    relaxed_checks_on_redeclaration: bool = False
    reconciliation: MembershipReconciliation = field(default_factory=MembershipReconciliation)


@dataclass(frozen=True, slots=True)
class RaftSettings:
    wal_max_size_bytes: int = 536_870_912  # 512 MiB, the default the issue asks for
    segment_max_entries: int = 4096  # at most 65535
    # ours: the WAL also rolls over once its memory tables hold this much (quorum queue bodies
    # live in the log, and memory tables keep them until the rollover)
    mem_table_max_bytes: int = 33_554_432  # 32 MiB


@dataclass(frozen=True, slots=True)
class ClusterSettings:
    """cluster_formation.*: only the classic_config backend (a fixed node list) exists here."""

    peer_discovery_backend: str = "classic_config"
    nodes: tuple[str, ...] = ()  # cluster_formation.classic_config.nodes.N, in file order


@dataclass(frozen=True, slots=True)
class BrokerSettings(Settings):
    """``Settings`` plus everything else rabbitmq.conf can say. Frozen; build with ``load_settings``."""

    node_name: str = ""  # "": RABBITMQ_NODENAME, else rabbit@<short host name> (cluster/nodes.py)
    dist_port: int | None = None  # inter-node listener; None: AMQP port + 20000
    # a cluster link silent this long (s) is down, as Erlang's net_ticktime (ticks every 1/4)
    net_ticktime: int = 60
    compat_profile: str = DEFAULT_PROFILE
    extra_listeners: tuple[Listener, ...] = ()
    # listeners.ssl.NAME (AMQPS), all with ssl_options; TLS 1.2 and 1.3 only
    ssl_listeners: tuple[Listener, ...] = ()
    ssl_options: TlsOptions = field(default_factory=TlsOptions)
    inter_node_tls: bool = False  # cluster links over mutual TLS with ssl_options' files
    # Permissions and tags given to default_user when the node first creates it.
    default_permissions: tuple[str, str, str] = (".*", ".*", ".*")  # configure, write, read
    default_user_tags: tuple[str, ...] = ("administrator",)
    log: LogSettings = field(default_factory=LogSettings)
    management: HttpListener = field(default_factory=lambda: HttpListener("0.0.0.0", 15672))
    prometheus: HttpListener = field(default_factory=lambda: HttpListener("0.0.0.0", 15692))
    management_ssl: HttpsListener | None = None  # management.ssl.port and its options
    queue_leader_locator: str = "client-local"  # or "balanced"
    queue_master_locator: str = "client-local"  # classic queues' home node; or "balanced"
    quorum_queue: QuorumQueueSettings = field(default_factory=QuorumQueueSettings)
    raft: RaftSettings = field(default_factory=RaftSettings)
    dead_letter_worker_consumer_prefetch: int = 32
    dead_letter_worker_publisher_confirm_timeout: float = 180.0  # seconds (file: ms)
    cluster: ClusterSettings = field(default_factory=ClusterSettings)
    config_file: Path | None = None  # the file these settings came from, if any

    @property
    def listeners(self) -> tuple[Listener, ...]:
        """Every AMQP listener, the primary (``host``/``port``) first."""
        return (Listener("default", self.host, self.port), *self.extra_listeners)
