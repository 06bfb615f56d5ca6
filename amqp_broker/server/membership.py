"""The node's side of cluster membership: the metadata's node records, and the questions of
nodes that join or leave (`cluster/membership.py`).

Built by `node.open_broker` for every node. A node's entry in the ``meta`` group, kind
``node``, holds where it is dialled (``{"host", "port"}``) or ``{"forgotten": true}``; every
node applies these records to its quorum runtime (`QuorumRuntime.set_node` / `drop_node`,
whose leaders then change each Raft group's members) and keeps the node list in
``<data_dir>/cluster_nodes.json`` for its next start. A lone node that gains its first peer
restarts its application once (`on_clustered`): its queues were built as one-member groups.

`answer` is the runtime's `on_request`: a node asks to join (its record is put, the answer
lists the cluster) or to be forgotten (`reset` of a member). `forget` is
`amqp-brokerctl forget_cluster_node` on a running node.

Quorum queue members (`amqp-broker-queues add_member / delete_member / grow / shrink`): a
queue's record names the voters it wants (``members``; ``founders`` keeps the first ones, the
bootstrap every replica starts from); `wanted_voters` hands them to the runtime, whose leader
of the group promotes a learner once it has caught up and demotes a voter no longer wanted.
`rebalance` asks leaders to hand over leadership so each node leads about as many queues.
`reconcile_members` is continuous membership reconciliation (seed 000, run by
`reconciler.py` on the node that leads the metadata): queues below their target size grow onto
running nodes, members on forgotten nodes go (auto_remove), and, beyond RabbitMQ, a member whose
node has been unreachable too long is replaced by a running node.
"""

from __future__ import annotations

import logging
import math
import re
from typing import TYPE_CHECKING, Any, Callable

from amqp_broker.cluster import membership as wire
from amqp_broker.cluster.metadata import QUEUE, Put
from amqp_broker.cluster.nodes import write_membership
from amqp_broker.core.errors import AMQPError
from amqp_broker.queues import remote_wire

if TYPE_CHECKING:
    from .broker import Broker

__all__ = ["Membership", "MemberError", "NODE"]

_log = logging.getLogger(__name__)

NODE = "node"  # the metadata record kind: one per node that ever joined or was forgotten


class MemberError(Exception):
    """A membership verb refused: `kind` is "not_found", "not_quorum", "classic",
    "not_running" or "last_member"; the text is RabbitMQ's where it has one."""

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind
        self.reason = reason


class Membership:
    def __init__(self, broker: "Broker", runtime: Any, meta: Any) -> None:
        self.broker = broker
        self.runtime = runtime
        self.meta = meta
        self.node = runtime.node
        # called when a lone node gains a peer: the node's application restarts clustered
        self.on_clustered: Callable[[], None] | None = None
        runtime.on_request = self.answer
        runtime.wanted_voters = self.wanted_voters
        self._by_group: dict[str, list] = {}
        self._indexed_at = -1

    # -- records ----------------------------------------------------------------------------
    def apply_record(self, key: tuple, value: Any) -> None:
        """A committed node record (or its deletion), on every node."""
        name = key[0]
        if name == self.node:
            return
        if value is None or value.get("forgotten"):
            self.runtime.drop_node(name)
        else:
            self.runtime.set_node(name, (value["host"], int(value["port"])))
        self.persist()
        if not self.runtime.cluster.clustered and self.runtime.peers \
                and self.on_clustered is not None:
            self.on_clustered()

    def persist(self) -> None:
        write_membership(self.broker.settings.data_dir, self.runtime.nodes,
                         self.runtime.cluster.joining)

    # -- questions from other nodes ---------------------------------------------------------
    async def answer(self, peer: str, question: bytes) -> bytes:
        try:
            msg = wire.decode(question)
        except Exception:
            return wire.encode(wire.Answer(False, "a question this node does not understand"))
        if type(msg) is wire.Join:
            if msg.node != peer or msg.node == self.node:
                return wire.encode(wire.Answer(False, f"{peer} cannot join as {msg.node}"))
            record = {"host": msg.host, "port": msg.port}
            error = await self._commit(Put(NODE, (msg.node,), record))
            if error:
                return wire.encode(wire.Answer(False, error))
            _log.info("node %s joined the cluster (through %s)", msg.node, self.node)
            nodes = dict(self.runtime.nodes)
            nodes[msg.node] = (msg.host, msg.port)
            return wire.encode(wire.Answer(True, "", nodes))
        if msg.node != peer:
            return wire.encode(wire.Answer(False, f"{peer} cannot make {msg.node} leave"))
        error = await self.forget(msg.node)
        return wire.encode(wire.Answer(not error, error or "", dict(self.runtime.nodes)))

    # -- forget_cluster_node ----------------------------------------------------------------
    async def forget(self, name: str) -> str | None:
        """Take `name` out of the cluster (it must not be running): None, or why not, in
        rabbitmqctl's words."""
        if name == self.node:
            return (f"{{:failed_to_remove_node, :{name}, {{:combine_error, :schema, "
                    f"'Last replica'}}}}" if not self.runtime.peers else
                    f"{{:failed_to_remove_node, :{name}, {{:active, 'Mnesia is running', "
                    f":{name}}}}}")
        if name not in self.runtime.nodes:
            return "{:not_a_cluster_node, 'The node selected is not in the cluster.'}"
        if self.runtime.is_running(name):
            return (f"{{:failed_to_remove_node, :{name}, {{:active, 'Mnesia is running', "
                    f":{name}}}}}")
        error = await self._commit(Put(NODE, (name,), {"forgotten": True}))
        if error is None:
            _log.info("node %s was removed from the cluster", name)
        return error

    async def _commit(self, cmd: Any) -> str | None:
        change = self.meta.propose(cmd)
        if not await change.wait():
            return ("the cluster's metadata store is unavailable: this node cannot reach a "
                    "majority of the cluster")
        return None

    # -- quorum queue members ---------------------------------------------------------------
    def wanted_voters(self, group: str) -> list | None:
        """The members a quorum queue's record wants, or a mirrored classic queue's policy
        wants now (the runtime's reconciler asks, on the group's leader)."""
        if self._indexed_at != self.meta.applied or not self._by_group:
            self._by_group = {v["group"]: (key, v) for key, v in
                              self.meta.state().items(QUEUE) if "group" in v}
            self._indexed_at = self.meta.applied
        found = self._by_group.get(group)
        if found is None:
            return None
        (vhost, name), record = found
        if not record.get("mirrored"):
            return record.get("members")
        raft = self.runtime.driver.raft(group)
        current = sorted(raft.config.voters, key=lambda n: (n != raft.leader, n))
        ha = self.ha_policy(vhost, name)
        wanted = self._with_witness(self._ha_members(ha, current), current)
        if (ha or {}).get("ha-sync-mode") == "manual":  # new mirrors wait for sync_queue
            synced = record.get("synced", ())
            wanted = [n for n in wanted if n in current or n in synced]
        return wanted

    def unsynced_mirrors(self, vhost: str, name: str) -> list[str]:
        """Mirrors the policy wants that are not voters yet: catching up (automatic) or
        waiting for sync_queue (manual); listed in slave_nodes, not in
        synchronised_slave_nodes."""
        record = self.meta.record(QUEUE, (vhost, name))
        ha = self.ha_policy(vhost, name)
        if not record or not record.get("mirrored") or ha is None:
            return []
        driver = self.runtime.driver
        if not driver.has_group(record["group"]):
            return []
        raft = driver.raft(record["group"])
        current = sorted(raft.config.voters, key=lambda n: (n != raft.leader, n))
        wanted = self._with_witness(self._ha_members(ha, current), current)
        return [n for n in wanted if n not in current]

    def sync_queue(self, vhost: str, name: str, sync: bool = True) -> None:
        """sync_queue: the mirrors the policy wants now may vote (a learner holds the whole
        log: promoted, it is in sync); cancel_sync_queue: those not promoted yet wait again."""
        record = self.meta.record(QUEUE, (vhost, name))
        if record is None:
            raise MemberError("not_found", f"queue '{name}' in vhost '{vhost}' not found")
        if not record.get("mirrored"):
            return
        value = dict(record)
        if sync:
            value["synced"] = sorted(set(record.get("synced", ()))
                                     | set(self.unsynced_mirrors(vhost, name)))
        else:
            value.pop("synced", None)
        self.meta.put_record(QUEUE, (vhost, name), value)

    # -- mirrored classic queues (ha-mode policies) -----------------------------------------
    def ha_policy(self, vhost: str, name: str) -> dict | None:
        store = self.broker.admin.policies.get(vhost)
        policy = store.for_queue(name, "classic")[0] if store is not None else None
        if policy is None or "ha-mode" not in policy.definition:
            return None
        return dict(policy.definition)

    def mirror_placement(self, vhost: str, name: str, arguments: dict | None = None,
                         master: str | None = None) -> dict | None:
        """A durable classic queue under an ha-mode policy: its group and members, the
        master first (it starts the first election): `master`, else where the master locator
        (x-queue-master-locator, the queue-master-locator policy key, the config) puts it."""
        ha = self.ha_policy(vhost, name)
        if ha is None:
            return None
        if master is None:
            remote = self.broker.remote_queues
            master = remote.home_for(vhost, name, arguments or {}) if remote else self.node
        members = self._with_witness(self._ha_members(ha, [master]), [])
        return {"group": self.runtime.new_group_id(), "members": members,
                "founders": members, "mirrored": True}

    def _ha_members(self, ha: dict | None, current: list[str]) -> list[str]:
        """The members an ha policy wants, the master (current[0]) kept first: `all` every
        node; `exactly` N (the current ones first, then the running nodes with the fewest
        replicas); `nodes` those listed that are in the cluster. No policy: the master."""
        runtime = self.runtime
        current = [n for n in current if n in runtime.nodes] or [self.node]
        mode = (ha or {}).get("ha-mode")
        if mode == "all":
            return current[:1] + sorted(n for n in runtime.nodes if n != current[0])
        if mode == "exactly":
            # a mirror whose node is down is replaced by a running node, as RabbitMQ adds a
            # mirror elsewhere; when the node returns it is not taken back (the set is full)
            count = max(1, int(ha.get("ha-params", 1)))
            up = [n for n in current if self._up(n)]
            down = [n for n in current if not self._up(n)]
            return (up + self._spares(current) + down)[:count]
        if mode == "nodes":
            listed = [n for n in ha.get("ha-params", ()) if n in runtime.nodes]
            if not listed:
                return current[:1]
            return ([current[0]] if current[0] in listed else []) + \
                sorted(n for n in listed if n != current[0])
        return current[:1]

    def _with_witness(self, members: list[str], current: list[str]) -> list[str]:
        """An even number of Raft voters survives no more failures than one fewer: a mirror
        set of 2 (ha-params 2) gets a third voter, a node already voting if there is one, so
        that it keeps a master when one node is lost, as RabbitMQ's master and mirror do."""
        if len(members) % 2 or len(members) >= len(self.runtime.nodes):
            return members
        kept = [n for n in current if n not in members]  # a voter already: no copy to make
        spares = [n for n in kept if self._up(n)] + self._spares(members + kept) + \
            [n for n in kept if not self._up(n)]
        return members + spares[:1]

    def _up(self, node: str) -> bool:
        return node == self.node or self.runtime.is_running(node)

    def _spares(self, taken: list[str]) -> list[str]:
        """Running nodes not in `taken`, those holding the fewest replicas first."""
        load = self._replica_load()
        return sorted((n for n in self.runtime.nodes if n not in taken and self._up(n)),
                      key=lambda n: (load.get(n, 0), n))

    def _replica_load(self) -> dict[str, int]:
        load: dict[str, int] = {}
        for _key, v in self.meta.state().items(QUEUE):
            for m in v.get("members", ()):
                load[m] = load.get(m, 0) + 1
        return load

    def _record(self, vhost: str, name: str) -> dict:
        record = self.meta.record(QUEUE, (vhost, name))
        if record is None:
            raise MemberError("not_found", f"queue '{name}' in vhost '{vhost}' not found")
        if "group" not in record:
            raise MemberError("classic", "classic queues have no replicas")
        return record

    def members(self, vhost: str, name: str) -> list[str]:
        return list(self._record(vhost, name).get("members", ()))

    def add_member(self, vhost: str, name: str, node: str) -> bool:
        """Ask for a voter on `node` (False: it is one already). The node must be a running
        member of the cluster; it votes once its replica has caught up."""
        record = self._record(vhost, name)
        if node not in self.runtime.nodes or not self.runtime.is_running(node):
            raise MemberError("not_running", "node_not_running")  # rabbit_quorum_queue's
        members = list(record.get("members", ()))
        if node in members:
            return False
        self._put_members(vhost, name, record, members + [node])
        return True

    def delete_member(self, vhost: str, name: str, node: str) -> bool:
        """Stop `node` voting (its replica stays, as a learner); False if it was not a
        member. The last member is never removed."""
        record = self._record(vhost, name)
        if node not in self.runtime.nodes:
            raise MemberError("not_running", "node_not_running")
        members = list(record.get("members", ()))
        if node not in members:
            return False
        if len(members) == 1:
            raise MemberError("last_member", "last_node")
        self._put_members(vhost, name, record, [m for m in members if m != node])
        return True

    def _put_members(self, vhost: str, name: str, record: dict, members: list) -> None:
        value = dict(record)
        value.setdefault("founders", list(record.get("members", ())))
        value["members"] = sorted(members)
        self.meta.put_record(QUEUE, (vhost, name), value)

    def rebalance(self, vhost_pattern: str = ".*", queue_pattern: str = ".*") -> list[dict]:
        """Move leaderships so that every running node leads about as many of the matching
        quorum queues: the leader of a queue on a node over its share hands over to a voter on
        a node under it. Returns the moves asked for (vhost, name, from, to)."""
        vre, qre = re.compile(vhost_pattern), re.compile(queue_pattern)
        running = [n for n in sorted(self.runtime.nodes) if self.runtime.is_running(n)]
        queues = []
        for vhost in self.broker.vhosts.values():
            if not vre.search(vhost.name):
                continue
            for name, rt in vhost.queues.items():
                where = rt.queue.placement(self.node)
                if where.group is not None and where.replicated and qre.search(name) \
                        and where.leader in running:
                    queues.append((vhost.name, name, where))
        if not queues or not running:
            return []
        share = math.ceil(len(queues) / len(running))
        led = {n: 0 for n in running}
        for _, _, where in queues:
            led[where.leader] += 1
        moves = []
        for vhost, name, where in sorted(queues, key=lambda q: (q[0], q[1])):
            if led[where.leader] <= share:
                continue
            candidates = [n for n in where.online if n in led and led[n] < share]
            if not candidates:
                continue
            to = min(candidates, key=lambda n: (led[n], n))
            led[where.leader] -= 1
            led[to] += 1
            moves.append({"vhost": vhost, "name": name, "from": where.leader, "to": to})
            self._transfer(where.group, where.leader, to)
        return moves

    def _transfer(self, group: str, leader: str, to: str) -> None:
        if leader == self.node:
            self.runtime.transfer_leadership(group, to)
        else:
            self.runtime.send_rpc(leader, remote_wire.encode(remote_wire.Transfer(group, to)))

    def quorum_critical(self, mirrored: bool = False) -> list[dict] | None:
        """Quorum queues (`mirrored`: mirrored classic queues) that would lose their majority
        if this node stopped (none on a single node: the check does not apply, as RabbitMQ
        says: None)."""
        out: list[dict] = []
        if not self.runtime.peers:
            return None
        # a partitioned queue is a quorum queue underneath: critical the same way
        kinds = ("classic",) if mirrored else ("quorum", "partitioned")
        for vhost in self.broker.vhosts.values():
            for name, rt in vhost.queues.items():
                where = rt.queue.placement(self.node)
                if where.group is None or not where.replicated or self.node not in where.members \
                        or rt.queue_type not in kinds or (mirrored and len(where.members) < 2):
                    continue  # (a one-member quorum queue is lost with its node: critical)
                online = [n for n in where.members if self.runtime.is_running(n)]
                if len(online) - 1 < len(where.members) // 2 + 1:
                    out.append({"name": name, "virtual_host": vhost.name, "type": rt.queue_type,
                                "readable_name": f"queue '{name}' in vhost '{vhost.name}'"})
        return out

    # -- continuous membership reconciliation -----------------------------------------------
    def reconcile_members(self, default_target: int | None, auto_remove: bool,
                          replace_after: float) -> int:
        """One pass over every quorum queue's wanted members; returns how many changed."""
        runtime = self.runtime
        running = [n for n in sorted(runtime.nodes) if runtime.is_running(n)]
        records = [(key, v) for key, v in self.meta.state().items(QUEUE) if "group" in v]
        load = {n: 0 for n in runtime.nodes} | self._replica_load()
        changed = 0
        for (vhost, name), record in records:
            members = list(record.get("members", ()))
            new = [m for m in members if m in runtime.nodes] if auto_remove else list(members)
            target = self._target(vhost, name, record, default_target)
            spares = sorted((n for n in running if n not in new), key=lambda n: (load[n], n))
            if replace_after > 0:
                for m in [m for m in new if m in runtime.nodes and m != self.node
                          and runtime.down_for(m) >= replace_after]:
                    if not spares:
                        break
                    new[new.index(m)] = spares.pop(0)  # unreachable too long: replaced
            while target is not None and len(new) < target and spares:
                new.append(spares.pop(0))
            if sorted(new) != sorted(members) and new:
                for m in set(new) - set(members):
                    load[m] = load.get(m, 0) + 1
                _log.info("quorum queue '%s' in vhost '%s': members %s -> %s (reconciliation)",
                          name, vhost, sorted(members), sorted(new))
                self._put_members(vhost, name, record, new)
                changed += 1
        return changed

    def _target(self, vhost: str, name: str, record: dict, default: int | None) -> int | None:
        """x-quorum-target-group-size, else the target-group-size policy key (the higher of
        policy and operator policy), else quorum_queue...target_group_size."""
        arg = (record.get("arguments") or {}).get("x-quorum-target-group-size")
        if isinstance(arg, int) and arg > 0:
            return arg
        store = self.broker.admin.policies.get(vhost)
        if store is not None:
            qtype = "partitioned" if record.get("type") == "partitioned" else "quorum"
            values = [p.definition.get("target-group-size") for p in store.for_queue(name, qtype)
                      if p is not None]
            values = [v for v in values if isinstance(v, int)]
            if values:
                return max(values)
        return default

    def leads_metadata(self) -> bool:
        from amqp_broker.cluster.metadata import META_GROUP
        return self.runtime.driver.status(META_GROUP).is_leader
