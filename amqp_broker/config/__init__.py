"""rabbitmq.conf ("new style", sysctl-like) parsing into one typed, frozen ``BrokerSettings``.

Who calls it: the ``amqp-broker`` CLI, once at start-up::

    settings = load_settings(args.config, overrides={"port": args.port, "data_dir": args.data_dir})

``BrokerSettings`` is a subclass of ``amqp_broker.settings.Settings`` with the rest of what the
file can say (listeners, log, management/prometheus ports, quorum queue and Raft tuning,
cluster nodes, compat profile). ``parse_text`` is the pure core, for tests and tools.
Every supported key is documented in ``rabbitmq.conf.example`` at the repository root.

Modules: ``lexer`` (lines -> entries), ``values`` (value types), ``schema`` (the key table),
``build`` (entries -> settings), ``model`` (the dataclasses), ``loader`` (file, env, overrides).
"""

from .lexer import ConfigError, ConfigProblem
from .loader import CONFIG_ENV, config_path, load, load_settings
from .model import (
    PROFILES,
    BrokerSettings,
    ClusterSettings,
    HttpListener,
    Listener,
    LogSettings,
    MembershipReconciliation,
    QuorumQueueSettings,
    RaftSettings,
)
from .schema import KEYS, parse_text

__all__ = [
    "BrokerSettings", "CONFIG_ENV", "ClusterSettings", "ConfigError", "ConfigProblem", "HttpListener",
    "KEYS", "Listener", "LogSettings", "MembershipReconciliation", "PROFILES", "QuorumQueueSettings",
    "RaftSettings", "config_path", "load", "load_settings", "parse_text",
]
