"""An ha-mode policy that starts to apply to a classic queue that already exists: the queue's
home node turns it into a mirrored one (seed 004: RabbitMQ starts mirrors at once).

A mirrored classic queue is a Raft group (`queues/quorum.py`, mirrored=True). The conversion
runs on the queue's home node, one queue at a time (`MirrorConversions.run`, a task of the
node), in steps chosen so that a kill -9 at any point loses and duplicates nothing:

1. pause: the classic queue delivers nothing more; wait until its unacked messages are settled
   (consumers ack, or their channels close and the messages come back as ready); if some are
   still held after `UNACKED_PATIENCE`, deliveries resume and the conversion is tried again;
2. a staging group with this node as its only voter (no record names it yet, so no other
   node hosts it); hold new publishes (kept in memory, their confirms unsettled);
3. copy the ready messages, in delivery order, into the group and wait for every confirm;
   if the classic queue changed meanwhile (a purge, an expiry) give up and start again;
4. switch: replace the queue's record in the metadata group with one naming the group, its
   founder (this node) and the members the policy wants. Other nodes replace their proxies
   with replicas that catch up from this node; the group's leader promotes them;
5. on this node, the queue runtime takes the group: local consumers move to it, remote ones
   get basic.cancel, the held publishes go into it, and the journal entries are dropped.

A crash before step 4 commits leaves the record classic and the journal whole: the queue comes
back classic and is converted again (the abandoned staging group is deleted first, its id kept
in ``<data_dir>/mirror_staging.json``). A crash after it leaves a mirrored record whose group
holds every message the journal held: `drop_stale_journal` drops the journal's copies when the
record is applied. Held publishes were never confirmed, so a crash may lose them as it may lose
any unconfirmed publish.

The reverse, an ha policy removed: the queue stays a mirrored queue whose only member is its
master (`Membership.wanted_voters`); it is not copied back into the journal (see the README).
"""

from __future__ import annotations

import json
import logging
import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from amqp_broker.cluster.metadata import QUEUE, Put
from amqp_broker.queues.classic import ClassicQueue

from .persistence import plain

if TYPE_CHECKING:
    from .broker import Broker
    from .queue_runtime import QueueRuntime

__all__ = ["MirrorConversions", "FAILPOINT_ENV", "PATIENCE_ENV"]

_log = logging.getLogger(__name__)

# Tests kill the node (SIGKILL) at a named step: "mirror-convert:copied" (every message in the
# staging group, record still classic) or "mirror-convert:switched" (record committed, journal
# not yet dropped).
FAILPOINT_ENV = "AMQP_BROKER_FAILPOINT"
STAGING_FILE = "mirror_staging.json"
_POLL = 0.05
# How long deliveries stay paused waiting for unacked messages before the conversion gives up
# for a while (deliveries resume): a consumer that holds messages must not stall the queue.
# AMQP_BROKER_MIRROR_PATIENCE (seconds) shortens it where a test waits it out.
PATIENCE_ENV = "AMQP_BROKER_MIRROR_PATIENCE"
UNACKED_PATIENCE = float(os.environ.get(PATIENCE_ENV) or 30.0)


def _failpoint(name: str) -> None:
    if os.environ.get(FAILPOINT_ENV) == name:
        _log.warning("failpoint %s: killing this node", name)
        os.kill(os.getpid(), signal.SIGKILL)


class _Confirms:
    """The staging group's confirms of the copied messages."""

    def __init__(self, expected: int) -> None:
        self.left = expected
        self.failed = 0
        self.done = trio.Event()
        if not expected:
            self.done.set()

    def settle(self, _seq: int, ok: bool) -> None:
        self.left -= 1
        self.failed += not ok
        if self.left <= 0:
            self.done.set()


class _Abandon(Exception):
    """The conversion cannot finish now (the queue changed or went, no quorum)."""


class MirrorConversions:
    def __init__(self, broker: "Broker") -> None:
        self.broker = broker
        self._wanted: dict[tuple[str, str], None] = {}
        self._wake = trio.Event()
        self.switching: dict[tuple[str, str], str] = {}  # (vhost, name) -> its new group
        self._backoff: dict[tuple[str, str], float] = {}  # seconds before the next attempt
        self._staging = Path(broker.settings.data_dir) / STAGING_FILE

    # -- who is converted --------------------------------------------------------------------
    def consider(self, vhost: str, rt: "QueueRuntime") -> None:
        """A policy was applied to `rt` (`Admin.apply_queue_policy`): queue it for conversion
        if it is a durable classic queue of this node that an ha-mode policy now covers."""
        if (isinstance(rt.queue, ClassicQueue) and rt.durable and not rt.exclusive
                and not rt.auto_delete and self.broker.remote_queues is not None
                and self.broker.membership.ha_policy(vhost, rt.name) is not None):
            self._wanted[(vhost, rt.name)] = None
            self._wake.set()

    def _still_wanted(self, vhost: str, rt: "QueueRuntime") -> bool:
        v = self.broker.vhosts.get(vhost)
        return (v is not None and v.queues.get(rt.name) is rt and not rt.deleted
                and isinstance(rt.queue, ClassicQueue)
                and self.broker.membership.ha_policy(vhost, rt.name) is not None)

    async def run(self) -> None:
        """The node's conversion task: one queue at a time; one that gives up is tried again
        later, waiting longer each time (up to a minute)."""
        try:
            await self._drop_abandoned()
        except Exception:  # never take the node down with it
            _log.exception("could not delete the staging groups of interrupted conversions")
        async with trio.open_nursery() as retries:
            while True:
                await self._wake.wait()
                self._wake = trio.Event()
                while self._wanted:
                    key = next(iter(self._wanted))
                    del self._wanted[key]
                    if not await self._convert_one(*key):
                        delay = self._backoff[key] = min(60.0, 2 * self._backoff.get(key, 0.5))
                        retries.start_soon(self._retry_later, key, delay)

    async def _convert_one(self, vhost: str, name: str) -> bool:
        """Convert queue `name` if it still wants it: False if it gave up for now."""
        v = self.broker.vhosts.get(vhost)
        rt = v.queues.get(name) if v is not None else None
        if rt is None or not self._still_wanted(vhost, rt):
            self._backoff.pop((vhost, name), None)
            return True
        try:
            await self.convert(vhost, rt)
        except Exception as why:  # _Abandon, or a bug: never take the node down
            if isinstance(why, _Abandon):
                _log.info("queue %r in vhost %r: conversion to mirrored postponed: %s",
                          name, vhost, why)
            else:
                _log.exception("queue %r in vhost %r: conversion to mirrored failed",
                               name, vhost)
            return False
        self._backoff.pop((vhost, name), None)
        return True

    async def _retry_later(self, key: tuple[str, str], delay: float) -> None:
        await trio.sleep(delay)
        self._wanted[key] = None
        self._wake.set()

    # -- one conversion ----------------------------------------------------------------------
    async def convert(self, vhost: str, rt: "QueueRuntime") -> None:
        broker = self.broker
        q: ClassicQueue = rt.queue  # type: ignore[assignment]
        q.paused = True
        target = None
        try:
            with trio.move_on_after(UNACKED_PATIENCE):
                while q.unacked_count:  # step 1: what consumers hold comes back or is acked
                    await trio.sleep(_POLL)
                    if not self._still_wanted(vhost, rt):
                        raise _Abandon("the queue or its policy went")
            if q.unacked_count:
                raise _Abandon(f"{q.unacked_count} messages still unacked after "
                               f"{UNACKED_PATIENCE:.0f} s")
            # the master stays where the queue is, as RabbitMQ's does
            placement = broker.membership.mirror_placement(vhost, rt.name,
                                                           master=broker.membership.node)
            if placement is None:
                raise _Abandon("no ha policy")
            group = placement["group"]
            self._remember_staging(group)
            target = self._staging_queue(rt.name, vhost, group, rt.arguments)
            with trio.move_on_after(30):
                while not (target.ready and broker.quorum.driver.status(group).is_leader):
                    await trio.sleep(_POLL)
            q.held = []  # step 2
            entries = q.ready_entries()
            confirms = _Confirms(len(entries))
            for i, entry in enumerate(entries):  # step 3
                target.publish(entry.message, broker.now_ms, (confirms, i))
            with trio.move_on_after(30):
                await confirms.done.wait()
            if not confirms.done.is_set() or confirms.failed:
                raise _Abandon("the staging group did not confirm every message")
            if not self._still_wanted(vhost, rt) or \
                    [e.msg_id for e in q.ready_entries()] != [e.msg_id for e in entries]:
                raise _Abandon("the queue changed while it was copied")
            _failpoint("mirror-convert:copied")
            await self._switch(vhost, rt, placement)  # step 4
        except BaseException:
            if target is not None and self.switching.get((vhost, rt.name)) is None:
                target.delete()  # the staging group goes with its files
            self.switching.pop((vhost, rt.name), None)
            q.paused = False
            for message, now_ms, confirm in q.release_held():
                q.publish(message, now_ms, confirm)
            rt.mark_dirty()
            broker.run_pending()
            raise
        self._take_over(vhost, rt, target)  # step 5
        self._forget_staging(group)

    def _staging_queue(self, name: str, vhost: str, group: str, arguments: dict) -> Any:
        """A mirrored queue on `group` with this node its only voter, in no vhost's table."""
        return self.broker.mirrored_queue_factory(
            name, vhost, arguments=arguments, now_ms=self.broker.now_ms,
            placement={"group": group, "founders": [self.broker.membership.node]})

    async def _switch(self, vhost: str, rt: "QueueRuntime", placement: dict) -> None:
        meta = self.broker.cluster_meta
        key = (vhost, rt.name)
        record = meta.record(QUEUE, key)
        if record is None or "group" in record:
            raise _Abandon("the queue's record changed")
        value = dict(record)
        value.pop("node", None)
        value.update(group=placement["group"], members=list(placement["members"]),
                     founders=[self.broker.membership.node], mirrored=True,
                     arguments=plain(rt.arguments))
        self.switching[key] = placement["group"]
        # proposed again until committed: given up, a switch committed late would leave the
        # record naming a deleted group
        await meta.commit_all([meta.propose(Put(QUEUE, key, value))])
        _failpoint("mirror-convert:switched")

    def _take_over(self, vhost: str, rt: "QueueRuntime", target: Any) -> None:
        """Step 5: `rt` serves the mirrored queue `target` from now on."""
        broker = self.broker
        old: ClassicQueue = rt.queue  # type: ignore[assignment]
        held = old.release_held()
        consumers = list(rt.consumers.values())
        rt.consumers.clear()
        old.delete()  # its journal entries: one drop record
        rt.queue = target
        for consumer in consumers:
            if broker.remote_queues.is_stand_in(consumer.channel):
                consumer.channel.consumer_cancelled(consumer.tag)  # its node consumes anew
                continue
            target.add_consumer(consumer, broker.now_ms)
            rt.consumers[(id(consumer.channel), consumer.tag)] = consumer
        for message, now_ms, confirm in held:
            target.publish(message, now_ms, confirm)
        self.switching.pop((vhost, rt.name), None)
        broker.admin.apply_queue_policy(vhost, rt)
        rt.mark_dirty()
        broker.run_pending()
        _log.info("queue %r in vhost %r is now mirrored (group %s)", rt.name, vhost,
                  target.group)

    # -- after a crash ---------------------------------------------------------------------------
    def _read_staging(self) -> list[str]:
        try:
            return list(json.loads(self._staging.read_text()))
        except (OSError, ValueError):
            return []

    def _write_staging(self, groups: list[str]) -> None:
        tmp = self._staging.with_suffix(".tmp")
        tmp.write_text(json.dumps(groups))
        os.replace(tmp, self._staging)

    def _remember_staging(self, group: str) -> None:
        self._write_staging(self._read_staging() + [group])

    def _forget_staging(self, group: str) -> None:
        self._write_staging([g for g in self._read_staging() if g != group])

    async def _drop_abandoned(self) -> None:
        """Staging groups of conversions a crash interrupted before their switch: hosted
        once more, only to delete them and their files."""
        referenced = {v.get("group") for _k, v in
                      self.broker.cluster_meta.state().items(QUEUE)}
        for group in self._read_staging():
            if group in referenced:
                self._forget_staging(group)
                continue
            staged = self._staging_queue("", "/", group, {})
            with trio.move_on_after(10):
                while not staged.ready:
                    await trio.sleep(_POLL)
            staged.delete()
            self._forget_staging(group)
            _log.info("deleted the staging group %s of an interrupted conversion", group)


def drop_stale_journal(broker: "Broker", queue: Any, recovered: Any) -> None:
    """A mirrored queue's record applied where the journal still holds entries of the classic
    queue it was converted from (a crash after the switch): the group holds them all."""
    if recovered and getattr(queue, "mirrored", False) and broker.journal is not None:
        broker.journal.drop_queue(queue.key)
        _log.info("queue %r: dropped %d journal entries copied into its group before a "
                  "restart", queue.name, len(recovered))
