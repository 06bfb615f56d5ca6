"""Turn converted rabbitmq.conf values into one ``BrokerSettings``, with cross-key checks.

Called by ``amqp_broker.config.schema.parse_entries`` once every line has been typed. Keys left
out keep the value of the ``base`` settings (the defaults unless the caller passes others).
Where RabbitMQ combines several keys (``loopback_users``, listeners, log levels) this follows
its translation rules. Pure.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from .lexer import ConfigProblem
from amqp_broker.tls import TlsOptions

from .model import PROFILES, BrokerSettings, ClusterSettings, HttpListener, HttpsListener, Listener

__all__ = ["REFUSED_KEYS", "Seen", "build"]

_CMR = "quorum_queue.continuous_membership_reconciliation."


@dataclass
class Seen:
    """Typed values: exact keys by pattern; ``$`` keys by pattern, then name, in file order."""

    exact: dict[str, Any] = field(default_factory=dict)
    named: dict[str, dict[str, Any]] = field(default_factory=dict)
    lines: dict[tuple[str, str | None], int] = field(default_factory=dict)

    def get(self, key: str, default: Any) -> Any:
        return self.exact.get(key, default)

    def line(self, key: str, name: str | None = None) -> int:
        return self.lines.get((key, name), 0)


# Keys copied straight onto a BrokerSettings field of the same meaning.
_DIRECT = {
    "node_name": "node_name", "data_dir": "data_dir", "cluster_name": "cluster_name",
    "default_vhost": "default_vhost", "default_user": "default_user", "default_pass": "default_pass",
    "anonymous_login_user": "anonymous_login_user", "anonymous_login_pass": "anonymous_login_pass",
    "heartbeat": "heartbeat", "frame_max": "frame_max", "channel_max": "channel_max",
    "max_message_size": "max_message_size", "consumer_timeout": "consumer_timeout",
    "classic_queue.memory_budget_bytes": "classic_queue_memory_budget",
    "connection_max": "connection_max", "queue_leader_locator": "queue_leader_locator",
    "queue_master_locator": "queue_master_locator",
    "distribution.listener.port_range.min": "dist_port",
    "inter_node_tls": "inter_node_tls",
    "net_ticktime": "net_ticktime",
    "dead_letter_worker_consumer_prefetch": "dead_letter_worker_consumer_prefetch",
    "dead_letter_worker_publisher_confirm_timeout": "dead_letter_worker_publisher_confirm_timeout",
    "product.name": "product",
    "vm_memory_high_watermark.relative": "memory_high_watermark",
    "vm_memory_high_watermark.absolute": "memory_high_watermark",
    "disk_free_limit.absolute": "disk_free_limit",
    "disk_free_limit.relative": "disk_free_limit_relative",
    "connection_limits.channel_opens_per_second": "channel_open_rate",
    "connection_limits.queue_declares_per_second": "queue_declare_rate",
    "collect_statistics_interval": "collect_statistics_interval",
}


def build(seen: Seen, file: str, problems: list[ConfigProblem], base: BrokerSettings) -> BrokerSettings:
    """Apply ``seen`` on top of ``base``; append cross-key problems to ``problems``."""
    changes: dict[str, Any] = {f: seen.exact[k] for k, f in _DIRECT.items() if k in seen.exact}
    if "handshake_timeout" in seen.exact:
        timeout = seen.exact["handshake_timeout"]
        changes["handshake_timeout"] = math.inf if timeout is None else timeout
    if {"vm_memory_high_watermark.relative", "vm_memory_high_watermark.absolute"} <= seen.exact.keys():
        problems.append(ConfigProblem(file, seen.line("vm_memory_high_watermark.absolute"),
                                      "vm_memory_high_watermark.absolute",
                                      "set either vm_memory_high_watermark.relative or .absolute, not both"))
    if {"disk_free_limit.relative", "disk_free_limit.absolute"} <= seen.exact.keys():
        problems.append(ConfigProblem(file, seen.line("disk_free_limit.relative"),
                                      "disk_free_limit.relative",
                                      "set either disk_free_limit.relative or .absolute, not both"))
    changes.update(_version(seen, base))
    changes.update(_listeners(seen, file, problems, base))
    changes.update(_loopback(seen, base))
    changes.update(_defaults_for_user(seen, base))
    changes["log"] = _log(seen, base)
    changes.update(_tls_listeners(seen, file, problems, base))
    if seen.get("inter_node_tls", False):
        options = changes["ssl_options"]
        _check_tls(dataclasses.replace(options, verify="verify_peer"), "ssl_options",
                   seen.line("inter_node_tls"), file, problems)
    changes["management"] = _http(seen, "management", base.management)
    changes["management_ssl"] = _https(seen, file, problems, base)
    if changes["management_ssl"] is not None and not any(
            k in seen.exact for k in ("management.tcp.port", "management.tcp.ip")):
        # As RabbitMQ: with management.ssl.* and no management.tcp.*, HTTPS only.
        changes["management"] = dataclasses.replace(changes["management"], port=-1)
    changes["prometheus"] = _http(seen, "prometheus", base.prometheus)
    changes["quorum_queue"] = _quorum(seen, base)
    changes["raft"] = dataclasses.replace(
        base.raft,
        wal_max_size_bytes=seen.get("raft.wal_max_size_bytes", base.raft.wal_max_size_bytes),
        segment_max_entries=seen.get("raft.segment_max_entries", base.raft.segment_max_entries),
        mem_table_max_bytes=seen.get("raft.mem_table_max_bytes", base.raft.mem_table_max_bytes))
    changes["cluster"] = _cluster(seen, file, problems, base)
    _refuse_without_effect(seen, file, problems)
    return dataclasses.replace(base, **changes)


# Keys RabbitMQ has that would change nothing on this broker as it is (no per-channel quorum
# flow control): refused at start-up rather than silently ignored.
REFUSED_KEYS = ("quorum_queue.commands_soft_limit",)


def _refuse_without_effect(seen: Seen, file: str, problems: list[ConfigProblem]) -> None:
    if "quorum_queue.commands_soft_limit" in seen.exact:
        problems.append(ConfigProblem(
            file, seen.line("quorum_queue.commands_soft_limit", None),
            "quorum_queue.commands_soft_limit",
            "not supported: this broker has no per-channel quorum command flow control; "
            "remove the key"))


def _version(seen: Seen, base: BrokerSettings) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "compat_profile" in seen.exact:
        out["compat_profile"] = seen.exact["compat_profile"]
        out["version"] = PROFILES[out["compat_profile"]]
        if out["compat_profile"] == "rabbitmq-3.10" and "anonymous_login_user" not in seen.exact:
            out["anonymous_login_user"] = None  # 3.x has no SASL ANONYMOUS
    if "product.version" in seen.exact:
        out["version"] = seen.exact["product.version"]
    return out


def _listeners(seen: Seen, file: str, problems: list[ConfigProblem], base: BrokerSettings) -> dict[str, Any]:
    if "listeners.tcp" in seen.exact:
        problems.append(ConfigProblem(file, seen.line("listeners.tcp"), "listeners.tcp",
                                      "'none' is not supported: the plain listener is the "
                                      "node's primary one (bind it to 127.0.0.1 with "
                                      "listeners.tcp.default to keep it off the network)"))
        return {}
    named: dict[str, tuple[str, int]] = seen.named.get("listeners.tcp.$name", {})
    if not named:
        return {}
    # RabbitMQ listens on all of them; the primary is "default" if present, else the first.
    order = sorted(named, key=lambda n: (n != "default", seen.line("listeners.tcp.$name", n)))
    listeners = [Listener(n, *named[n]) for n in order]
    seen_at: dict[tuple[str, int], str] = {}
    for lst in listeners:
        if lst.port and (lst.host, lst.port) in seen_at:
            problems.append(ConfigProblem(file, seen.line("listeners.tcp.$name", lst.name), f"listeners.tcp.{lst.name}",
                                          f"same address as listeners.tcp.{seen_at[(lst.host, lst.port)]}"))
        seen_at[(lst.host, lst.port)] = lst.name
    first = listeners[0]
    return {"host": first.host, "port": first.port, "extra_listeners": tuple(listeners[1:])}


def _tls_options(seen: Seen, prefix: str, base: TlsOptions) -> TlsOptions:
    versions = seen.named.get(f"{prefix}.versions.$n")
    return TlsOptions(
        certfile=seen.get(f"{prefix}.certfile", base.certfile),
        keyfile=seen.get(f"{prefix}.keyfile", base.keyfile),
        cacertfile=seen.get(f"{prefix}.cacertfile", base.cacertfile),
        verify=seen.get(f"{prefix}.verify", base.verify),
        fail_if_no_peer_cert=seen.get(f"{prefix}.fail_if_no_peer_cert", base.fail_if_no_peer_cert),
        versions=tuple(dict.fromkeys(versions.values())) if versions else base.versions)


def _check_tls(options: TlsOptions, prefix: str, line: int, file: str,
               problems: list[ConfigProblem]) -> None:
    for key in ("certfile", "keyfile"):
        if not getattr(options, key):
            problems.append(ConfigProblem(file, line, f"{prefix}.{key}",
                                          "a TLS listener needs a certificate and its key"))
    if options.verify == "verify_peer" and not options.cacertfile:
        problems.append(ConfigProblem(file, line, f"{prefix}.cacertfile",
                                      "verify_peer needs the CA certificates that client "
                                      "certificates are checked against"))


def _tls_listeners(seen: Seen, file: str, problems: list[ConfigProblem],
                   base: BrokerSettings) -> dict[str, Any]:
    options = _tls_options(seen, "ssl_options", base.ssl_options)
    if "listeners.ssl" in seen.exact:  # `none`
        return {"ssl_listeners": (), "ssl_options": options}
    named: dict[str, tuple[str, int]] = seen.named.get("listeners.ssl.$name", {})
    listeners = tuple(Listener(n, *addr) for n, addr in named.items()) or base.ssl_listeners
    if listeners:
        first = min(seen.line("listeners.ssl.$name", n) for n in named) if named else 0
        _check_tls(options, "ssl_options", first, file, problems)
    return {"ssl_listeners": listeners, "ssl_options": options}


def _https(seen: Seen, file: str, problems: list[ConfigProblem],
           base: BrokerSettings) -> HttpsListener | None:
    current = base.management_ssl
    if "management.ssl.port" not in seen.exact:
        return current
    options = _tls_options(seen, "management.ssl", current.tls if current else TlsOptions())
    _check_tls(options, "management.ssl", seen.line("management.ssl.port"), file, problems)
    host = seen.get("management.ssl.ip", current.host if current else base.management.host)
    return HttpsListener(host, seen.exact["management.ssl.port"], options)


def _loopback(seen: Seen, base: BrokerSettings) -> dict[str, Any]:
    # rabbit.schema: `none` empties the list; otherwise the users set to true, and only those
    # (so `loopback_users.guest = false` alone also empties it). Unset: the default [guest].
    if "loopback_users" in seen.exact:
        return {"loopback_users": ()}
    users = seen.named.get("loopback_users.$user")
    if users is None:
        return {}
    return {"loopback_users": tuple(u for u, on in users.items() if on)}


def _defaults_for_user(seen: Seen, base: BrokerSettings) -> dict[str, Any]:
    out: dict[str, Any] = {}
    c, w, r = base.default_permissions
    perms = (seen.get("default_permissions.configure", c), seen.get("default_permissions.write", w),
             seen.get("default_permissions.read", r))
    if perms != base.default_permissions:
        out["default_permissions"] = perms
    tags = seen.named.get("default_user_tags.$tag")
    if tags is not None:
        out["default_user_tags"] = tuple(t for t, on in tags.items() if on)
    return out


def _log(seen: Seen, base: BrokerSettings):
    log = base.log
    default = seen.get("log.default.level", seen.get("log.level", log.default_level))
    # A level set only as the default applies to outputs without their own level.
    file_level = seen.get("log.file.level", default if _has_default(seen) else log.file_level)
    console_level = seen.get("log.console.level", default if _has_default(seen) else log.console_level)
    return dataclasses.replace(
        log, file=seen.get("log.file", log.file), file_level=file_level,
        console=seen.get("log.console", log.console), console_level=console_level, default_level=default)


def _has_default(seen: Seen) -> bool:
    return "log.default.level" in seen.exact or "log.level" in seen.exact


def _http(seen: Seen, prefix: str, current: HttpListener) -> HttpListener:
    return HttpListener(seen.get(f"{prefix}.tcp.ip", current.host), seen.get(f"{prefix}.tcp.port", current.port))


def _quorum(seen: Seen, base: BrokerSettings):
    q = base.quorum_queue
    cmr = q.reconciliation
    cmr = dataclasses.replace(
        cmr,
        enabled=seen.get(_CMR + "enabled", cmr.enabled),
        auto_remove=seen.get(_CMR + "auto_remove", cmr.auto_remove),
        interval=seen.get(_CMR + "interval", cmr.interval),
        trigger_interval=seen.get(_CMR + "trigger_interval", cmr.trigger_interval),
        target_group_size=seen.get(_CMR + "target_group_size", cmr.target_group_size),
        replace_unreachable_after=seen.get(_CMR + "replace_unreachable_after",
                                           cmr.replace_unreachable_after))
    return dataclasses.replace(
        q,
        initial_cluster_size=seen.get("quorum_queue.initial_cluster_size", q.initial_cluster_size),
        commands_soft_limit=seen.get("quorum_queue.commands_soft_limit", q.commands_soft_limit),
        relaxed_checks_on_redeclaration=seen.get(
            "quorum_queue.property_equivalence.relaxed_checks_on_redeclaration", q.relaxed_checks_on_redeclaration),
        reconciliation=cmr)


def _cluster(seen: Seen, file: str, problems: list[ConfigProblem], base: BrokerSettings) -> ClusterSettings:
    nodes_by_index: dict[str, str] = seen.named.get("cluster_formation.classic_config.nodes.$node", {})
    nodes: list[str] = []
    for index, node in nodes_by_index.items():
        if node in nodes:
            problems.append(ConfigProblem(file, seen.line("cluster_formation.classic_config.nodes.$node", index),
                                          f"cluster_formation.classic_config.nodes.{index}",
                                          f"node {node} is listed twice"))
        else:
            nodes.append(node)
    backend = seen.get("cluster_formation.peer_discovery_backend", base.cluster.peer_discovery_backend)
    return ClusterSettings(backend, tuple(nodes) if nodes_by_index else base.cluster.nodes)
