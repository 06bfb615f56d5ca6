"""What nodes of a cluster say to each other outside Raft: the remote queue protocol (classic
queues used from other nodes), `MetaApplied` (how far a node has applied the metadata) and
`Transfer` (a leadership hand-over asked by rebalance) and `NodeStats` (what a node reports of
itself for the others' management API).

A classic queue lives on one node, its home. Channels on other nodes use it through
`queues.remote.RemoteQueue` (the client side); the home node serves them with
`server/remote_queues.py`. Both encode these messages with `encode` / `decode`; they travel on
the nodes' authenticated link (`cluster.runtime.QuorumRuntime.send_rpc`). Ids: `corr` numbers a
request of one client node (publish confirms, gets); `cid` numbers a consumer of one client
node; `chan` numbers a channel of one client node; `msg_id` is the home queue's own.
"""

from __future__ import annotations

import msgspec

__all__ = ["Publish", "Confirmed", "Consume", "Cancel", "Deliver", "Settle", "Get", "GetReply",
           "ChannelDown", "Purge", "CountsRequest", "Counts", "Stats", "ConsumerGone",
           "MetaApplied", "Transfer", "NodeStats", "Credit", "WINDOW_MESSAGES", "WINDOW_BYTES",
           "encode", "decode", "RPC_GROUP"]

# the transport's group id for these frames (Raft groups are never named so)
RPC_GROUP = "\x02queues"


class _Msg(msgspec.Struct, array_like=True, frozen=True, tag=True):
    pass


class Publish(_Msg, tag="pub"):
    vhost: str
    queue: str
    corr: int  # 0: no confirm wanted
    exchange: str
    routing_key: str
    properties: bytes
    body: bytes


class Confirmed(_Msg, tag="cf"):
    corrs: tuple[int, ...]
    ok: bool


class Consume(_Msg, tag="con"):
    cid: int
    chan: int
    vhost: str
    queue: str
    tag: str
    no_ack: bool
    exclusive: bool
    priority: int
    prefetch: int  # 0: unlimited
    arguments: dict


class Cancel(_Msg, tag="can"):
    cid: int


class Deliver(_Msg, tag="dlv"):
    cid: int
    msg_id: int
    redelivered: bool
    delivery_count: int
    exchange: str
    routing_key: str
    properties: bytes
    body: bytes


class Credit(_Msg, tag="cr"):
    """The client node handed `count` more deliveries of consumer `cid` (`size` body bytes) to
    a connection that is taking them: the home node may send that much more (the link window,
    which keeps a consumer whose client does not read from filling the client node's memory)."""
    cid: int
    count: int
    size: int


# The link window per remote consumer: the home node stops delivering to a consumer of another
# node once this many deliveries, or this many body bytes, are not yet credited back; the client
# node credits them back in quarters, and only while the consumer's connection is taking what it
# is sent (`Session.output_full`). Acked or not: prefetch is counted separately.
WINDOW_MESSAGES = 256
WINDOW_BYTES = 4 * 1024 * 1024


class Settle(_Msg, tag="st"):
    vhost: str
    queue: str
    how: str  # ack | requeue | discard
    msg_ids: tuple[int, ...]


class Get(_Msg, tag="get"):
    corr: int
    chan: int
    vhost: str
    queue: str
    no_ack: bool


class GetReply(_Msg, tag="got"):
    corr: int
    left: int
    msg_id: int = -1  # -1: empty
    redelivered: bool = False
    delivery_count: int = 0
    exchange: str = ""
    routing_key: str = ""
    properties: bytes = b""
    body: bytes = b""


class ChannelDown(_Msg, tag="cd"):
    chan: int


class Purge(_Msg, tag="pg"):
    vhost: str
    queue: str
    corr: int = 0  # not 0: answer how many went (`Counts`, messages = the number purged)


class CountsRequest(_Msg, tag="cq"):
    """What the home queue holds now (a declare-ok on another node, as RabbitMQ asks the
    queue itself): answered with `Counts`."""
    corr: int
    vhost: str
    queue: str


class Counts(_Msg, tag="cnt"):
    corr: int
    messages: int  # -1: no such queue here
    consumers: int


class Stats(_Msg, tag="sts"):
    vhost: str
    queue: str
    messages: int
    consumers: int


class ConsumerGone(_Msg, tag="cg"):
    cid: int


class MetaApplied(_Msg, tag="ma"):
    """The sender has applied the metadata group up to `index` (`server/cluster_meta.py`);
    `steady`: it has run since before the receiver started, or has settled what a restart of
    the whole cluster drops (transient exchanges), so the cluster did not restart as a whole."""
    index: int
    steady: bool = True


class Transfer(_Msg, tag="tl"):
    """Hand the leadership of Raft group `group` to node `to`, if the receiver leads it
    (`amqp-broker-queues rebalance`)."""
    group: str
    to: str


class NodeStats(_Msg, tag="ns"):
    """What a node tells the others of itself every two seconds: the management API's row of
    a peer (its memory, disk, uptime and alarms), as RabbitMQ shows every node's."""
    os_pid: str
    uptime: int  # ms since the node's application started
    processors: int
    alarms: tuple[str, ...]
    usage: dict[str, int]  # mem_used, mem_limit, disk_free, disk_free_limit
    # Its client connections per vhost ("vhost") and per user ("user"), and its users' open
    # channels ("user_channels"): vhost and user limits count over the cluster.
    tally: dict[str, dict[str, int]] = {}


Message = (Publish | Confirmed | Consume | Cancel | Deliver | Settle | Get | GetReply
           | ChannelDown | Purge | CountsRequest | Counts | Stats | ConsumerGone | MetaApplied
           | Transfer | NodeStats | Credit)
encode = msgspec.msgpack.Encoder().encode
decode = msgspec.msgpack.Decoder(Message).decode
