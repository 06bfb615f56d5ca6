"""Record encoding and replay for the message journal. Pure: bytes in, recovered state out.

Who calls it: `journal.py` (encode on append, `replay` on recovery and after compaction tests).

Records (msgspec msgpack arrays inside `records.frame`):
    [1, queue, msg_id, exchange, routing_key, properties, body]   enqueue of a persistent message
    [2, queue, [msg_id, ...]]                                      first delivery (-> redelivered)
    [3, queue, [msg_id, ...]]                                      removed (ack, drop, expiry, purge)
    [4, queue]                                                     queue deleted: forget all of it
    [5]                                                            commit mark (see below)
`queue` is `amqp_broker.queues.queue_key(vhost, name)`.

A commit mark is written at the start of the write that follows a successful fsync (and at the
end of a compacted file): everything before an intact mark was durable. So at recovery a bad
record followed, somewhere after it, by an intact mark is damage to data already confirmed
(`mark_after` finds it; the node refuses to start), while a bad record with no mark after it is
the torn tail of a write that was never confirmed (cut off).
"""

from __future__ import annotations

from typing import Any, Iterable

import msgspec

from amqp_broker.queues.message import Message
from amqp_broker.store.records import HEADER_SIZE, MAX_RECORD, frame, scan, unpack_header

__all__ = [
    "ENQUEUE",
    "DELIVERED",
    "REMOVED",
    "DROP_QUEUE",
    "COMMIT_MARK",
    "mark_after",
    "encode_enqueue",
    "encode_ids",
    "encode_drop_queue",
    "Recovered",
    "replay",
]

ENQUEUE, DELIVERED, REMOVED, DROP_QUEUE, COMMIT = 1, 2, 3, 4, 5

_encoder = msgspec.msgpack.Encoder()
_decode = msgspec.msgpack.decode

# queue -> msg_id -> (message, delivered); dict order per queue is append order
Recovered = dict[str, dict[int, tuple[Message, bool]]]


def encode_enqueue(queue: str, msg_id: int, message: Message) -> bytes:
    """One framed enqueue record. Cost: one msgpack encode + one CRC over the body."""
    return frame(
        _encoder.encode(
            (ENQUEUE, queue, msg_id, message.exchange, message.routing_key,
             message.properties, message.body)
        )
    )


def encode_ids(kind: int, queue: str, msg_ids: Iterable[int]) -> bytes:
    """A framed DELIVERED or REMOVED record for a batch of ids."""
    return frame(_encoder.encode((kind, queue, list(msg_ids))))


def encode_drop_queue(queue: str) -> bytes:
    return frame(_encoder.encode((DROP_QUEUE, queue)))


COMMIT_MARK = frame(_encoder.encode((COMMIT,)))


def mark_after(data: bytes | memoryview, bad: int) -> int | None:
    """The offset of an intact commit mark after the bad record at `bad`, or None. Records
    are skipped by their length field while it is plausible; a length that is not ends the
    search (nothing after it can be framed, so nothing after it can prove damage)."""
    view = memoryview(data)
    end = len(view)
    pos = bad
    while pos + HEADER_SIZE <= end:
        length, crc = unpack_header(view, pos)
        stop = pos + HEADER_SIZE + length
        if length > MAX_RECORD or stop > end:
            return None
        if pos > bad and bytes(view[pos:stop]) == COMMIT_MARK:
            return pos
        pos = stop
    return None


def _apply(state: Recovered, rec: list[Any]) -> None:
    kind = rec[0]
    if kind == ENQUEUE:
        _, queue, msg_id, exchange, routing_key, properties, body = rec
        msg = Message.from_publish(exchange, routing_key, properties, body)
        state.setdefault(queue, {})[msg_id] = (msg, False)
    elif kind == DELIVERED:
        msgs = state.get(rec[1])
        if msgs:
            for msg_id in rec[2]:
                if msg_id in msgs:
                    msgs[msg_id] = (msgs[msg_id][0], True)
    elif kind == REMOVED:
        msgs = state.get(rec[1])
        if msgs:
            for msg_id in rec[2]:
                msgs.pop(msg_id, None)
    elif kind == DROP_QUEUE:
        state.pop(rec[1], None)


def replay(data: bytes | memoryview, state: Recovered | None = None) -> tuple[Recovered, int]:
    """Apply every intact record of `data`; return (state, valid_end). Bytes after `valid_end`
    are a torn tail. `properties` and `body` come back as `bytes`."""
    state = {} if state is None else state
    payloads, valid_end = scan(data)
    for payload in payloads:
        _apply(state, _decode(payload))
    for queue in [q for q, msgs in state.items() if not msgs]:
        del state[queue]
    return state, valid_end
