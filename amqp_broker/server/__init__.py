"""The trio server: listener, per-connection sessions, channel semantics, broker wiring.

`run_node(settings)` runs a whole node (what the `amqp-broker` CLI calls); `Broker` holds the
node's state and can be driven directly by tests.
"""

from .admin import Admin
from .broker import Broker
from .node import open_broker, run_node, serve_broker
from .listener import serve_amqp

__all__ = ["Admin", "Broker", "open_broker", "run_node", "serve_amqp", "serve_broker"]
