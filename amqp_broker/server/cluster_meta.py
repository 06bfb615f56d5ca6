"""The broker's side of the replicated metadata (`amqp_broker/cluster/metadata.py`), in a cluster.

Built by `node.open_broker` when the node has peers; it then stands in for the local store's
metadata log (`broker.store.metadata`), so `VHost` reports its durable changes here with the same
event names (`queue_declared`, `exchange_deleted`, `binding_added`, ...). Each change becomes a
put / delete proposed to the ``meta`` group through the node's `QuorumRuntime` (any node:
followers forward to the leader) and is registered as a `PendingChange` that the client's
session waits for before sending the -ok (`Session`: a declaration answers once committed).

Every node applies committed changes to its own broker (`apply_changes`, the ``meta`` group's
effect handler, also used for the snapshot at start-up): quorum queues are created with the
group and members the record names, classic queues only on their home node, exchanges and
bindings everywhere (a binding to a classic queue of another node has nothing to bind here).
The node that made a change made it locally at once; if the change does not commit in time (a
minority side) the client gets an error and the node puts its copy back as the records say
(`resync`).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import trio

from amqp_broker.cluster.metadata import (BINDING, EXCHANGE, META_GROUP, QUEUE, Delete, Put,
                                          encode_meta_command)
from amqp_broker.core.bindings import Dest
from amqp_broker.core.errors import AMQPError, NotFound
from amqp_broker.queues import remote_wire as wire

from .mirror_convert import drop_stale_journal
from .persistence import args_key, plain

if TYPE_CHECKING:
    from .broker import Broker

__all__ = ["ReplicatedMetadata", "PendingChange", "apply_changes", "METADATA_TIMEOUT"]

_log = logging.getLogger(__name__)

# the records server/admin.py applies, in the order start-up applies them (vhosts first)
_ADMIN_KINDS = ("vhost", "vhost-limits", "user", "permission", "policy", "operator_policy")

# How long a metadata change may take to commit before the client is told it failed.
METADATA_TIMEOUT = 10.0
# How long a restarted node with transient exchanges in its records listens for a peer that
# kept running (then they live on) before it takes the cluster as restarted as a whole (then
# they go, as RabbitMQ's ram-only tables do).
TRANSIENT_PATIENCE = 5.0


class PendingChange:
    """One proposed metadata change: resent while its outcome is unknown, until committed or
    `METADATA_TIMEOUT` has passed (`failed` then)."""

    __slots__ = ("meta", "cmd", "data", "deadline", "done", "failed")

    def __init__(self, meta: "ReplicatedMetadata", cmd: Any) -> None:
        self.meta = meta
        self.cmd = cmd
        self.data = encode_meta_command(cmd)
        self.deadline = time.monotonic() + METADATA_TIMEOUT
        self.done = trio.Event()
        self.failed = False
        self._propose()

    def _propose(self) -> None:
        self.meta.runtime.propose(META_GROUP, self.data, self._outcome)

    def _outcome(self, reply: Any, error: BaseException | None) -> None:
        if error is None:
            cmd = self.cmd
            if type(cmd) is Put and cmd.if_absent and reply != cmd.value:
                # another node's record was there first: this node's copy follows it
                self.meta.resync(cmd.kind, tuple(cmd.key), cmd.value)
            self.done.set()
        elif time.monotonic() < self.deadline:
            self._propose()  # leader lost: puts and deletes may be applied twice
        else:
            self.give_up()

    def give_up(self) -> None:
        if not self.done.is_set():
            self.failed = True
            cmd = self.cmd
            self.meta.resync(cmd.kind, tuple(cmd.key), getattr(cmd, "value", None))
            self.done.set()

    async def wait(self) -> bool:
        """True once committed; False (after putting the local copy back) on timeout."""
        with trio.move_on_at(trio.current_time() + max(0.0, self.deadline - time.monotonic())):
            await self.done.wait()
        if not self.done.is_set():
            self.give_up()
        if not self.failed:
            await self.meta.until_applied_everywhere()
            await self._until_led()
        return not self.failed

    async def _until_led(self, patience: float = 2.0) -> None:
        """A new quorum queue answers declare-ok once its Raft group has a leader (as RabbitMQ
        starts the queue's members first), so that the first publishes do not wait for it."""
        cmd = self.cmd
        if type(cmd) is not Put or cmd.kind != QUEUE or "group" not in (cmd.value or {}):
            return
        driver = self.meta.runtime.driver
        group = cmd.value["group"]
        with trio.move_on_after(patience):
            while driver.has_group(group) and driver.status(group).leader is None:
                await trio.sleep(0.005)


class ReplicatedMetadata:
    def __init__(self, broker: "Broker", runtime: Any) -> None:
        self.broker = broker
        self.runtime = runtime
        self.node = runtime.node
        self.applying = False  # set while committed changes are applied: report nothing
        # until the local log is replayed (`ready`), effects are not applied one by one: a
        # queue created and deleted again in the log must not be created (its Raft group is
        # gone); `ready` applies the resulting records at once
        self.replaying = True
        self.ready = trio.Event()
        # set while `collect` runs: changes are gathered in `pending` for the caller to wait on
        # (others, e.g. a queue auto-deleted when a connection goes, are not waited for)
        self.collecting = False
        self.pending: list[PendingChange] = []
        # how far each running peer has applied the group (`MetaApplied` from it): a change
        # answers -ok once every node that is up has it, so a client that declares through one
        # node and publishes through another finds it there (as RabbitMQ 3.x's transactions)
        self._peer_applied: dict[str, int] = {}
        self.applied = 0  # the metadata log index this node has applied (from the effects)
        self._peer_event = trio.Event()
        # see `drop_transient`: False while this node does not know whether the cluster
        # restarted as a whole; `_steady_peer` is set when a peer says it is steady
        self.steady = False
        self._steady_peer = trio.Event()

    def collect(self, fn: Any) -> tuple[Any, list[PendingChange]]:
        """Run `fn()`; return (its result, the changes it proposed). A client method (the
        session) or a management API request answers once they are committed."""
        self.collecting = True
        try:
            result = fn()
        finally:
            self.collecting = False
            pending, self.pending = self.pending, []
        return result, pending

    def hold(self, waiter: Any) -> None:
        """While `collect` runs: the method's reply also waits for `waiter.wait()` (an async
        call that returns True), as for a change (e.g. counts another node must give)."""
        assert self.collecting
        self.pending.append(waiter)

    async def commit_all(self, changes: list[PendingChange]) -> None:
        """Wait until every one of `changes` is committed, proposing again those that time
        out (start-up work that must not be lost: a node waits for its peers)."""
        for change in changes:
            while not await change.wait():
                change = PendingChange(self, change.cmd)

    def _propose(self, cmd: Any) -> None:
        if not self.applying:
            change = PendingChange(self, cmd)
            if self.collecting:
                self.pending.append(change)

    def propose(self, cmd: Any) -> PendingChange:
        """Propose one command now (membership changes: `server/membership.py`)."""
        return PendingChange(self, cmd)

    def put_record(self, kind: str, key: Any, value: Any) -> None:
        """Users, vhosts, permissions, policies (`Admin`): keys as the local store's."""
        self._propose(Put(kind, _key(key), value))

    def delete_record(self, kind: str, key: Any) -> None:
        self._propose(Delete(kind, _key(key)))

    def record(self, kind: str, key: tuple) -> Any:
        """The committed record, as this node has it (None if there is none)."""
        return self.state().get(kind, key)

    def state(self) -> Any:
        return self.runtime.driver.state(META_GROUP)

    # -- events from VHost (the names of persistence.Store's) -----------------------------------
    def queue_declared(self, vhost: str, name: str, durable: bool, auto_delete: bool,
                       arguments: dict) -> None:
        rt = self.broker.vhosts[vhost].queues.get(name)
        record: dict[str, Any] = {"type": rt.queue_type if rt else "classic", "durable": durable,
                                  "auto_delete": auto_delete, "arguments": plain(arguments)}
        where = rt.queue.placement(self.node) if rt is not None else None
        if where is not None and where.replicated:
            record["group"] = rt.queue.group
            record["members"] = list(rt.queue.members)
            record["founders"] = list(rt.queue.members)  # the group's bootstrap membership
            if rt.queue_type == "classic":
                record["mirrored"] = True  # replicated and classic: under an ha-mode policy
        else:  # a classic queue: its home (this node, or the one the master locator chose)
            record["node"] = where.members[0] if where is not None else self.node
        self._propose(Put(QUEUE, (vhost, name), record, if_absent=True))

    def queue_deleted(self, vhost: str, name: str) -> None:
        self._propose(Delete(QUEUE, (vhost, name)))

    def exchange_declared(self, vhost: str, name: str, type_: str, durable: bool,
                          auto_delete: bool, internal: bool, arguments: dict) -> None:
        record = {"type": type_, "durable": durable, "auto_delete": auto_delete,
                  "internal": internal, "arguments": plain(arguments)}
        if not durable:  # which process declared it: see `drop_transient`
            record["incarnation"] = self.runtime.incarnation
        self._propose(Put(EXCHANGE, (vhost, name), record, if_absent=True))

    def exchange_deleted(self, vhost: str, name: str) -> None:
        self._propose(Delete(EXCHANGE, (vhost, name)))

    def binding_added(self, vhost: str, source: str, kind: str, dest: str, routing_key: str,
                      arguments: dict) -> None:
        self._propose(Put(BINDING, (vhost, source, kind, dest, routing_key, args_key(arguments)),
                          plain(arguments)))

    def binding_removed(self, vhost: str, source: str, kind: str, dest: str, routing_key: str,
                        arguments: dict) -> None:
        self._propose(Delete(BINDING, (vhost, source, kind, dest, routing_key,
                                       args_key(arguments))))

    # -- committed changes ----------------------------------------------------------------------
    def on_effects(self, _group: str, effects: list) -> None:
        """The ``meta`` group's effect handler: `MetaChanged` effects, on every node."""
        if self.replaying:
            return
        for eff in effects:
            if eff.changes:
                self.apply(eff.changes)
            self.applied = max(self.applied, eff.index)
        self.announce()

    def announce(self) -> None:
        """Tell the other nodes how far this one has applied the metadata."""
        runtime = self.runtime
        if not runtime.cluster.clustered:
            return
        data = wire.encode(wire.MetaApplied(self.applied, self.steady))
        for peer in runtime.peers:
            if runtime.is_running(peer):
                runtime.send_rpc(peer, data)

    def peer_applied(self, peer: str, index: int, steady: bool = True) -> None:
        if steady:
            self._steady_peer.set()
        elif self.steady:  # a node starting: tell it the cluster kept running
            self.runtime.send_rpc(peer, wire.encode(wire.MetaApplied(self.applied, True)))
        if index > self._peer_applied.get(peer, 0):
            self._peer_applied[peer] = index
            self._peer_event.set()
            self._peer_event = trio.Event()

    async def until_applied_everywhere(self, patience: float = 2.0) -> None:
        """Wait (at most `patience` seconds) until every peer that is up has applied what
        this node has."""
        runtime = self.runtime
        if not runtime.cluster.clustered:
            return
        index = self.applied
        with trio.move_on_after(patience):
            while any(runtime.is_running(p) and self._peer_applied.get(p, 0) < index
                      for p in runtime.peers):
                await self._peer_event.wait()

    def on_ready(self) -> None:
        """The local log is replayed: build this node's topology from the records."""
        self.replaying = False
        self.applied = self.runtime.driver.status(META_GROUP).applied
        self.apply_all()
        stale = self._transient_exchanges()
        if stale and self.runtime.cluster.clustered:
            self.runtime.spawn(lambda: self.drop_transient(stale))
        else:
            self.steady = True  # nothing a whole-cluster restart would drop (or alone)
        self.announce()
        self.ready.set()

    def _transient_exchanges(self) -> dict[tuple, Any]:
        """Transient exchanges of the records -> the process that declared each."""
        return {key: value.get("incarnation") for key, value in self.state().items(EXCHANGE)
                if not value["durable"]}

    async def drop_transient(self, stale: dict[tuple, Any],
                             patience: float = TRANSIENT_PATIENCE) -> None:
        """A restarted node found transient exchanges (declared by processes before it): they
        live on if some peer kept running (it says it is steady), and go if the whole cluster
        restarted (RabbitMQ keeps them in ram-only tables, lost when the last node stops). A
        node that decides they go proposes their deletion (and their bindings') and stays
        unsteady until that is committed, so that nodes starting after it decide alike."""
        deadline = trio.current_time() + patience
        while not self._steady_peer.is_set() and trio.current_time() < deadline:
            self.announce()  # again and again: links to running peers may come up late
            with trio.move_on_after(0.5):
                await self._steady_peer.wait()
        if not self._steady_peer.is_set():
            _log.info("node %s: the cluster restarted as a whole: %d transient exchange(s) go",
                      self.node, len(stale))
            while True:
                state = self.state()
                changes = [PendingChange(self, Delete(EXCHANGE, key)) for key, inc in stale.items()
                           if (v := state.get(EXCHANGE, key)) is not None
                           and not v["durable"] and v.get("incarnation") == inc]
                if all([await change.wait() for change in changes]):
                    break
        self.steady = True
        self.announce()

    def apply(self, changes: Any) -> None:
        self.applying = True
        try:
            apply_changes(self.broker, self.node, changes)
        finally:
            self.applying = False
        self.broker.run_pending()

    def apply_all(self) -> None:
        """Every record of the state (start-up, from the snapshot): exchanges, then queues,
        then bindings. A lone node restarting drops transient exchanges (they are kept
        cluster-wide while any node runs, but a node alone is the whole cluster restarting)."""
        state = self.state()
        transient = set()
        if not self.runtime.cluster.clustered:
            transient = {key for key, value in state.items(EXCHANGE) if not value["durable"]}
            for key in transient:
                PendingChange(self, Delete(EXCHANGE, key))
        for kind in ("node", *_ADMIN_KINDS, EXCHANGE, QUEUE, BINDING):
            self.apply([(kind, key, value, None) for key, value in state.items(kind)
                        if not (kind == EXCHANGE and key in transient)
                        and not (kind == BINDING and (key[0], key[1]) in transient)])

    async def catch_up(self, patience: float = 5.0) -> bool:
        """Before serving: wait (at most `patience` seconds) until this node knows a leader of
        the metadata and has applied what that leader had committed when it first heard of
        it, so that a restarted node does not answer from stale records. False if no leader
        answered in time (a minority: it serves what it has, and refuses changes)."""
        driver = self.runtime.driver
        with trio.move_on_after(patience):
            while driver.status(META_GROUP).leader is None:
                await trio.sleep(0.02)
            await trio.sleep(0.1)  # a heartbeat carries the leader's commit index
            target = driver.status(META_GROUP).commit
            while driver.status(META_GROUP).applied < target:
                await trio.sleep(0.02)
            return True
        return False

    async def seed_defaults(self) -> None:
        """A cluster without users gets the default vhost, user and permissions (from
        whichever nodes find it so first: the same defaults everywhere), committed before
        the node serves clients. A node that joined a running cluster seeds nothing: the
        cluster's own records (seeded, or emptied of users on purpose) come with its log, and
        until a leader adds it there is nobody to commit a seed anyway."""
        if self.state().items("user") or self.runtime.cluster.joining:
            return
        _, changes = self.collect(self.broker.admin.seed)
        await self.commit_all(changes)

    def resync(self, kind: str, key: tuple, local: Any) -> None:
        """Put this node's copy of one record (`local`: as this node has it) back as the
        replicated state has it."""
        self.apply([(kind, key, self.state().get(kind, key), local)])


def _key(key: Any) -> tuple:
    return tuple(key) if isinstance(key, (list, tuple)) else (key,)


def apply_changes(broker: "Broker", node: str, changes: Any) -> None:
    for kind, key, value, old in changes:
        try:
            if kind in _ADMIN_KINDS:
                broker.admin.apply_record(kind, tuple(key), value)
            elif kind == "node":
                broker.membership.apply_record(tuple(key), value)
            elif kind == QUEUE:
                _apply_queue(broker, node, tuple(key), value)
            elif kind == EXCHANGE:
                _apply_exchange(broker, tuple(key), value)
            elif kind == BINDING:
                _apply_binding(broker, tuple(key), value, old)
        except (AMQPError, KeyError, ValueError) as err:
            _log.warning("metadata %s %r: cannot apply here: %s", kind, key, err)
        except Exception:  # never take the node's Raft driver down with it
            _log.exception("metadata %s %r: failed to apply", kind, key)


def _apply_queue(broker: "Broker", node: str, key: tuple, value: Any) -> None:
    vhost_name, name = key
    vhost = broker.add_vhost(vhost_name)
    rt = vhost.queues.get(name)
    if value is None:
        if rt is not None and rt.durable and not rt.exclusive:
            vhost.delete_queue_now(rt)
        return
    converting = broker.mirror_conversions
    if converting is not None and value.get("group") is not None \
            and converting.switching.get(key) == value["group"]:
        return  # this node converts it to mirrored: its conversion takes the group over
    if rt is not None:
        if _same(rt, value, node):
            return
        if value.get("mirrored") and not rt.queue.placement(node).replicated:
            # another node's classic queue became mirrored: its bindings stay
            vhost.replace_queue(rt, value)
            return
        vhost.delete_queue_now(rt)  # another node's declaration won
    # a quorum queue with its group; a classic queue of another node as a proxy of it
    rt = vhost.create_queue(name, durable=True, exclusive=False, auto_delete=value["auto_delete"],
                            arguments=value["arguments"], owner=None, persist=False,
                            placement=value if value.get("node") != node else None)
    recovered = broker.store.recovered.pop(rt.queue.key, None)
    if recovered:
        rt.queue.restore(recovered, broker.now_ms)
        drop_stale_journal(broker, rt.queue, recovered)


def _same(rt: Any, record: dict, node: str) -> bool:
    """Is this node's queue `rt` the one `record` describes: the same quorum group, or a
    classic queue (or proxy) of the same home node?"""
    if rt.exclusive:
        return False
    where = rt.queue.placement(node)
    if "group" in record:
        return where.group == record["group"]
    return not where.replicated and where.members == (record.get("node", node),)


def _apply_exchange(broker: "Broker", key: tuple, value: Any) -> None:
    vhost = broker.add_vhost(key[0])
    topology = vhost.topology
    if value is None:
        if topology.lookup_exchange(key[1]) is not None:
            topology.delete_exchange(key[1], False)
        return
    if topology.lookup_exchange(key[1]) is None:
        topology.declare_exchange(key[1], value["type"], value["durable"], value["auto_delete"],
                                  value["internal"], value["arguments"])


def _apply_binding(broker: "Broker", key: tuple, value: Any, old: Any) -> None:
    vhost_name, source, kind, dest, routing_key, _ = key
    vhost = broker.vhosts.get(vhost_name)
    if vhost is None:
        return
    topology = vhost.topology
    if kind == "queue" and dest not in vhost.queues:
        return  # a classic queue of another node
    if value is None:
        try:
            topology.unbind(source, Dest(kind, dest), routing_key, old or {})
        except NotFound:
            pass
        return
    topology.bind(source, Dest(kind, dest), routing_key, value)

