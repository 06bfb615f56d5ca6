"""Record encoding and replay for the message journal. Pure: bytes in, recovered state out.

Who calls it: `journal.py` (encode on append, `decode_enqueue` when reading a message back) and
`journal_index.py` (the record kinds).

Records (msgspec msgpack arrays inside `records.frame`):
    [1, queue, msg_id, exchange, routing_key, properties, body]   enqueue of a persistent message
    [6, queue, msg_id, exchange, routing_key, properties, body]   ... delivered before written
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

import os
from typing import Iterable

import msgspec

from amqp_broker.queues.message import Message
from amqp_broker.store.records import HEADER_SIZE, MAX_RECORD, Payload, legacy_frame, unpack_header

__all__ = [
    "ENQUEUE",
    "ENQUEUE_DELIVERED",
    "DELIVERED",
    "REMOVED",
    "DROP_QUEUE",
    "COMMIT_MARK",
    "mark_after",
    "encode_enqueue",
    "as_delivered",
    "encode_ids",
    "encode_drop_queue",
    "decode_enqueue",
    "peek_enqueue",
]

ENQUEUE, DELIVERED, REMOVED, DROP_QUEUE, COMMIT, ENQUEUE_DELIVERED = 1, 2, 3, 4, 5, 6

SPLIT_BODY = 4096   # bodies this large are written from where they are (`encode_enqueue`)

_encoder = msgspec.msgpack.Encoder()
_decode = msgspec.msgpack.decode

def encode_enqueue(queue: str, msg_id: int, message: Message) -> Payload:
    """The payload of an enqueue record (framed when written: `records.frame_pieces`). A body
    of `SPLIT_BODY` bytes or more is left out of the encoding and follows it as a piece of its
    own, so it is never copied on the way to the file (the pieces joined are the msgpack array
    with the body in it, byte for byte); a smaller one is encoded in."""
    body = message.body
    if len(body) < SPLIT_BODY:
        return _encoder.encode((ENQUEUE, queue, msg_id, message.exchange, message.routing_key,
                                message.properties, body))
    head = _encoder.encode((ENQUEUE, queue, msg_id, message.exchange, message.routing_key,
                            message.properties, b""))
    # the encoding ends with the empty body's bin8 header (c4 00): put the body's own instead
    return head[:-2] + _bin_header(len(body)), body


_ENQUEUE_START = bytes((0x97, ENQUEUE))   # msgpack: an array of 7, then the kind
_DELIVERED_START = bytes((0x97, ENQUEUE_DELIVERED))


def as_delivered(payload: Payload) -> Payload:
    """An enqueue record's payload made an ENQUEUE_DELIVERED one (the same length): a message
    delivered while its enqueue record waits to be written needs no DELIVERED record of its own
    (at a low rate, one of the three records a message costs)."""
    if type(payload) is tuple:
        return (as_delivered(payload[0]), *payload[1:])  # type: ignore[return-value]
    assert payload[:2] == _ENQUEUE_START, "not an enqueue record"
    return _DELIVERED_START + payload[2:]


def _bin_header(length: int) -> bytes:
    """msgpack's header of a bin of `length` bytes (the shortest, as msgspec writes it)."""
    if length < 0x100:
        return b"\xc4" + length.to_bytes(1, "big")
    if length < 0x10000:
        return b"\xc5" + length.to_bytes(2, "big")
    return b"\xc6" + length.to_bytes(4, "big")


def encode_ids(kind: int, queue: str, msg_ids: Iterable[int]) -> bytes:
    """The payload of a DELIVERED or REMOVED record for a batch of ids."""
    return _encoder.encode((kind, queue, list(msg_ids)))


def encode_drop_queue(queue: str) -> bytes:
    return _encoder.encode((DROP_QUEUE, queue))


COMMIT_MARK = legacy_frame(_encoder.encode((COMMIT,)))  # compared byte for byte


def mark_after(fd: int, bad: int, end: int) -> int | None:
    """The offset of an intact commit mark after the bad record at `bad` in the open file `fd`
    (of `end` bytes), or None. Records are skipped by their length field while it is
    plausible; a length that is not ends the search (nothing after it can be framed, so nothing
    after it can prove damage). One small read per record: the file is never loaded whole."""
    pos = bad
    while pos + HEADER_SIZE <= end:
        length, _crc = unpack_header(memoryview(os.pread(fd, HEADER_SIZE, pos)), 0)
        stop = pos + HEADER_SIZE + length
        if length == 0 or length > MAX_RECORD or stop > end:
            return None
        if pos > bad and stop - pos == len(COMMIT_MARK) and \
                os.pread(fd, len(COMMIT_MARK), pos) == COMMIT_MARK:
            return pos
        pos = stop
    return None


def decode_enqueue(payload: bytes | memoryview) -> tuple[str, int, Message]:
    """(queue, msg_id, message) of an enqueue record's payload."""
    _, queue, msg_id, exchange, routing_key, properties, body = _decode(payload)
    return queue, msg_id, Message.from_publish(exchange, routing_key, properties, body)


class _EnqueueFields(msgspec.Struct, array_like=True):
    kind: int
    queue: msgspec.Raw
    msg_id: int
    exchange: msgspec.Raw
    routing_key: msgspec.Raw
    properties: bytes
    body: msgspec.Raw   # not copied: only its length is wanted


_enqueue_fields = msgspec.msgpack.Decoder(_EnqueueFields)
_BIN_HEADER = {0xC4: 2, 0xC5: 3, 0xC6: 5}   # msgpack bin8/16/32: type byte and length


def peek_enqueue(payload: bytes | memoryview) -> tuple[bytes, int]:
    """(properties, body length) of an enqueue record's payload, without copying the body or
    building the message (recovery pages most of a backlog out again at once)."""
    f = _enqueue_fields.decode(payload)
    body = memoryview(f.body)
    return f.properties, len(body) - _BIN_HEADER[body[0]]
