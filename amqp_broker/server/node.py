"""Run one broker node: open the store, recover durable state, serve AMQP until cancelled.

Called by the `amqp-broker` CLI (`cli/broker.py`) and by tests (`await nursery.start(run_node,
settings)` reports the bound port). On cancellation (SIGTERM, Ctrl-C) open connections get
connection.close 320 CONNECTION_FORCED and the journal is flushed before returning.
"""

from __future__ import annotations

import logging

import trio

from amqp_broker.settings import Settings

from .alarms import run_alarms
from .broker import Broker
from .listener import serve_amqp
from .persistence import Store
from .recovery import recover

__all__ = ["open_broker", "run_node", "serve_broker"]

_log = logging.getLogger(__name__)


def _open_store(settings: Settings) -> Store:
    store = Store(settings.data_dir)
    store.open()
    return store


def open_broker(settings: Settings) -> Broker:
    """Open the store in settings.data_dir and rebuild the durable state (no IO after this)."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    store = _open_store(settings)
    broker = Broker(settings, store)
    recover(broker, store)
    for name in list(broker.vhosts):
        broker.admin.apply_policies(name)
    return broker


async def run_node(settings: Settings, *, stop: trio.Event | None = None,
                   task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Run until `stop` is set (graceful: clients get connection.close 320) or cancelled."""
    await serve_broker(open_broker(settings), stop=stop, task_status=task_status)


async def serve_broker(broker: Broker, *, stop: trio.Event | None = None,
                       task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Serve an opened broker (see `open_broker`); reports the bound AMQP port."""
    store = broker.store
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(store.run)
            nursery.start_soon(broker.timers.run, broker)
            nursery.start_soon(run_alarms, broker)
            nursery.start_soon(broker.durability.run, broker)
            port = await nursery.start(serve_amqp, broker)
            _log.info("amqp-broker %s ready on port %d", broker.settings.version, port)
            task_status.started(port)
            if stop is not None:
                await stop.wait()
                await _close_connections(broker)
                nursery.cancel_scope.cancel()
    finally:
        # Sessions are cancelled with the nursery; what they journaled is flushed here.
        store.close()
        _log.info("amqp-broker stopped")


async def _close_connections(broker: Broker, grace: float = 2.0) -> None:
    """connection.close 320 to every client, then wait (briefly) for them to go."""
    sessions = list(broker.sessions)
    for session in sessions:
        session.force_close(
            320, "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'")
    with trio.move_on_after(grace):
        while broker.sessions:
            await trio.sleep(0.05)
