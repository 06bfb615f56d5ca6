"""The trio server: listener, per-connection sessions, channel semantics, broker wiring.

`run_node(settings)` runs a whole node (what the `amqp-broker` CLI calls); `Broker` holds the
node's state and can be driven directly by tests.
"""

from .broker import Broker, is_loopback
from .node import run_node
from .listener import serve_amqp

__all__ = ["Broker", "is_loopback", "run_node", "serve_amqp"]
