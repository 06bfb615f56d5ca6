"""One call for node start-up: build the `Admin` facade over a broker and serve the management
API and Prometheus metrics next to it, in the node's nursery:

    from amqp_broker.mgmt import serve_node_management
    await nursery.start(serve_node_management, broker, settings)

Reports `ManagementService(admin, management_port, metrics_port)`. Listeners come from
`settings.management` / `settings.prometheus` (rabbitmq.conf management.tcp.*, prometheus.tcp.*),
default 15672 and 15692; a port of 0 picks a free one (tests). Also used by `local_node.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import trio

from .admin import Admin
from .http import serve_management
from .metrics import serve_metrics

__all__ = ["ManagementService", "serve_node_management"]


@dataclass(frozen=True, slots=True)
class ManagementService:
    admin: Admin
    management_port: int
    metrics_port: int


async def serve_node_management(broker: Any, settings: Any, *,
                                task_status=trio.TASK_STATUS_IGNORED) -> None:
    admin = Admin(broker)
    async with trio.open_nursery() as nursery:
        mgmt = await nursery.start(serve_management, admin, settings)
        metrics = await nursery.start(serve_metrics, admin, settings)
        task_status.started(ManagementService(admin, mgmt, metrics))
