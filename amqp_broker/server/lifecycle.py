"""A node's process and its broker application, which `amqp-brokerctl` stops and starts while the
process and its management API stay up (as rabbitmqctl's stop_app / start_app / reset /
join_cluster act on the rabbit application inside a running Erlang node).

`run_node_process` is what the `amqp-broker` CLI runs. The management API is served for the
whole life of the process through `AppAdmin`, which hands each request to the running
application's `mgmt.Admin`; while the application is stopped it answers only authentication
(with the users the node had when it stopped) and the control verbs (`/api/ctl/<verb>`,
administrators only), everything else 503. Tests that want a bare application use
`node.run_node`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
from typing import Any

import trio

from amqp_broker.cluster import membership as wire
from amqp_broker.cluster.nodes import cluster_config, parse_peer, read_membership, \
    write_membership
from amqp_broker.settings import Settings
from amqp_broker.store.errors import StoreFatalError
from quorum.log import LogFailed

from .node import add_tls_listeners, log_ready, open_broker, serve_broker, start_http

__all__ = ["run_node_process", "NodeProcess", "AppAdmin", "ControlError"]

_log = logging.getLogger(__name__)

_APP_RUNNING = ("this command requires the 'rabbit' app to be stopped on the target node. "
                "Stop it with 'rabbitmqctl stop_app'.")
_KEPT = (".erlang.cookie",)  # what reset leaves in the data directory


class ControlError(Exception):
    """A control verb refused: `status` (HTTP) and rabbitmqctl's text."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class AppAdmin:
    """What the management API talks to for the whole life of the process."""

    def __init__(self, process: "NodeProcess") -> None:
        self._process = process
        self.current: Any = None  # the running application's mgmt.Admin
        self.last: Any = None     # the last one (its users authenticate while stopped)
        self.listeners: list[dict] = []
        from amqp_broker.mgmt.rates import Rates
        self.rates = Rates()  # one history of message rates across application restarts

    def sample_totals(self) -> dict:
        """The running application's counters for the rates sampler (none while stopped)."""
        return self.current.sample_totals() if self.current is not None else {}

    @property
    def stopped(self) -> bool:
        return self.current is None

    def __getattr__(self, name: str) -> Any:
        admin = self.current
        if admin is None:
            admin = self.last
            if admin is None or name not in ("authenticate", "settings", "node", "can_access"):
                raise AttributeError(name)
        return getattr(admin, name)

    async def node_control(self, verb: str, body: dict) -> dict:
        return await self._process.control(verb, body or {})


class NodeProcess:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.admin = AppAdmin(self)
        self.broker: Any = None
        self._nursery: trio.Nursery | None = None
        self._app_stop: trio.Event | None = None
        self._app_done = trio.Event()
        self._lock = trio.Lock()  # one control verb at a time

    @property
    def running(self) -> bool:
        return self.admin.current is not None

    @property
    def node(self) -> str:
        return cluster_config(self.settings).node

    async def run(self, *, stop: trio.Event | None = None,
                  task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            port = await self._start_app()
            if not self.settings.port:  # port 0: keep the one bound across app restarts
                self.settings = dataclasses.replace(self.settings, port=port)
            await start_http(nursery, self.admin, self.broker, port)
            log_ready(self.settings, port)
            task_status.started(port)
            if stop is None:
                await trio.sleep_forever()
            await stop.wait()
            await self._stop_app()
            nursery.cancel_scope.cancel()

    # -- the application ----------------------------------------------------------------------
    async def _start_app(self) -> int:
        from amqp_broker.mgmt import Admin as HttpAdmin

        try:
            broker = open_broker(self.settings)
        except (StoreFatalError, LogFailed) as err:
            _log.critical("cannot start: %s", err)  # e.g. a damaged record in the data dir
            raise
        broker.membership.on_clustered = self._restart_clustered
        self._app_done = trio.Event()
        port = await self._nursery.start(self._serve, broker)
        self.broker = broker
        admin = HttpAdmin(broker)
        admin.listeners = self.admin.listeners  # the process's listeners, kept across restarts
        admin.rates = self.admin.rates
        add_tls_listeners(admin, broker)
        self.admin.current = self.admin.last = admin
        return port

    async def _serve(self, broker: Any, task_status=trio.TASK_STATUS_IGNORED) -> None:
        self._app_stop = trio.Event()
        try:
            await serve_broker(broker, stop=self._app_stop, task_status=task_status,
                               http=False)
        finally:
            self._app_done.set()

    async def _stop_app(self) -> None:
        if self.admin.current is None:
            return
        self.admin.current = None
        self._app_stop.set()
        await self._app_done.wait()

    def _restart_clustered(self) -> None:
        """A lone node gained its first peer: restart the application clustered (its queues
        become replicated groups); clients reconnect."""
        async def restart() -> None:
            await trio.sleep(0.5)  # the joining node's answer goes out first
            async with self._lock:
                _log.info("node %s is now clustered: restarting its application", self.node)
                await self._stop_app()
                log_ready(self.settings, await self._start_app())
        self._nursery.start_soon(restart)

    # -- control verbs ------------------------------------------------------------------------
    async def control(self, verb: str, body: dict) -> dict:
        async with self._lock:
            if verb == "status":
                pass
            elif verb == "stop_app":
                await self._stop_app()
            elif verb == "start_app":
                if not self.running:
                    log_ready(self.settings, await self._start_app())
            elif verb in ("reset", "force_reset"):
                self._require_stopped()
                await self._reset(force=verb == "force_reset")
            elif verb == "join_cluster":
                self._require_stopped()
                await self._join(str(body.get("node", "")))
            elif verb == "forget_cluster_node":
                if not self.running:
                    raise ControlError(409, "this node's application is stopped: forget a node "
                                       "from a node that runs (or start_app first)")
                error = await self.broker.membership.forget(str(body.get("node", "")))
                if error:
                    raise ControlError(400, error)
            else:
                raise ControlError(404, f"unknown control verb {verb!r}")
        return {"node": self.node, "running": self.running}

    def _require_stopped(self) -> None:
        if self.running:
            raise ControlError(409, _APP_RUNNING)

    async def _reset(self, force: bool = False) -> None:
        """Leave the cluster (its nodes forget this one) and wipe the data directory: the node
        starts again as a new, lone node."""
        config = cluster_config(self.settings)
        if config.peers and not force:
            await self._leave(config)
        data = self.settings.data_dir
        for entry in os.listdir(data):
            if entry in _KEPT:
                continue
            path = os.path.join(data, entry)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
        write_membership(data, {config.node: config.advertise})
        self.admin.last = None if force else self.admin.last
        _log.info("node %s reset", config.node)

    async def _leave(self, config: Any) -> None:
        errors = []
        for peer, addr in sorted(config.peers.items()):
            try:
                await wire.ask_cluster(config.node, config.cookie, peer, addr,
                                       wire.Leave(config.node), timeout=15, tls=config.tls)
                return
            except wire.MembershipError as err:
                errors.append(str(err))
        raise ControlError(503, "cannot reset: no node of the cluster could be told that this "
                           "node leaves (" + "; ".join(errors) + "). Start one of them, or "
                           "use force_reset (the others then keep this node as a member until "
                           "forget_cluster_node)")

    async def _join(self, target: str) -> None:
        config = cluster_config(self.settings)
        if "@" not in target:
            raise ControlError(400, f"{target!r} is not a node name (name@host)")
        name, addr = parse_peer(target)
        if name == config.node:
            raise ControlError(400, "{:cannot_cluster_node_with_itself, "
                               f":{config.node}}}")
        known = _known_address(self.settings, name)
        if ":" not in target and known:
            addr = known
        if name in config.peers:
            raise ControlError(400, f"{{:ok, :already_member}}: {config.node} is already a "
                               f"member of the cluster of {name}")
        await self._reset()
        config = cluster_config(self.settings)
        answer = await _ask_or_refuse(config, name, addr,
                                      wire.Join(config.node, *config.advertise))
        write_membership(self.settings.data_dir, dict(answer.nodes), joining=True)
        _log.info("node %s joined the cluster of %s: %s", config.node, name,
                  ", ".join(sorted(answer.nodes)))


def _known_address(settings: Settings, name: str) -> tuple[str, int] | None:
    """Where node `name` is dialled, as this node knows: its node list, else classic_config
    (a name without a port there means the default distribution port)."""
    kept = read_membership(settings.data_dir)
    if kept is not None and name in kept["nodes"]:
        return kept["nodes"][name]
    for spec in getattr(getattr(settings, "cluster", None), "nodes", ()) or ():
        peer, addr = parse_peer(spec)
        if peer == name:
            return addr
    return None


async def _ask_or_refuse(config: Any, name: str, addr: tuple, question: Any) -> Any:
    try:
        return await wire.ask_cluster(config.node, config.cookie, name, addr, question,
                                      tls=config.tls)
    except wire.MembershipError as err:
        raise ControlError(503, str(err)) from err


async def run_node_process(settings: Settings, *, stop: trio.Event | None = None,
                           task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Run the node's process until `stop` is set (or cancelled)."""
    await NodeProcess(settings).run(stop=stop, task_status=task_status)
