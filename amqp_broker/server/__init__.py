"""The trio server: listener, per-connection sessions, channel semantics, broker wiring.

- `run_node(settings, stop=None)`: a whole node (what the `amqp-broker` CLI calls);
  equivalently `serve_broker(open_broker(settings))`, which lets a caller (tests, tools) reach the
  `Broker` before serving. Both report the bound AMQP port through `task_status`.
- `Broker`: the node's state (vhosts, sessions, queue runtimes, timers, confirms after fsync);
  `broker.admin` (`Admin`) keeps users, permissions, vhosts and policies (persisted);
  `broker.queue_factories[x_queue_type]` plugs in queue types (quorum): each builds a
  `queues.base.QueueType`, the only surface the server uses on a queue.

Module map: listener -> session (reader/writer/heartbeat) -> channel (publish, acks, confirms,
tx) + consumers (qos/consume/get) + declares (exchange/queue methods) -> vhost (topology,
queues, exclusivity) -> queue_runtime (a QueueType plus dispatch, journal taps, timers).
"""

from .admin import Admin
from .broker import Broker
from .counters import Counters
from .listener import serve_amqp
from .node import open_broker, run_node, serve_broker

__all__ = ["Admin", "Broker", "Counters", "open_broker", "run_node", "serve_amqp", "serve_broker"]
