"""A broker node with the management API and metrics, run in-process: for tests and for trying
the API without a full node start-up.

`run_local_node(settings)` is a trio task (broker without a store, AMQP listener, timers,
management, metrics) that reports `LocalPorts`; `LocalNode` runs it in a background thread with
its own trio loop, so synchronous tests (httpx, pika, the CLIs) can talk to it:

    with LocalNode() as node:
        httpx.get(node.mgmt_url + "/api/overview", auth=("guest", "guest"))
"""

from __future__ import annotations

import dataclasses
import functools
import queue
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from amqp_broker.config import BrokerSettings, HttpListener
from amqp_broker.settings import Settings

__all__ = ["LocalNode", "LocalPorts", "run_local_node"]


@dataclass(frozen=True, slots=True)
class LocalPorts:
    amqp: int
    management: int
    metrics: int
    admin: Any


async def run_local_node(settings: Settings, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    from amqp_broker.server import Broker, serve_amqp

    from .service import serve_node_management

    broker = Broker(settings, None)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(broker.timers.run, broker)
        amqp = await nursery.start(serve_amqp, broker)
        svc = await nursery.start(serve_node_management, broker, settings)
        svc.admin.listeners.insert(0, {"node": svc.admin.node, "protocol": "amqp",
                                       "ip_address": settings.host, "port": amqp,
                                       "socket_opts": {}})
        task_status.started(LocalPorts(amqp, svc.management_port, svc.metrics_port, svc.admin))


class LocalNode:
    """Context manager: a local node on free loopback ports in a background thread."""

    def __init__(self, settings: BrokerSettings | None = None) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="amqp-broker-mgmt-")
        base = settings or BrokerSettings()
        local = HttpListener("127.0.0.1", 0)
        self.settings = dataclasses.replace(base, host="127.0.0.1", port=0,
                                            data_dir=Path(self._tmp.name),
                                            management=local, prometheus=local)
        self._thread: threading.Thread | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._scope: trio.CancelScope | None = None
        self.ports: LocalPorts | None = None

    @property
    def admin(self):
        return self.ports.admin

    @property
    def mgmt_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.management}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.metrics}"

    @property
    def amqp_url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.ports.amqp}/%2F"

    def call(self, fn, *args, **kwargs):
        """Run `fn(*args, **kwargs)` in the node's trio thread (broker state is not
        thread-safe)."""
        return trio.from_thread.run_sync(functools.partial(fn, *args, **kwargs),
                                         trio_token=self._token)

    def start(self) -> "LocalNode":
        started: queue.Queue = queue.Queue()

        async def main() -> None:
            self._token = trio.lowlevel.current_trio_token()
            with trio.CancelScope() as scope:
                self._scope = scope
                try:
                    async with trio.open_nursery() as nursery:
                        started.put(await nursery.start(run_local_node, self.settings))
                except BaseException as e:
                    started.put(e)
                    raise

        self._thread = threading.Thread(target=trio.run, args=(main,), daemon=True,
                                        name="local-node")
        self._thread.start()
        result = started.get(timeout=30)
        if isinstance(result, BaseException):
            raise RuntimeError(f"local node failed to start: {result!r}")
        self.ports = result
        return self

    def stop(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            trio.from_thread.run_sync(self._scope.cancel, trio_token=self._token)
            self._thread.join(15)
        self._tmp.cleanup()

    def __enter__(self) -> "LocalNode":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
