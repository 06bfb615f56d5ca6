"""Sans-IO AMQP 0-9-1 server protocol layer.

The server shell creates one `ServerConnection(ProtocolConfig(...))` per socket; see
`connection.py` for the calling contract and `events.py` for what comes out. Message
properties travel as raw bytes; `properties.py` peeks at or fully decodes them.
"""

from .config import DEFAULT_PRODUCT, DEFAULT_VERSION, ProtocolConfig, default_server_properties
from .connection import ServerConnection
from .properties import (
    EMPTY_PROPERTIES,
    check_properties,
    decode_properties,
    encode_properties,
    peek,
    peek_correlation_id,
    peek_delivery_mode,
    peek_expiration,
    peek_headers,
    peek_message_id,
    peek_priority,
    peek_reply_to,
    peek_timestamp,
    peek_user_id,
)
from .events import (
    Ack,
    Acks,
    ChannelClosed,
    ChannelFailed,
    ChannelCloseRequested,
    ChannelOpened,
    ConnectionClosed,
    ConnectionCloseRequested,
    Event,
    HeartbeatTimeout,
    Tuned,
    LoginRequest,
    MethodReceived,
    Nack,
    OpenRequest,
    Publish,
    Reject,
)

__all__ = [
    "ServerConnection",
    "ProtocolConfig",
    "default_server_properties",
    "DEFAULT_PRODUCT",
    "DEFAULT_VERSION",
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
    "EMPTY_PROPERTIES",
    "check_properties",
    "decode_properties",
    "encode_properties",
    "peek",
    "peek_correlation_id",
    "peek_delivery_mode",
    "peek_expiration",
    "peek_headers",
    "peek_message_id",
    "peek_priority",
    "peek_reply_to",
    "peek_timestamp",
    "peek_user_id",
]
