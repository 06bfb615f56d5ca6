"""Management: the `Admin` facade over a node, the RabbitMQ-compatible management HTTP API,
Prometheus metrics, and the HTTP client the CLI tools use.

Node start-up (`amqp_broker/server/node.py`, the only place that starts them) runs
`serve_management` and `serve_metrics` with its own `Admin`; the CLIs use `ApiClient`.
"""

from .admin import Admin
from .client import ApiClient, ApiError, NodeDown
from .errors import AdminError, BadRequest, NotAuthorised, NotFoundError
from .http import build_app, serve_management
from .metrics import render_metrics, serve_metrics

__all__ = ["Admin", "AdminError", "ApiClient", "ApiError", "BadRequest", "NodeDown",
           "NotAuthorised", "NotFoundError", "build_app", "render_metrics",
           "serve_management", "serve_metrics"]
