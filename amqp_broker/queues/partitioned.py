"""The partitioned queue type (x-queue-type partitioned, seed 001): a quorum queue whose fifo
keeps its messages in N partitions, each consumed by one consumer at a time, with graceful
handoff when consumers come and go (`quorum/fifo/partitions.py` holds those rules).

Registered for x-queue-type=partitioned by `amqp_broker.cluster.install_quorum`. Everything
but two things is the quorum queue's (`QuorumQueue`: one Raft group, consumers on any node,
confirms, acks, dead lettering): the fifo configuration carries the partition settings, and
each publish is placed in its partition here, on the publishing node:

    key       = the x-partition-key header if the message has one, else the routing key
    partition = crc32(utf-8 bytes of key) mod N      (CRC-32/ISO-HDLC, as zlib.crc32)

(a header value that is not a string is taken as its decimal / str() text). The message is
stored, and so delivered, with headers x-partition (the partition, a long) and
x-partition-key (the key as a string). docs/PARTITIONED-QUEUES.md documents the hash for
producers in other languages.
"""

from __future__ import annotations

import zlib
from typing import Any

from amqp_broker.core.errors import PreconditionFailed
from amqp_broker.core.fieldtypes import Long
from amqp_broker.protocol.properties import (append_headers, decode_properties,
                                             encode_properties)
from quorum import fifo

from .base import GetReply
from .message import Message
from .quorum import QuorumQueue
from .quorum_config import quorum_config

__all__ = ["PartitionedQueue", "partition_key", "partition_of"]


def partition_key(msg: Message) -> str:
    """The message's partition key: its x-partition-key header, else its routing key."""
    if msg.headers_offset >= 0:
        value = msg.headers.get("x-partition-key")
        if value is not None:
            if isinstance(value, bytes):
                return value.decode("utf-8", "replace")
            return value if isinstance(value, str) else str(value)
    return msg.routing_key


def partition_of(key: str, partitions: int) -> int:
    """The documented, stable partition of `key` among `partitions`."""
    return zlib.crc32(key.encode("utf-8")) % partitions


def _stamped(msg: Message, partition: int, key: str) -> Message:
    """The message with headers x-partition and x-partition-key (a new message: the one
    given may be shared with other queues). Appended to the raw properties unless the
    message carries an x-partition already (republished from another partitioned queue)."""
    has = msg.headers if msg.headers_offset >= 0 else {}
    if "x-partition" not in has:
        add: dict = {"x-partition": Long(partition)}
        if "x-partition-key" not in has:
            add["x-partition-key"] = key
        if has.get("x-partition-key", key) == key:
            return Message.from_publish(msg.exchange, msg.routing_key,
                                        append_headers(msg.properties, add), msg.body)
    props = decode_properties(msg.properties)
    headers = dict(props.headers or {})
    headers["x-partition"] = Long(partition)
    headers["x-partition-key"] = key
    props.headers = headers
    return Message.from_publish(msg.exchange, msg.routing_key, encode_properties(props), msg.body)


class PartitionedQueue(QuorumQueue):
    queue_type = "partitioned"

    def _make_config(self) -> fifo.QueueConfig:
        return quorum_config(self.name, self.settings, partitioned=True)

    @property
    def partitions(self) -> int:
        return self.config.partitions

    def _enqueue(self, msg: Message, publisher: str | None, seq: int | None,
                 partition: int | None = None) -> None:
        key = partition_key(msg)
        part = partition_of(key, self.config.partitions)
        super()._enqueue(_stamped(msg, part, key), publisher, seq, part)

    def basic_get(self, channel: Any, no_ack: bool, now_ms: int, reply: GetReply) -> None:
        # a get would take a message past its partition's owner
        raise PreconditionFailed(
            f"basic.get is not supported by partitioned queue '{self.name}' in vhost "
            f"'{self.vhost}': consume instead")

    def partition_rows(self) -> list[dict]:
        """Each partition: owner (consumer tag, channel, node), state, depth, unacked; for
        the management API, `list_partitions` and the metrics."""
        rows = fifo.partition_overview(self.state.fifo) or []
        out = []
        for row in rows:
            owner = row.pop("owner")
            nxt = row.pop("next_owner")
            row["owner"] = None if owner is None else self._describe(owner)
            row["next_owner"] = None if nxt is None else self._describe(nxt)
            out.append(row)
        return out

    def _describe(self, key: fifo.ConsumerKey) -> dict:
        """channel: the channel object when it is on this node (the caller names it)."""
        return {"consumer_tag": key.tag, "channel_pid": key.pid, "node": key.node,
                "channel": self.live_channel(key.pid)}

    def handoff_counts(self) -> dict:
        """Handoffs started / completed gracefully / forced at the deadline (replicated)."""
        if self.deleted:
            return {"started": 0, "graceful": 0, "forced": 0}
        return fifo.handoff_counts(self.state.fifo)

    def overview(self) -> dict:
        out = super().overview()
        out["partitions"] = self.config.partitions
        return out
