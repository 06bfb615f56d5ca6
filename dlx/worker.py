"""At-least-once dead-letter worker of one quorum queue (like rabbit_fifo_dlx_worker).

One `DlxWorker` lives beside the leader of a quorum queue whose dead-letter strategy is
at-least-once. The queue's replicated state keeps every dead-lettered message (the fifo's
`dlx` sub-state) until this worker settles it with `DlxSettle`; so a crash, restart or new
leader only means republishing again (duplicates are allowed, losses are not).

Flow: the adapter hands over held messages (`add`, and `load` of `state.dlx.pending()` when the
group becomes ready). The worker takes up to `prefetch` of them at a time and, for each,
asks its port to build the dead-lettered copy and route it on the current dead-letter
exchange, then publishes it to every target queue with a confirm callback. When every target
confirmed, the message is settled. A target that refused it (reject-publish, full, deleted),
a missing exchange or a route to no queue keeps the message; it is retried on a short poll
(`retry_ms`, default 500 ms) and only to the targets that have not confirmed yet, and not
before the port says the target has room. A confirm that never comes is given up on after
`confirm_timeout_ms` (dead_letter_worker_publisher_confirm_timeout) and the message resent.
Targets dropped because of a dead-letter cycle count as done; a message whose every route is a
cycle is settled (dropped) as at-most-once would.

Pure: no trio, no clock, no broker imports. `DlxPort` below is the whole interface to the
outside; the broker implements it in `amqp_broker.server.dlx_port.BrokerDlxPort`, tests with a
fake. It supplies time, routing, publishing, settling and a retry timer:

    port.now_ms() -> int
    port.is_held(dlx_id) -> bool                       # still in the queue's dlx state?
    port.prepare(reason, message) -> Prepared | None   # None: no DLX configured now
    port.route(prepared) -> (targets, dropped as cycles)   # raises when the DLX is missing
    port.has_room(queue_name) -> bool
    port.publish(queue_name, prepared, callback(ok)) -> bool   # False: no such queue
    port.settle(dlx_ids: tuple[int, ...])
    port.schedule(at_ms)                               # call `on_timer` then
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from functools import partial
from typing import Any, Protocol

__all__ = ["DlxWorker", "DlxPort", "DEFAULT_PREFETCH", "RETRY_MS", "CONFIRM_TIMEOUT_MS"]

_log = logging.getLogger(__name__)

DEFAULT_PREFETCH = 32  # dead_letter_worker_consumer_prefetch
RETRY_MS = 500         # poll interval for refused messages (RabbitMQ waits minutes; we don't)
CONFIRM_TIMEOUT_MS = 180_000  # dead_letter_worker_publisher_confirm_timeout: resend after this


class DlxPort(Protocol):
    """What the worker needs from the broker (see the module docstring for each call)."""

    def now_ms(self) -> int: ...
    def is_held(self, dlx_id: int) -> bool: ...
    def prepare(self, reason: str, message: Any) -> Any: ...
    def route(self, prepared: Any) -> tuple[list[str], list[str]]: ...
    def has_room(self, queue: str) -> bool: ...
    def publish(self, queue: str, prepared: Any, callback: Any) -> bool: ...
    def settle(self, dlx_ids: tuple[int, ...]) -> None: ...
    def schedule(self, at_ms: int) -> None: ...


class _Item:
    """One taken message: which targets confirmed it, how many answers are outstanding."""

    __slots__ = ("dlx_id", "reason", "message", "done", "waiting", "failed", "prepared",
                 "sent_at", "gen")

    def __init__(self, dlx_id: int, reason: str, message: Any) -> None:
        self.dlx_id = dlx_id
        self.reason = reason
        self.message = message
        self.done: set[str] = set()   # targets that confirmed (never published to again)
        self.waiting = 0              # publish confirms outstanding
        self.failed = False           # something refused: retry on the next poll
        self.prepared: Any = None     # the dead-lettered copy (rebuilt until a target has it)
        self.sent_at: int | None = None   # None: never sent
        self.gen = 0                  # bumped when outstanding confirms are given up on


class DlxWorker:
    def __init__(self, port: DlxPort, *, prefetch: int = DEFAULT_PREFETCH,
                 retry_ms: int = RETRY_MS, confirm_timeout_ms: int = CONFIRM_TIMEOUT_MS,
                 name: str = "") -> None:
        self.port = port
        self.prefetch = max(1, prefetch)
        self.retry_ms = retry_ms
        self.confirm_timeout_ms = confirm_timeout_ms
        self.name = name
        # held, not taken yet, in discard order (OrderedDict: O(1) pops from the front)
        self._queued: OrderedDict[int, tuple[str, Any]] = OrderedDict()
        self._taken: dict[int, _Item] = {}              # at most `prefetch`
        self._settle: list[int] = []
        self._pumping = False
        self._retry_at: int | None = None
        self.stopped = False
        self._warned_at: int | None = None

    # -- input ---------------------------------------------------------------------------------
    def add(self, dlx_id: int, reason: str, message: Any) -> None:
        """A message the queue now holds for at-least-once dead lettering."""
        if self.stopped or dlx_id in self._taken or dlx_id in self._queued:
            return
        self._queued[dlx_id] = (reason, message)

    def load(self, pending: list[tuple[int, str, Any]]) -> None:
        """Everything the replicated state holds (after a restart or on becoming leader)."""
        for dlx_id, reason, message in pending:
            self.add(dlx_id, reason, message)
        self.pump()

    def stop(self) -> None:
        """The queue is deleted or no longer led here: forget everything, answer nothing."""
        self.stopped = True
        self._queued.clear()
        self._taken.clear()
        self._retry_at = None

    def __len__(self) -> int:
        return len(self._queued) + len(self._taken)

    @property
    def retry_at(self) -> int | None:
        return self._retry_at

    # -- work ----------------------------------------------------------------------------------
    def pump(self) -> None:
        """Take messages up to prefetch and (re)send what is not in flight."""
        if self.stopped or self._pumping:
            return
        self._pumping = True
        try:
            self._forget_unheld()
            blocked = self._pass(retry=True)
            # confirms that came at once (transient targets) freed slots: keep going, sending
            # only newly taken messages (refused ones wait for the next poll)
            while self._queued and len(self._taken) < self.prefetch:
                blocked = self._pass(retry=False) or blocked
        finally:
            self._pumping = False
        self._flush()
        if blocked:
            self._arm()

    def _pass(self, retry: bool) -> bool:
        """Take up to prefetch, send what needs sending; True if something waits or failed."""
        is_held = self.port.is_held
        while self._queued and len(self._taken) < self.prefetch:
            dlx_id, (reason, message) = self._queued.popitem(last=False)
            if not is_held(dlx_id):
                continue
            self._taken[dlx_id] = item = _Item(dlx_id, reason, message)
            item.failed = True   # never sent: send now
            item.sent_at = None
        blocked = False
        now = self.port.now_ms()
        for item in list(self._taken.values()):
            if item.waiting and now - (item.sent_at or 0) >= self.confirm_timeout_ms:
                item.gen += 1       # a confirm never came: late answers are ignored
                item.waiting = 0
                item.failed = True
            if item.failed and item.waiting == 0 and (retry or item.sent_at is None):
                item.sent_at = now
                self._send(item)
            if item.failed or item.waiting:
                blocked = True     # poll: retries, and confirm timeouts
        return blocked

    def on_timer(self, now_ms: int) -> None:
        """The retry poll is due."""
        if self._retry_at is None or self.stopped:
            return
        self._retry_at = None
        self.pump()

    # -- internals ------------------------------------------------------------------------------
    def _forget_unheld(self) -> None:
        """Messages the queue no longer holds (strategy switched) are dropped here too; queued
        ones are checked as they are taken (pump runs per confirm: stay O(prefetch))."""
        is_held = self.port.is_held
        for d in [i for i in self._taken if not is_held(i)]:
            del self._taken[d]

    def _send(self, item: _Item) -> None:
        port = self.port
        item.failed = False
        try:
            if item.prepared is None or not item.done:
                # rebuilt until a target has it: the dead-letter settings may have changed
                item.prepared = port.prepare(item.reason, item.message)
            if item.prepared is None:
                item.failed = True   # no DLX configured right now: keep it (policy may return)
                return
            targets, cycled = port.route(item.prepared)
        except Exception as err:  # missing exchange (NotFound) and the like: keep, retry
            self._warn(f"cannot route dead letters yet ({err}); will retry")
            item.failed = True
            return
        todo = [t for t in targets if t not in item.done]
        if not todo:
            if targets or cycled:
                self._complete(item)   # every target confirmed, or all routes are cycles
            else:
                item.failed = True     # routes to no queue: keep until a binding appears
                self._warn("dead letters route to no queue; will retry")
            return
        item.waiting += 1  # guard: a synchronous confirm must not complete the item mid-loop
        for target in todo:
            if not port.has_room(target):
                item.failed = True
                continue
            item.waiting += 1
            answer = partial(self._answered, item, target, gen=item.gen)  # callback(ok)
            if not port.publish(target, item.prepared, answer):
                item.waiting -= 1
                item.failed = True
        self._answered(item, None, True, item.gen)

    def _warn(self, text: str) -> None:
        """Like RabbitMQ's worker: say why messages stay, at most once a minute."""
        now = self.port.now_ms()
        if self._warned_at is None or now - self._warned_at >= 60_000:
            self._warned_at = now
            _log.warning("dead-letter worker of quorum queue %r: %s", self.name, text)

    def _answered(self, item: _Item, target: str | None, ok: bool, gen: int) -> None:
        if self.stopped or self._taken.get(item.dlx_id) is not item or gen != item.gen:
            return
        item.waiting -= 1
        if ok:
            if target is not None:
                item.done.add(target)
        else:
            item.failed = True
        if item.waiting > 0:
            return
        if item.failed:
            self._arm()
            return
        self._complete(item)
        if not self._pumping:
            self._flush()
            self.pump()  # room for the next queued messages

    def _complete(self, item: _Item) -> None:
        self._taken.pop(item.dlx_id, None)
        self._settle.append(item.dlx_id)

    def _flush(self) -> None:
        if self._settle:
            ids, self._settle = tuple(self._settle), []
            self.port.settle(ids)

    def _arm(self) -> None:
        if self._retry_at is None and not self.stopped:
            self._retry_at = self.port.now_ms() + self.retry_ms
            self.port.schedule(self._retry_at)

