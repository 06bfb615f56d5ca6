"""Management: the `Admin` facade over a node, the RabbitMQ-compatible management HTTP API
with its message-rate sampler (`rates.py`) and the web UI it serves (`webui.py`, `static/`),
Prometheus metrics, and the HTTP client and table output the CLI tools use.

Who calls what: node start-up (`server.node._start_http`, the only place that starts them,
when rabbitmq.conf configures management) builds one `Admin(broker)` and runs
`serve_management(admin, ports)` and `serve_metrics(admin, ports)` in its nursery.
`amqp-brokerctl` and `amqp-broker-queues` never touch a broker: they talk HTTP through
`ApiClient` (`client.py`) and `cli_common.py`. Persisted mutations of users, vhosts,
permissions and policies go through the server's `broker.admin` (`server/admin.py`).
"""

from .admin import Admin
from .client import ApiClient, ApiError, NodeDown
from .errors import AdminError, BadRequest, NotAuthorised, NotFoundError
from .http import build_app, serve_management
from .metrics import render_metrics, serve_metrics

__all__ = ["Admin", "AdminError", "ApiClient", "ApiError", "BadRequest", "NodeDown",
           "NotAuthorised", "NotFoundError", "build_app", "render_metrics",
           "serve_management", "serve_metrics"]
