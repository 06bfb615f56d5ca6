"""Run one broker node: open the store, recover durable state, serve AMQP until cancelled.

Called by the `amqp-broker` CLI (`cli/broker.py`) and by tests (`await nursery.start(run_node,
settings)` reports the bound port). On cancellation (SIGTERM, Ctrl-C) open connections get
connection.close 320 CONNECTION_FORCED and the journal is flushed before returning.

TLS: the contexts of the AMQPS listeners and of the management API over HTTPS are built before
anything listens (a certificate that cannot be used stops the start with the file and the
reason), and re-read from their files on SIGHUP (`reload_certificates`; when the node runs in
the main thread, as `amqp-broker` does): new connections get the new certificates, open ones
keep theirs.
"""

from __future__ import annotations

import functools
import logging
import signal
import threading
from dataclasses import dataclass

import trio

from amqp_broker.cluster import cluster_config, host_metadata, install_quorum
from amqp_broker.settings import Settings
from amqp_broker.store.errors import StoreFatalError
from amqp_broker.tls import ServerTls
from quorum.log import LogFailed

from .alarms import run_alarms
from .broker import Broker
from .cluster_meta import ReplicatedMetadata
from .remote_queues import RemoteQueues
from .dlx_port import start_dlx_worker
from .listener import serve_amqp
from .membership import Membership
from .mirror_convert import MirrorConversions
from .persistence import Store
from .reconciler import run_reconciliation
from .recovery import import_local_metadata

__all__ = ["open_broker", "reload_certificates", "run_node", "serve_broker", "storage_failure",
           "start_http", "log_ready"]

_log = logging.getLogger(__name__)


def _open_store(settings: Settings) -> Store:
    store = Store(settings.data_dir)
    store.open()
    return store


def open_broker(settings: Settings) -> Broker:
    """Open the store in settings.data_dir and rebuild the durable state (no IO after this)."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    store = _open_store(settings)
    cluster = cluster_config(settings)
    # users, vhosts, permissions, policies and the topology come from the metadata group
    broker = Broker(settings, store, load_admin=False)
    broker.node_name = cluster.node
    # x-queue-type=quorum; the queue layer gets the server's DLX worker factory passed down
    # instead of importing it
    broker.quorum = install_quorum(broker, cluster=cluster,
                                   dlx_worker_factory=functools.partial(start_dlx_worker, broker))
    meta = broker.cluster_meta = store.metadata = ReplicatedMetadata(broker, broker.quorum)
    broker.admin.use_replicated(meta)
    broker.membership = Membership(broker, broker.quorum, meta)
    if cluster.clustered:
        remote = broker.remote_queues = RemoteQueues(broker, broker.quorum)
        broker.quorum.on_rpc = remote.handle
        broker.quorum.watch(remote)
        broker.mirror_conversions = MirrorConversions(broker)
    # the records are applied once the group's local log is replayed (meta.on_ready); journal
    # entries of classic queues wait for their queue's record until then
    host_metadata(broker.quorum, meta.on_effects, meta.on_ready)
    return broker


async def run_node(settings: Settings, *, stop: trio.Event | None = None,
                   task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Run until `stop` is set (graceful: clients get connection.close 320) or cancelled."""
    try:
        broker = open_broker(settings)
    except (StoreFatalError, LogFailed) as err:
        _log.critical("cannot start: %s", err)  # e.g. a damaged record in the data directory
        raise
    await serve_broker(broker, stop=stop, task_status=task_status)


async def serve_broker(broker: Broker, *, stop: trio.Event | None = None,
                       task_status=trio.TASK_STATUS_IGNORED, http: bool = True) -> None:
    """Serve an opened broker (see `open_broker`); reports the bound AMQP port. With `http`
    the management API and metrics too (`lifecycle.NodeProcess` serves them itself, for the
    whole process)."""
    store = broker.store
    settings = broker.settings
    if getattr(settings, "ssl_listeners", ()):
        broker.amqp_tls = ServerTls(settings.ssl_options, "amqp/ssl")
    https = getattr(settings, "management_ssl", None)
    broker.https_tls = ServerTls(https.tls, "https") if https is not None else None
    try:
        await _serve(broker, store, stop, task_status, http)
    except BaseExceptionGroup as group:
        failure = storage_failure(group)
        if failure is not None:
            # Fail-stop: nothing written after the last good fsync was confirmed, and nothing
            # will be; the node stops rather than build on a write whose fate is unknown.
            cause = failure.__cause__
            detail = f": {cause}" if cause is not None and str(cause) not in str(failure) else ""
            _log.critical("storage failure, stopping the node: %s%s (messages not confirmed "
                          "before this were not written durably; restart once the disk is "
                          "healthy)", failure, detail)
        raise
    finally:
        # Sessions are cancelled with the nursery; what they journaled is flushed here.
        try:
            store.close()
        except StoreFatalError as err:  # the disk that failed fails the last flush too
            _log.error("journal not flushed at shutdown: %s", err)
        _log.info("amqp-broker stopped")


def storage_failure(exc: BaseException) -> BaseException | None:
    """The journal's or the Raft log's write/fsync error inside `exc` (a group), if any."""
    if isinstance(exc, (StoreFatalError, LogFailed)):
        return exc
    for inner in getattr(exc, "exceptions", ()):
        found = storage_failure(inner)
        if found is not None:
            return found
    return None


async def _serve(broker: Broker, store, stop: trio.Event | None, task_status,
                 http: bool) -> None:
    """Every task of the node, in one nursery; returns when `stop` is set."""
    async with trio.open_nursery() as nursery:
        if threading.current_thread() is threading.main_thread():
            nursery.start_soon(_reload_on_sighup, broker)
        await nursery.start(store.run)
        if getattr(broker, "quorum", None) is not None:
            await nursery.start(broker.quorum.run)
        nursery.start_soon(broker.timers.run, broker)
        nursery.start_soon(run_alarms, broker)
        meta = broker.cluster_meta
        await meta.ready.wait()  # the metadata group's local log replayed and applied
        if not await meta.catch_up():
            _log.warning("no leader of the cluster's metadata yet: serving the records "
                         "this node has")
        await import_local_metadata(broker)  # a data dir from before the metadata group
        await meta.seed_defaults()
        store.drop_orphans()  # journal entries of queues that no longer exist
        await broker.quorum.replayed()  # recovered quorum queues: whole before clients see them
        _start_reconciliation(nursery, broker)
        if broker.mirror_conversions is not None:
            nursery.start_soon(broker.mirror_conversions.run)
        port = await nursery.start(serve_amqp, broker)
        if http:  # else the caller starts them, and logs ready once they are up too
            from amqp_broker.mgmt import Admin as HttpAdmin
            admin = HttpAdmin(broker)
            add_tls_listeners(admin, broker)
            await start_http(nursery, admin, broker, port)
            log_ready(broker.settings, port)
        task_status.started(port)
        if stop is not None:
            await stop.wait()
            await _close_connections(broker)
            nursery.cancel_scope.cancel()


def _start_reconciliation(nursery: trio.Nursery, broker: Broker) -> None:
    quorum = getattr(broker.settings, "quorum_queue", None)
    cmr = getattr(quorum, "reconciliation", None)
    if cmr is not None and cmr.enabled and broker.quorum.cluster.clustered:
        nursery.start_soon(run_reconciliation, broker, cmr)


def log_ready(settings: Settings, port: int) -> None:
    """The line tools and tests wait for: every listener is up."""
    _log.info("amqp-broker %s ready on port %d", settings.version, port)


def reload_certificates(broker: Broker) -> bool:
    """Re-read the certificate and key files of every TLS listener; False if one failed (it
    keeps its previous certificates)."""
    ok = True
    for tls in (broker.amqp_tls, broker.https_tls):
        if tls is not None:
            ok = tls.reload() and ok
    return ok


async def _reload_on_sighup(broker: Broker) -> None:
    with trio.open_signal_receiver(signal.SIGHUP) as signals:
        async for _ in signals:
            _log.info("received SIGHUP, reloading TLS certificates")
            reload_certificates(broker)


@dataclass(frozen=True, slots=True)
class _HttpPorts:
    """What mgmt.serve_management / serve_metrics read from their settings argument."""

    host: str
    management_host: str
    management_port: int
    prometheus_port: int
    management_ssl: object = None  # config.model.HttpsListener, for the HTTPS listener


async def start_http(nursery: trio.Nursery, admin, broker: Broker, amqp_port: int) -> None:
    """The management API and Prometheus endpoint on `admin` (a `mgmt.Admin`, or the process's
    `lifecycle.AppAdmin`), when `broker`'s settings configure them (BrokerSettings from
    rabbitmq.conf). A port already in use is logged, not fatal: AMQP clients matter more than
    the HTTP API."""
    s = broker.settings
    mgmt, prom = getattr(s, "management", None), getattr(s, "prometheus", None)
    https = getattr(s, "management_ssl", None)
    if mgmt is None or (mgmt.port < 0 and https is None):
        return
    from amqp_broker.mgmt import serve_management, serve_metrics

    ports = _HttpPorts(s.host, mgmt.host, mgmt.port, prom.port if prom is not None else -1,
                       https)
    for ln in broker.bound_listeners:
        admin.listeners.append({"node": admin.node, "protocol": ln["protocol"],
                                "ip_address": ln["ip_address"], "port": ln["port"],
                                "socket_opts": {}})
    https_serve = functools.partial(serve_management, tls=broker.https_tls)
    for what, serve, port in (("management API", serve_management, mgmt.port),
                              ("management API over HTTPS", https_serve,
                               https.port if https is not None else -1),
                              ("Prometheus metrics", serve_metrics, ports.prometheus_port)):
        if port < 0:
            continue
        try:
            await nursery.start(serve, admin, ports)
        except Exception as err:  # a busy port comes wrapped in the HTTP server's group
            _log.warning("%s not started on port %d: %r", what, port, err)


def add_tls_listeners(admin, broker: Broker) -> None:
    """Tell a management `Admin` about `broker`'s TLS listeners (certificate expiry)."""
    for ln in broker.bound_listeners:
        if ln["tls"] is not None:
            admin.add_tls_listener(ln["protocol"], ln["ip_address"], ln["port"],
                                   ln["tls"].options)


async def _close_connections(broker: Broker, grace: float = 2.0) -> None:
    """connection.close 320 to every client, then wait (briefly) for them to go."""
    sessions = list(broker.sessions)
    for session in sessions:
        session.force_close(
            320, "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'")
    with trio.move_on_after(grace):
        while broker.sessions:
            await trio.sleep(0.05)
