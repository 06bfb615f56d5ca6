"""The broker side of the at-least-once dead-letter worker: `dlx.DlxPort` for one quorum queue.

`start_dlx_worker` (with the broker bound) is the factory `node.open_broker` injects into the quorum queue type (through
`cluster.install_quorum`): a quorum queue calls it on its first at-least-once dead letter, so
the queue layer never imports this server module. The port builds and routes the
dead-lettered copy with `deadletter.prepare_copy` / `find_targets` (the same code as
at-most-once), on the queue's *current* dead-letter exchange; publishes it with confirms
through each target's `QueueRuntime.publish`; settles through the queue's
`settle_dead_letters`; and polls for retries on the broker's deadline heap (`timer_deadline` /
`on_timer`, as queue timers do).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Protocol

from dlx import DEFAULT_PREFETCH, DlxWorker

from .deadletter import DeadLetterCopy, find_targets, prepare_copy

if TYPE_CHECKING:
    from .broker import Broker

__all__ = ["DeadLetterSource", "BrokerDlxPort", "start_dlx_worker"]


class DeadLetterSource(Protocol):
    """What the port needs from the quorum queue whose dead letters it republishes."""

    name: str
    vhost: str

    def dead_letter_exchange(self) -> tuple[str | None, str | None]:
        """(DLX, dead-letter routing key) as configured now."""
        ...

    def holds_dead_letter(self, dlx_id: int) -> bool:
        """Is `dlx_id` still held in the replicated state for at-least-once?"""
        ...

    def settle_dead_letters(self, dlx_ids: tuple[int, ...]) -> None:
        """Every target confirmed these: release them from the replicated state."""
        ...


class _Confirm:
    """Stands in for a channel's confirm tracker: `QueueRuntime.publish` calls `settle`."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[[bool], None]) -> None:
        self.fn = fn

    def settle(self, seq: int, ok: bool) -> None:
        self.fn(ok)


class BrokerDlxPort:
    """`dlx.worker.DlxPort` over one quorum queue and the broker that hosts it."""

    def __init__(self, source: DeadLetterSource, broker: "Broker") -> None:
        self.source = source
        self.broker = broker
        self.worker: DlxWorker | None = None
        self.timer_deadline: int | None = None  # DeadlineHeap contract

    def _runtime(self, name: str):
        vhost = self.broker.vhosts.get(self.source.vhost)
        return vhost.queues.get(name) if vhost is not None else None

    def now_ms(self) -> int:
        return self.broker.clock_ms()

    def is_held(self, dlx_id: int) -> bool:
        return self.source.holds_dead_letter(dlx_id)

    def prepare(self, reason: str, message: Any) -> DeadLetterCopy | None:
        dlx, dlx_key = self.source.dead_letter_exchange()
        if dlx is None:
            return None
        return prepare_copy(message, reason=reason, queue=self.source.name, dlx=dlx,
                            dlx_routing_key=dlx_key, now_ms=self.broker.now_ms)

    def route(self, copy: DeadLetterCopy) -> tuple[list[str], list[str]]:
        vhost = self.broker.vhosts.get(self.source.vhost)
        if vhost is None:
            raise LookupError(f"vhost {self.source.vhost!r} is gone")
        return find_targets(vhost.topology, copy)

    def has_room(self, name: str) -> bool:
        """False while a reject-publish target is at its limit (publishing would be refused)."""
        rt = self._runtime(name)
        if rt is None:
            return True  # publish reports it missing
        return not rt.queue.is_full()  # each queue type applies its own limit rule

    def publish(self, name: str, copy: DeadLetterCopy, callback: Callable[[bool], None]) -> bool:
        rt = self._runtime(name)
        if rt is None or rt.deleted:
            return False
        rt.publish(copy.message, self.broker.now_ms, (_Confirm(callback), 0))
        return True

    def settle(self, dlx_ids: tuple[int, ...]) -> None:
        self.source.settle_dead_letters(dlx_ids)

    def schedule(self, at_ms: int) -> None:
        self.timer_deadline = at_ms
        self.broker.timers.schedule(at_ms, self)

    def on_timer(self, now_ms: int) -> None:
        """DeadlineHeap callback: the worker's retry poll is due."""
        self.timer_deadline = None
        if self.worker is not None:
            self.worker.on_timer(now_ms)


def start_dlx_worker(broker: "Broker", source: DeadLetterSource) -> DlxWorker:
    """A worker for `source` with the node's dead_letter_worker_* settings (`node.open_broker`
    binds `broker` and hands the rest to the quorum queue type as its worker factory)."""
    port = BrokerDlxPort(source, broker)
    prefetch = getattr(broker.settings, "dead_letter_worker_consumer_prefetch", DEFAULT_PREFETCH)
    timeout = getattr(broker.settings, "dead_letter_worker_publisher_confirm_timeout", 180.0)
    worker = DlxWorker(port, prefetch=prefetch, confirm_timeout_ms=int(timeout * 1000),
                       name=source.name)
    port.worker = worker
    return worker
