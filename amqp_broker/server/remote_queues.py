"""Classic queues across a cluster: both ends of the remote queue protocol (`queues/remote_wire`).

Built by `node.open_broker` when the node has peers, as `broker.remote_queues`; the runtime
hands it every frame of the `RPC_GROUP` (`handle`; `MetaApplied` goes on to `cluster_meta`) and tells it when links drop and return
(`node_changed`, it is a `QuorumRuntime.watch`er; `audit` every two seconds sends queue counts).

Client side: it is the `queues.remote.RemoteLink` of this node's `RemoteQueue` proxies (ids,
sending, routing the home nodes' answers back to the proxy that asked).

Home side: it serves other nodes' channels on this node's classic queues. Each remote channel
is a `_RemoteChannel` stand-in, what the queue runtime sees as the consumer's channel: its
`deliver` sends the message over the link and remembers it as unacked until the client node
settles it; its consumers' `take_credit` enforces their prefetch here, and the link window
(`remote_wire.WINDOW_*`: deliveries the client node has not yet handed to a connection that takes
them; it credits them back with `Credit`). When a client node's
link drops, its stand-ins go as a closed channel does: unacked messages are requeued (with
redelivered set), consumers removed.
"""

from __future__ import annotations

import logging
import os
import time
import weakref
from collections import deque
from typing import TYPE_CHECKING, Any, Callable

from amqp_broker.cluster.placement import choose_home
from amqp_broker.core.errors import AMQPError
from amqp_broker.queues import Consumer, Message
from amqp_broker.queues import remote_wire as w
from amqp_broker.queues.remote import RemoteQueue

if TYPE_CHECKING:
    from .broker import Broker
    from .queue_runtime import QueueRuntime

__all__ = ["RemoteQueues"]

_log = logging.getLogger(__name__)


class _Session:
    """A stand-in's session: the link sends at once, nothing to wake."""

    @staticmethod
    def wake() -> None:
        pass


class _RemoteChannel:
    """A channel of another node, as this node's queues see it."""

    session = _Session()

    def __init__(self, owner: "RemoteQueues", peer: str, chan: int) -> None:
        self.owner = owner
        self.peer = peer
        self.chan = chan
        self.released = False
        self.prefetch = 0
        self.consumers: dict[int, tuple["QueueRuntime", Consumer]] = {}  # cid -> (rt, consumer)
        self.cid_of: dict[str, int] = {}  # consumer tag -> cid
        self.unacked: dict[tuple[int, int], int] = {}  # (id(rt), msg_id) -> cid (0: a get)
        self.outstanding: dict[int, int] = {}  # cid -> deliveries not yet settled
        self.in_window: dict[int, deque[int]] = {}  # cid -> sizes of deliveries not credited back
        self.window_bytes: dict[int, int] = {}
        self.runtimes: dict[int, "QueueRuntime"] = {}  # id(rt) -> rt

    def deliver(self, rt: "QueueRuntime", consumer: Consumer, entry: Any) -> None:
        cid = self.cid_of.get(consumer.tag, 0)
        m = entry.message
        if not consumer.no_ack:
            self.unacked[(id(rt), entry.msg_id)] = cid
            self.runtimes[id(rt)] = rt
        if cid:
            self.in_window.setdefault(cid, deque()).append(len(m.body))
            self.window_bytes[cid] = self.window_bytes.get(cid, 0) + len(m.body)
        self.owner.send(self.peer, w.Deliver(cid, entry.msg_id, entry.redelivered,
                                             entry.delivery_count, m.exchange, m.routing_key,
                                             m.properties, m.body))

    def credit(self, cid: int, prefetch: int) -> Callable[[], bool]:
        def take_credit() -> bool:
            window = self.in_window.get(cid)
            if window and (len(window) >= w.WINDOW_MESSAGES
                           or self.window_bytes.get(cid, 0) >= w.WINDOW_BYTES):
                return False  # the client node has not passed on what it got: wait for Credit
            n = self.outstanding.get(cid, 0)
            if prefetch and n >= prefetch:
                return False
            self.outstanding[cid] = n + 1
            return True
        return take_credit

    def credited(self, cid: int, count: int) -> None:
        """The client node passed `count` deliveries on: the window has room again."""
        window = self.in_window.get(cid)
        if not window:
            return
        size = 0
        for _ in range(min(count, len(window))):
            size += window.popleft()
        self.window_bytes[cid] = max(0, self.window_bytes.get(cid, 0) - size)
        found = self.consumers.get(cid)
        if found is not None:
            found[0].kick()

    def settled(self, rt: "QueueRuntime", msg_ids: tuple) -> None:
        key = id(rt)
        for msg_id in msg_ids:
            cid = self.unacked.pop((key, msg_id), None)
            if cid:
                self.outstanding[cid] = max(0, self.outstanding.get(cid, 0) - 1)

    def consumer_cancelled(self, tag: str) -> None:
        """The queue went (deleted): tell the client node."""
        cid = self.cid_of.pop(tag, None)
        if cid is not None:
            self.consumers.pop(cid, None)
            self.owner.send(self.peer, w.ConsumerGone(cid))

    def close(self) -> None:
        """The channel closed, or its node went: requeue what it held, drop its consumers."""
        self.released = True
        for cid, (rt, consumer) in list(self.consumers.items()):
            rt.remove_consumer(self, consumer.tag)
        self.consumers.clear()
        by_rt: dict[int, list] = {}
        for (key, msg_id) in self.unacked:
            by_rt.setdefault(key, []).append(msg_id)
        self.unacked.clear()
        for key, ids in by_rt.items():
            rt = self.runtimes.get(key)
            if rt is not None:
                rt.settle(ids, "requeue")
        for rt in self.runtimes.values():
            rt.channel_closed(self)


class RemoteQueues:
    def __init__(self, broker: "Broker", runtime: Any) -> None:
        self.broker = broker
        self.runtime = runtime
        self.node = runtime.node
        self._next = 0
        self._routes: dict[int, RemoteQueue] = {}  # cid / corr -> the proxy expecting it
        self._chan_ids: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._stand_ins: dict[tuple[str, int], _RemoteChannel] = {}  # (peer, chan) -> stand-in
        self._sent_stats: dict[tuple[str, str], tuple[int, int]] = {}
        self.peer_stats: dict[str, Any] = {}  # peer -> its last w.NodeStats (management rows)
        self._retired: set[RemoteQueue] = set()  # replaced proxies with confirms to come

    def peer_tally(self, kind: str, name: str) -> int:
        """What the running peers last reported (every two seconds) of `kind` ("vhost",
        "user", "user_channels", as `Broker.connection_tally`) for `name`."""
        return sum(stats.tally.get(kind, {}).get(name, 0)
                   for peer, stats in self.peer_stats.items() if self.runtime.is_running(peer))

    # -- RemoteLink (client side) ---------------------------------------------------------------
    def send(self, node: str, msg: Any) -> bool:
        if not self.runtime.is_running(node):
            return False
        return self.runtime.send_rpc(node, w.encode(msg))

    def is_up(self, node: str) -> bool:
        return self.runtime.is_running(node)

    def new_id(self) -> int:
        self._next += 1
        return self._next

    def channel_id(self, channel: Any) -> int:
        n = self._chan_ids.get(channel)
        if n is None:
            n = self._chan_ids[channel] = self.new_id()
        return n

    def expect(self, ident: int, queue: RemoteQueue) -> None:
        self._routes[ident] = queue

    def forget(self, ident: int) -> None:
        self._routes.pop(ident, None)

    def retire(self, queue: RemoteQueue) -> None:
        """`queue`'s proxy is replaced by a replica (`VHost.replace_queue`)."""
        queue.retire()
        if queue.confirms_pending:
            self._retired = {q for q in self._retired if q.confirms_pending}
            self._retired.add(queue)

    @staticmethod
    def is_stand_in(channel: Any) -> bool:
        """Is `channel` another node's channel, as this node's queues see it?"""
        return isinstance(channel, _RemoteChannel)

    def runtime_of(self, queue: RemoteQueue) -> "QueueRuntime | None":
        v = self.broker.vhosts.get(queue.vhost)
        rt = v.queues.get(queue.name) if v is not None else None
        return rt if rt is not None and rt.queue is queue else None

    def home_for(self, vhost: str, name: str, arguments: dict) -> str:
        """The home node of a new durable classic queue (the master of a mirrored one; masters
        count as homes): x-queue-master-locator, else the
        queue-master-locator policy key, else queue_master_locator (`cluster/placement.py`)."""
        locator = arguments.get("x-queue-master-locator")
        if isinstance(locator, bytes):
            locator = locator.decode()
        if locator is None:
            store = self.broker.admin.policies.get(vhost)
            policy = store.for_queue(name)[0] if store is not None else None
            locator = (policy.definition.get("queue-master-locator")
                       if policy is not None else None)
        if locator is None:
            locator = getattr(self.broker.settings, "queue_master_locator", "client-local")
        homes: dict[str, int] = {}
        driver = self.runtime.driver
        for _key, record in self.broker.cluster_meta.state().items("queue"):
            home = record.get("node")
            if record.get("mirrored") and driver.has_group(record["group"]):
                home = driver.status(record["group"]).leader  # a mirrored queue's master
            if home is not None:
                homes[home] = homes.get(home, 0) + 1
        return choose_home(self.runtime, locator, homes)

    def make_queue(self, name: str, vhost: str, home: str, *, arguments: dict,
                   auto_delete: bool) -> RemoteQueue:
        return RemoteQueue(self, name, vhost, home, arguments=arguments, auto_delete=auto_delete)

    # -- frames from other nodes ----------------------------------------------------------------
    def handle(self, peer: str, data: bytes) -> None:
        try:
            msg = w.decode(data)
        except Exception:  # a bad frame from an authenticated peer: a bug, not an attack
            _log.warning("undecodable queue frame from %s", peer)
            return
        try:
            self._handle(peer, msg)
        except AMQPError as err:
            _log.info("remote %s from %s refused: %s", type(msg).__name__, peer, err)
        except Exception:
            _log.exception("remote %s from %s failed", type(msg).__name__, peer)
        self.broker.run_pending()

    def _handle(self, peer: str, msg: Any) -> None:
        t = type(msg)
        # client side: answers about our proxies
        if t is w.Deliver or t is w.ConsumerGone:
            q = self._routes.get(msg.cid)
            if q is None:
                if t is w.Deliver:  # the consumer is gone here: give the message back
                    self.send(peer, w.Settle("", "", "requeue", (msg.msg_id,)))
                return
            q.deliver(msg) if t is w.Deliver else q.consumer_gone(msg.cid)
        elif t is w.Confirmed:
            for corr in msg.corrs:
                q = self._routes.get(corr)
                if q is not None:
                    q.confirmed((corr,), msg.ok)
        elif t is w.GetReply:
            q = self._routes.get(msg.corr)
            if q is not None:
                q.got(msg)
        elif t is w.Stats:
            q = self._proxy(msg.vhost, msg.queue)
            if q is not None:
                q.stats(msg.messages, msg.consumers)
        elif t is w.Counts:
            q = self._routes.get(msg.corr)
            if q is not None:
                q.counted(msg)
        # home side: other nodes' channels using our queues
        elif t is w.Publish:
            self._publish(peer, msg)
        elif t is w.Consume:
            self._consume(peer, msg)
        elif t is w.Cancel:
            for s in self._stand_ins.values():
                if s.peer == peer and msg.cid in s.consumers:
                    rt, consumer = s.consumers.pop(msg.cid)
                    s.cid_of.pop(consumer.tag, None)
                    s.in_window.pop(msg.cid, None)
                    s.window_bytes.pop(msg.cid, None)
                    rt.remove_consumer(s, consumer.tag)
        elif t is w.Settle:
            self._settle(peer, msg)
        elif t is w.Credit:
            for s in self._stand_ins.values():
                if s.peer == peer and msg.cid in s.consumers:
                    s.credited(msg.cid, msg.count)
        elif t is w.Get:
            self._get(peer, msg)
        elif t is w.ChannelDown:
            s = self._stand_ins.pop((peer, msg.chan), None)
            if s is not None:
                s.close()
        elif t is w.Purge:
            rt = self._home_queue(msg.vhost, msg.queue)
            n = rt.purge() if rt is not None else -1
            if msg.corr:
                self.send(peer, w.Counts(msg.corr, n, 0))
        elif t is w.CountsRequest:
            rt = self._home_queue(msg.vhost, msg.queue)
            self.send(peer, w.Counts(msg.corr, -1, 0) if rt is None else
                      w.Counts(msg.corr, rt.message_count, rt.consumer_count))
        elif t is w.MetaApplied:
            self.broker.cluster_meta.peer_applied(peer, msg.index, msg.steady)
        elif t is w.Transfer:
            self.runtime.transfer_leadership(msg.group, msg.to)
        elif t is w.NodeStats:
            self.peer_stats[peer] = msg

    def _proxy(self, vhost: str, name: str) -> RemoteQueue | None:
        v = self.broker.vhosts.get(vhost)
        rt = v.queues.get(name) if v is not None else None
        q = rt.queue if rt is not None else None
        return q if isinstance(q, RemoteQueue) else None

    def _home_queue(self, vhost: str, name: str) -> "QueueRuntime | None":
        v = self.broker.vhosts.get(vhost)
        rt = v.queues.get(name) if v is not None else None
        if rt is None or isinstance(rt.queue, RemoteQueue) or rt.exclusive:
            return None
        return rt

    def _stand_in(self, peer: str, chan: int) -> _RemoteChannel:
        s = self._stand_ins.get((peer, chan))
        if s is None:
            s = self._stand_ins[(peer, chan)] = _RemoteChannel(self, peer, chan)
        return s

    def _publish(self, peer: str, msg: w.Publish) -> None:
        rt = self._home_queue(msg.vhost, msg.queue)
        if rt is None:
            if msg.corr:
                self.send(peer, w.Confirmed((msg.corr,), False))
            return
        message = Message.from_publish(msg.exchange, msg.routing_key, msg.properties, msg.body)
        confirm = (_ConfirmSink(self, peer), msg.corr) if msg.corr else None
        rt.publish(message, self.broker.update_clock(), confirm)

    def _consume(self, peer: str, msg: w.Consume) -> None:
        rt = self._home_queue(msg.vhost, msg.queue)
        if rt is None:
            self.send(peer, w.ConsumerGone(msg.cid))
            return
        s = self._stand_in(peer, msg.chan)
        consumer = Consumer(msg.tag, s, msg.no_ack, msg.exclusive, msg.priority,
                            s.credit(msg.cid, msg.prefetch), dict(msg.arguments))
        try:
            rt.add_consumer(consumer)
        except AMQPError:
            self.send(peer, w.ConsumerGone(msg.cid))
            return
        s.consumers[msg.cid] = (rt, consumer)
        s.cid_of[msg.tag] = msg.cid
        s.runtimes[id(rt)] = rt

    def _settle(self, peer: str, msg: w.Settle) -> None:
        rt = self._home_queue(msg.vhost, msg.queue) if msg.vhost or msg.queue else None
        ids = tuple(msg.msg_ids)
        for s in self._stand_ins.values():
            if s.peer != peer:
                continue
            if rt is None:  # a delivery the client could not hand to anyone
                for key in [k for k in s.unacked if k[1] in ids]:
                    found = s.runtimes.get(key[0])
                    s.settled(found, (key[1],))
                    if found is not None:
                        found.settle([key[1]], msg.how)
                continue
            s.settled(rt, ids)
        if rt is not None:
            rt.settle(list(ids), msg.how)

    def _get(self, peer: str, msg: w.Get) -> None:
        rt = self._home_queue(msg.vhost, msg.queue)
        if rt is None:
            self.send(peer, w.GetReply(msg.corr, 0))
            return
        s = self._stand_in(peer, msg.chan)
        s.runtimes[id(rt)] = rt

        def reply(entry: Any, left: int) -> None:
            if entry is None:
                self.send(peer, w.GetReply(msg.corr, left))
                return
            if not msg.no_ack:
                s.unacked[(id(rt), entry.msg_id)] = 0
            m = entry.message
            self.send(peer, w.GetReply(msg.corr, left, entry.msg_id, entry.redelivered,
                                       entry.delivery_count, m.exchange, m.routing_key,
                                       m.properties, m.body))

        rt.basic_get(s, msg.no_ack, reply)

    # -- links ----------------------------------------------------------------------------------
    def node_changed(self, node: str, up: bool) -> None:
        if up:
            self._sent_stats.clear()  # tell it everything again
            self.broker.cluster_meta.announce()
            return
        for key in [k for k in self._stand_ins if k[0] == node]:
            self._stand_ins.pop(key).close()
        for vhost in self.broker.vhosts.values():
            for rt in list(vhost.queues.values()):
                q = rt.queue
                if isinstance(q, RemoteQueue) and q.home == node:
                    q.home_down()
        for q in [q for q in self._retired if q.home == node or not q.confirms_pending]:
            self._retired.discard(q)
            q.home_down()
        self.broker.run_pending()

    def audit(self) -> None:
        """Every two seconds: this node's classic queues' counts to the other nodes (what
        their declare-ok and listings show), when they changed."""
        peers = [p for p in self.runtime.peers if self.runtime.is_running(p)]
        if not peers:
            return
        broker = self.broker
        me = w.encode(w.NodeStats(str(os.getpid()), int((time.time() - broker.started_at) * 1000),
                                  os.cpu_count() or 1, tuple(sorted(broker.alarms)),
                                  dict(broker.resource_usage), broker.connection_tally()))
        for peer in peers:
            self.runtime.send_rpc(peer, me)  # encoded once for every peer
        for vhost in self.broker.vhosts.values():
            for rt in vhost.queues.values():
                if isinstance(rt.queue, RemoteQueue) or not rt.durable or rt.exclusive:
                    continue
                key = (vhost.name, rt.name)
                now = (rt.message_count, rt.consumer_count)
                if self._sent_stats.get(key) != now:
                    self._sent_stats[key] = now
                    for p in peers:
                        self.send(p, w.Stats(vhost.name, rt.name, *now))


class _ConfirmSink:
    """Confirms of one client node's publishes: sent back in one frame per batch."""

    __slots__ = ("owner", "peer")

    def __init__(self, owner: RemoteQueues, peer: str) -> None:
        self.owner = owner
        self.peer = peer

    def settle(self, seq: int, ok: bool) -> None:
        self.owner.send(self.peer, w.Confirmed((seq,), ok))
