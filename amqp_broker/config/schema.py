"""Every key rabbitmq.conf may contain here, with its type; ``parse_text`` runs the pipeline.

Keys follow RabbitMQ's ``rabbit.schema`` (types, ranges, units) plus this broker's own
``node_name``, ``data_dir`` and ``compat_profile``. A ``$`` part matches one word
(``listeners.tcp.$name``). Unknown keys and bad values are errors that name the file, the line,
the key and what was expected. A key given twice: the last one wins, as in cuttlefish.
``parse_text`` is pure (text in, settings out): ``lexer.tokenize``, then each value through its
converter here, then ``build.build``. ``amqp_broker.config.loader`` reads the file.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path

from amqp_broker.tls import TLS_VERSIONS

from . import values as v
from .build import Seen, build
from .lexer import ConfigError, ConfigProblem, Entry, tokenize
from .model import LOG_LEVELS, PROFILES, BrokerSettings

__all__ = ["KEYS", "parse_text", "parse_entries"]


def _frame_max(raw: str) -> int:
    n = v.bytesize()(raw)
    if n != 0 and not 4096 <= n <= 0xFFFFFFFF:
        raise v.BadValue("0 (no limit) or a size in bytes from 4096 to 4294967295")
    return n


def _regex(raw: str) -> str:
    try:
        re.compile(raw)
    except re.error:
        raise v.BadValue("a valid regular expression") from None
    return raw


def _non_empty(raw: str) -> str:
    if not raw:
        raise v.BadValue("a non-empty string")
    return raw


def _none(raw: str) -> str:
    if raw != "none":
        raise v.BadValue("none")
    return raw


def _log_file(raw: str) -> str | None:
    return None if raw == "false" else raw


def _locator(raw: str) -> str:
    # RabbitMQ 3.10+ maps the old classic-queue names onto balanced.
    value = v.choice("client-local", "balanced", "random", "least-leaders", "min-masters")(raw)
    return "client-local" if value == "client-local" else "balanced"


def _discovery(raw: str) -> str:
    if raw not in ("classic_config", "classic", "config"):
        raise v.BadValue("classic_config (the only peer discovery backend this broker has)")
    return "classic_config"


def _seconds(unit_ms: bool, minimum: int) -> v.Converter:
    ints = v.integer(minimum, None, "milliseconds" if unit_ms else "seconds")
    return (lambda raw: ints(raw) / 1000.0) if unit_ms else ints


def _tls_version(raw: str) -> str:
    if raw in ("tlsv1.1", "tlsv1", "sslv3"):
        raise v.BadValue("tlsv1.2 or tlsv1.3 (TLS 1.1 and older are refused on purpose: they "
                         "are insecure)")
    return v.choice(*TLS_VERSIONS)(raw)


def _file(raw: str) -> str:
    return str(Path(_non_empty(raw)).expanduser())


# The TLS options RabbitMQ takes under ssl_options.* and management.ssl.*
_TLS_KEYS: dict[str, v.Converter] = {
    "cacertfile": _file,
    "certfile": _file,
    "keyfile": _file,
    "verify": v.choice("verify_peer", "verify_none"),
    "fail_if_no_peer_cert": v.boolean,
    "versions.$n": _tls_version,
}

_LEVEL = v.choice(*LOG_LEVELS)
_PORT = v.integer(0, 65535)
_POS = v.integer(1)
_MS = _seconds(True, 0)


def _rate(raw: str) -> float | None:
    """Operations a second, or `infinity` for no limit."""
    return None if raw == "infinity" else float(v.integer(1)(raw))


def _disk_ratio(raw: str) -> float:
    """disk_free_limit.relative: a multiple of physical memory, e.g. 1.0 or 1.5."""
    try:
        ratio = float(raw)
    except ValueError:
        raise v.BadValue("a non-negative number") from None
    if not 0 <= ratio < float("inf"):
        raise v.BadValue("a non-negative number")
    return ratio

# key pattern -> converter. Order only matters for the documentation.
KEYS: dict[str, v.Converter] = {
    "listeners.tcp": _none,
    "listeners.tcp.$name": v.listener,
    "listeners.ssl": _none,
    "listeners.ssl.$name": v.listener,
    **{f"ssl_options.{k}": conv for k, conv in _TLS_KEYS.items()},
    "node_name": v.node_name,
    "data_dir": lambda raw: Path(_non_empty(raw)).expanduser(),
    "compat_profile": v.choice(*PROFILES),
    "product.name": _non_empty,
    "product.version": _non_empty,
    "cluster_name": _non_empty,
    "default_vhost": _non_empty,
    "default_user": _non_empty,
    "default_pass": v.text,
    "default_permissions.configure": _regex,
    "default_permissions.write": _regex,
    "default_permissions.read": _regex,
    "default_user_tags.$tag": v.boolean,
    "anonymous_login_user": lambda raw: None if raw == "none" else _non_empty(raw),
    "anonymous_login_pass": v.text,
    "loopback_users": _none,
    "loopback_users.$user": v.boolean,
    "heartbeat": v.integer(0, 65535, "seconds"),
    "frame_max": _frame_max,
    "channel_max": v.integer(0, 65535),
    "max_message_size": v.integer(1, 536870912, "bytes"),
    "classic_queue.memory_budget_bytes": lambda raw: 0 if raw == "0" else v.information_unit(raw),
    "consumer_timeout": _seconds(True, 1),
    "handshake_timeout": v.millis_or_infinity(1),  # infinity -> None
    "vm_memory_high_watermark.relative": v.fraction,
    "vm_memory_high_watermark.absolute": v.information_unit,
    "disk_free_limit.absolute": v.information_unit,
    "disk_free_limit.relative": _disk_ratio,
    "collect_statistics_interval": v.integer(100, 3_600_000, "milliseconds"),
    "connection_max": lambda raw: None if raw == "infinity" else v.integer(0)(raw),
    "connection_limits.channel_opens_per_second": _rate,
    "connection_limits.queue_declares_per_second": _rate,
    "log.file": _log_file,
    "log.file.level": _LEVEL,
    "log.console": v.boolean,
    "log.console.level": _LEVEL,
    "log.default.level": _LEVEL,
    "log.level": _LEVEL,
    "management.tcp.port": _PORT,
    "management.tcp.ip": v.ip_address,
    "management.ssl.port": _PORT,
    "management.ssl.ip": v.ip_address,
    **{f"management.ssl.{k}": conv for k, conv in _TLS_KEYS.items()},
    "prometheus.tcp.port": _PORT,
    "prometheus.tcp.ip": v.ip_address,
    "queue_leader_locator": _locator,
    "queue_master_locator": _locator,
    "quorum_queue.initial_cluster_size": _POS,
    "quorum_queue.commands_soft_limit": _POS,
    "quorum_queue.property_equivalence.relaxed_checks_on_redeclaration": v.boolean,
    "quorum_queue.continuous_membership_reconciliation.enabled": v.boolean,
    "quorum_queue.continuous_membership_reconciliation.auto_remove": v.boolean,
    "quorum_queue.continuous_membership_reconciliation.interval": _MS,
    "quorum_queue.continuous_membership_reconciliation.trigger_interval": _MS,
    "quorum_queue.continuous_membership_reconciliation.target_group_size": v.integer(0),
    "quorum_queue.continuous_membership_reconciliation.replace_unreachable_after": _MS,
    "raft.wal_max_size_bytes": _POS,
    "raft.segment_max_entries": v.integer(1, 65535),
    "raft.mem_table_max_bytes": _POS,
    "dead_letter_worker_consumer_prefetch": _POS,
    "dead_letter_worker_publisher_confirm_timeout": _seconds(True, 1),
    "cluster_formation.peer_discovery_backend": _discovery,
    "cluster_formation.classic_config.nodes.$node": v.peer_node,
    "distribution.listener.port_range.min": _PORT,
    "inter_node_tls": v.boolean,
    "net_ticktime": _POS,
}
# connection_max's text when it fails (the lambda above cannot say it).
_EXPECTED = {"connection_max": "a non-negative integer or 'infinity'",
             "connection_limits.channel_opens_per_second": "a positive integer or 'infinity'",
             "connection_limits.queue_declares_per_second": "a positive integer or 'infinity'",
             "disk_free_limit.relative": "a non-negative number (a multiple of total RAM)"}

_PATTERNS = [tuple(k.split(".")) for k in KEYS]


def _match(parts: tuple[str, ...]) -> tuple[str, str | None] | None:
    for pattern in _PATTERNS:
        if len(pattern) == len(parts) and all(p.startswith("$") or p == q for p, q in zip(pattern, parts)):
            name = next((q for p, q in zip(pattern, parts) if p.startswith("$")), None)
            return ".".join(pattern), name
    return None


def _unknown(entry: Entry, file: str) -> ConfigProblem:
    close = difflib.get_close_matches(entry.key, list(KEYS), n=1, cutoff=0.75)
    hint = f" (did you mean {close[0]!r}?)" if close else " (see rabbitmq.conf.example for the supported keys)"
    return ConfigProblem(file, entry.line, entry.key, "unknown key" + hint)


def _collect(entries: list[Entry], file: str, problems: list[ConfigProblem]) -> Seen:
    seen = Seen()
    for entry in entries:
        found = _match(entry.parts)
        if found is None:
            problems.append(_unknown(entry, file))
            continue
        pattern, name = found
        try:
            value = KEYS[pattern](entry.value)
        except v.BadValue as exc:
            expected = _EXPECTED.get(pattern, str(exc))
            problems.append(ConfigProblem(file, entry.line, entry.key, f"expected {expected}, got {entry.value!r}"))
            continue
        if name is None:
            seen.exact[pattern] = value
        else:
            seen.named.setdefault(pattern, {})[name] = value
        seen.lines[(pattern, name)] = entry.line
    return seen


def parse_entries(entries: list[Entry], file: str = "rabbitmq.conf",
                  base: BrokerSettings | None = None) -> BrokerSettings:
    """Build settings from tokenized entries on top of ``base`` (defaults if None)."""
    problems: list[ConfigProblem] = []
    seen = _collect(entries, file, problems)
    settings = build(seen, file, problems, base or BrokerSettings())
    if problems:
        raise ConfigError(problems)
    return settings


def parse_text(text: str, file: str = "rabbitmq.conf", base: BrokerSettings | None = None) -> BrokerSettings:
    """Parse rabbitmq.conf text; raise ``ConfigError`` listing every problem found."""
    entries, problems = tokenize(text, file)
    if problems:
        # Still report bad keys and values of the lines that did parse.
        try:
            parse_entries(entries, file, base)
        except ConfigError as exc:
            problems = sorted(problems + exc.problems, key=lambda p: p.line)
        raise ConfigError(problems)
    return parse_entries(entries, file, base)
