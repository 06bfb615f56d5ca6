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
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable

from amqp_broker.cluster import membership as wire
from amqp_broker.cluster.metadata import Put
from amqp_broker.cluster.nodes import write_membership

if TYPE_CHECKING:
    from .broker import Broker

__all__ = ["Membership", "NODE"]

_log = logging.getLogger(__name__)

NODE = "node"  # the metadata record kind: one per node that ever joined or was forgotten


class Membership:
    def __init__(self, broker: "Broker", runtime: Any, meta: Any) -> None:
        self.broker = broker
        self.runtime = runtime
        self.meta = meta
        self.node = runtime.node
        # called when a lone node gains a peer: the node's application restarts clustered
        self.on_clustered: Callable[[], None] | None = None
        runtime.on_request = self.answer

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
