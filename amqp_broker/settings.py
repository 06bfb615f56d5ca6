"""Typed, frozen settings for one broker node.

Built once at start-up (by the CLI from flags, or by `amqp_broker.config` from a rabbitmq.conf-style
file) and passed down to the server, broker and sessions. No module-level singleton: tests build
their own `Settings(...)` with `dataclasses.replace`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Settings", "default_data_dir"]


def default_data_dir() -> Path:
    """$AMQP_BROKER_DATA_DIR, else $XDG_DATA_HOME/amqp-broker, else ~/.local/share/amqp-broker."""
    env = os.environ.get("AMQP_BROKER_DATA_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share"
    return base / "amqp-broker"


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything a node needs to know to serve AMQP. Defaults follow RabbitMQ 4.x."""

    host: str = "0.0.0.0"
    port: int = 5672
    data_dir: Path = field(default_factory=default_data_dir)
    default_vhost: str = "/"
    default_user: str = "guest"
    default_pass: str = "guest"
    # Users that may only log in from 127/8, ::1 (RabbitMQ's loopback_users).
    loopback_users: tuple[str, ...] = ("guest",)
    # SASL ANONYMOUS logs in as this user (RabbitMQ 4.x: guest/guest, so loopback only by
    # default); None: ANONYMOUS is not offered (RabbitMQ 3.x, or `anonymous_login_user = none`).
    anonymous_login_user: str | None = "guest"
    anonymous_login_pass: str = "guest"
    heartbeat: int = 60  # seconds proposed in connection.tune; 0 disables
    frame_max: int = 131072
    channel_max: int = 2047
    max_message_size: int = 16 * 1024 * 1024
    # Bytes of ready messages (bodies plus ~256 a message) a classic queue keeps in memory;
    # past it messages are paged out to <data_dir>/spill (queues/classic.py). Ours.
    classic_queue_memory_budget: int = 8 * 1024 * 1024
    consumer_timeout: float | None = 30 * 60.0  # seconds; None disables the check
    handshake_timeout: float | None = 10.0  # seconds; None = infinity
    connection_max: int | None = None
    # Per-connection rate limits (operations a second, bursts of one second's worth; None: no
    # limit). A client going faster is slowed down: its socket is not read until it is back
    # under the rate (core/ratelimit.py). Ours: RabbitMQ has no such limits.
    channel_open_rate: float | None = 2000.0
    queue_declare_rate: float | None = 2000.0
    product: str = "amqp-broker"  # see protocol/config.py: not "RabbitMQ" on purpose (kombu qos)
    version: str = "4.2.0"  # the RabbitMQ behaviour we follow; clients compare it with 3.x
    platform: str = "Python/trio"
    cluster_name: str = "amqp-broker"
    # Resource alarms (connection.blocked): a fraction of RAM (<= 1) or bytes (> 1), and bytes.
    memory_high_watermark: float = 0.4
    disk_free_limit: int = 50 * 1024 * 1024
    # disk_free_limit.relative: the limit as a multiple of physical memory (wins when set).
    disk_free_limit_relative: float | None = None
    # Milliseconds between samples of the management API's message rates (mgmt/rates.py).
    collect_statistics_interval: int = 5000
