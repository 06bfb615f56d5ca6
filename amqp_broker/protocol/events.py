"""Events produced by the sans-IO AMQP 0-9-1 server connection.

`ServerConnection.next_events()` returns these; the trio shell in `amqp_broker/server/` matches on
them and answers through the connection's methods (accept_login, accept_open, send_method, ...).
Events are slotted dataclasses. All are frozen except the per-message ones (Publish, Ack,
Acks, Nack, Reject): a frozen dataclass's __init__ goes through object.__setattr__ per field and
costs about 1 us more per event (measured), so those four are plain slotted dataclasses.
Treat them as immutable all the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = [
    "Event",
    "LoginRequest",
    "OpenRequest",
    "ChannelOpened",
    "MethodReceived",
    "Publish",
    "Ack",
    "Acks",
    "Nack",
    "Reject",
    "ChannelCloseRequested",
    "ChannelClosed",
    "ChannelFailed",
    "ConnectionCloseRequested",
    "ConnectionClosed",
    "HeartbeatTimeout",
    "Tuned",
]


@dataclass(frozen=True, slots=True)
class LoginRequest:
    """The client sent connection.start-ok; answer with accept_login() or refuse_login().

    Emitted only for a known mechanism (PLAIN or AMQPLAIN) whose response parsed.
    """

    mechanism: str
    username: str
    password: str
    client_properties: dict


@dataclass(frozen=True, slots=True)
class OpenRequest:
    """The client sent connection.open; answer with accept_open() or refuse_open(text)."""

    virtual_host: str


@dataclass(frozen=True, slots=True)
class ChannelOpened:
    """channel.open arrived and channel.open-ok has already been queued."""

    channel: int


@dataclass(frozen=True, slots=True)
class MethodReceived:
    """Any channel method not covered by a dedicated event, as the pamqp command object.

    Examples: Queue.Declare, Exchange.Declare, Basic.Consume, Basic.Qos, Confirm.Select, Tx.*,
    Basic.Cancel, Basic.CancelOk, Basic.Get, Basic.Recover, Channel.Flow, Channel.FlowOk.
    Channel open/close methods never appear here (they have their own events). On channel 0
    only Connection.UpdateSecret appears (once the connection is open); the server's session
    answers it with UpdateSecretOk, as RabbitMQ's internal user database does.
    Arguments are decoded, not validated: names, flags and values are the server's to check.
    """

    channel: int
    method: Any


@dataclass(slots=True)
class Publish:
    """A complete basic.publish: method + content header + all body frames.

    `properties` is the raw property section of the content header (16-bit flags followed by the
    property fields) exactly as the client sent it, so it can be forwarded untouched. Decode with
    `amqp_broker.protocol.properties.decode_properties` or peek with `peek_*` helpers.
    """

    channel: int
    exchange: str
    routing_key: str
    mandatory: bool
    immediate: bool
    properties: bytes
    body: bytes


@dataclass(slots=True)
class Ack:
    """basic.ack with multiple=true from the client (decoded by the struct fast path)."""

    channel: int
    delivery_tag: int
    multiple: bool


@dataclass(slots=True)
class Acks:
    """basic.acks with multiple=false on one channel, in the order received: consecutive ones
    arrive as one event (a consumer acking message by message sends them in bursts, and each
    event costs the broker more than the ack itself)."""

    channel: int
    delivery_tags: list[int]


@dataclass(slots=True)
class Nack:
    """basic.nack from the client (decoded by the struct fast path)."""

    channel: int
    delivery_tag: int
    multiple: bool
    requeue: bool


@dataclass(slots=True)
class Reject:
    """basic.reject from the client (decoded by the struct fast path)."""

    channel: int
    delivery_tag: int
    requeue: bool


@dataclass(frozen=True, slots=True)
class ChannelCloseRequested:
    """The client closed a channel; channel.close-ok has already been queued.

    The channel number is free again; the server should requeue the channel's unacked messages.
    """

    channel: int
    reply_code: int
    reply_text: str
    class_id: int
    method_id: int


@dataclass(frozen=True, slots=True)
class ChannelClosed:
    """Our server-initiated channel.close got its close-ok; the channel number is free again."""

    channel: int


@dataclass(frozen=True, slots=True)
class ChannelFailed:
    """The protocol layer closed this channel itself with a soft error (a content header
    declaring a body larger than max_message_size): channel.close is queued and the rest of the
    content is discarded as it arrives. Drop the channel's state now; ChannelClosed follows
    when the client's close-ok comes."""

    channel: int
    reply_code: int
    reply_text: str
    class_id: int
    method_id: int


@dataclass(frozen=True, slots=True)
class ConnectionCloseRequested:
    """The client sent connection.close; connection.close-ok has already been queued."""

    reply_code: int
    reply_text: str
    class_id: int
    method_id: int


@dataclass(frozen=True, slots=True)
class ConnectionClosed:
    """The connection is over; flush data_to_send() then close the socket.

    `reason` is a short human-readable string (e.g. "client close", "501 FRAME_ERROR - ...",
    "bad protocol header", "login refused", "heartbeat timeout"). `bug` is the traceback when
    an exception inside the protocol layer ended the connection (541): a bug to log.
    """

    reason: str
    bug: str = ""


@dataclass(frozen=True, slots=True)
class Tuned:
    """tune-ok accepted: `heartbeat` (seconds, 0 = off) now applies, so `tick_interval` may
    have shrunk; the server should call tick() on the new period from now on."""

    heartbeat: int


@dataclass(frozen=True, slots=True)
class HeartbeatTimeout:
    """No inbound bytes for two negotiated heartbeat intervals; the connection is marked closed."""


Event = (
    LoginRequest
    | OpenRequest
    | ChannelOpened
    | MethodReceived
    | Publish
    | Ack
    | Acks
    | Nack
    | Reject
    | ChannelCloseRequested
    | ChannelClosed
    | ChannelFailed
    | ConnectionCloseRequested
    | ConnectionClosed
    | HeartbeatTimeout
    | Tuned
)
