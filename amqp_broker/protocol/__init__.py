"""Sans-IO AMQP 0-9-1 server protocol layer.

The server shell creates one `ServerConnection(ProtocolConfig(...))` per socket; see
`connection.py` for the calling contract and `events.py` for what comes out.
"""

from .config import DEFAULT_PRODUCT, DEFAULT_VERSION, ProtocolConfig, default_server_properties
from .connection import ServerConnection
from .events import (
    Ack,
    ChannelClosed,
    ChannelCloseRequested,
    ChannelOpened,
    ConnectionClosed,
    ConnectionCloseRequested,
    Event,
    HeartbeatTimeout,
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
    "Nack",
    "Reject",
    "ChannelCloseRequested",
    "ChannelClosed",
    "ConnectionCloseRequested",
    "ConnectionClosed",
    "HeartbeatTimeout",
]
