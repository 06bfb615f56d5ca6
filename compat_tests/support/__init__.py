"""Helpers shared by the compat tests and tests/: server detection, our-broker launcher, raw
AMQP sockets, pika connections and polling helpers, the aio-pika runner (Prometheus parsing is
in `metrics`).  Imported by the conftests and the tests.
"""

from compat_tests.support.aio import run_aio
from compat_tests.support.http import management_client
from compat_tests.support.launcher import Broker, LaunchError, free_port, free_ports, launch_our_broker
from compat_tests.support.names import Names
from compat_tests.support.pika_util import (
    channel_closed,
    connection_closed,
    consume_n,
    wait_channel_closed,
    drain,
    get_body,
    get_n,
    pika_connections,
    pika_parameters,
    publish,
    roundtrip,
    wait_until,
)
from compat_tests.support.raw import RawClient
from compat_tests.support.server import ServerInfo, probe_server

__all__ = [
    "channel_closed",
    "connection_closed",
    "wait_channel_closed",
    "Broker",
    "LaunchError",
    "Names",
    "RawClient",
    "ServerInfo",
    "consume_n",
    "drain",
    "get_body",
    "free_port",
    "free_ports",
    "get_n",
    "launch_our_broker",
    "management_client",
    "pika_connections",
    "pika_parameters",
    "probe_server",
    "publish",
    "roundtrip",
    "run_aio",
    "wait_until",
]
