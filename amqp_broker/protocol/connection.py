"""The sans-IO AMQP 0-9-1 server connection (like h11): bytes in -> events, calls -> bytes out.

Called by the trio shell (`amqp_broker/server/`): it feeds every chunk read from the socket to
`feed()`, handles `next_events()`, calls the answer/send methods, writes `data_to_send()` and
closes the socket once `closed` is true and the output is flushed. `tick(now)` is called
periodically with a monotonic time for heartbeat bookkeeping.

No IO, no trio, no clock reads here.
"""

from __future__ import annotations

from .config import ProtocolConfig
from .events import Event

__all__ = ["ServerConnection"]


class ServerConnection:
    """One AMQP connection, server side."""

    def __init__(self, config: ProtocolConfig) -> None:
        raise NotImplementedError

    # -- input ---------------------------------------------------------------------------------
    def feed(self, data: bytes) -> None:
        """Consume bytes read from the socket. Never raises on bad input: protocol errors
        become a connection.close (or a silent close) plus events."""
        raise NotImplementedError

    def next_events(self) -> list[Event]:
        """Drain and return the events produced so far."""
        raise NotImplementedError

    def data_to_send(self) -> bytes:
        """Drain and return the bytes to write (b"" if none)."""
        raise NotImplementedError

    # -- handshake answers ---------------------------------------------------------------------
    def accept_login(self) -> None:
        """Answer a LoginRequest positively: send connection.tune."""
        raise NotImplementedError

    def refuse_login(self) -> None:
        """Answer a LoginRequest negatively: 403 close if the client advertised
        authentication_failure_close, else a silent close."""
        raise NotImplementedError

    def accept_open(self) -> None:
        """Answer an OpenRequest positively: send connection.open-ok."""
        raise NotImplementedError

    def refuse_open(self, text: str) -> None:
        """Answer an OpenRequest negatively: connection.close 530 NOT_ALLOWED - text."""
        raise NotImplementedError

    # -- output --------------------------------------------------------------------------------
    def send_method(self, channel: int, method) -> None:
        """Send any pamqp method object on `channel` (generic, slow path)."""
        raise NotImplementedError

    def send_deliver(self, channel: int, consumer_tag: str, delivery_tag: int,
                     redelivered: bool, exchange: str, routing_key: str,
                     properties: bytes, body: bytes) -> None:
        """basic.deliver + content header + body frames (struct fast path)."""
        raise NotImplementedError

    def send_get_ok(self, channel: int, delivery_tag: int, redelivered: bool, exchange: str,
                    routing_key: str, message_count: int, properties: bytes,
                    body: bytes) -> None:
        """basic.get-ok + content (struct fast path)."""
        raise NotImplementedError

    def send_return(self, channel: int, reply_code: int, reply_text: str, exchange: str,
                    routing_key: str, properties: bytes, body: bytes) -> None:
        """basic.return + content (struct fast path)."""
        raise NotImplementedError

    def send_confirm(self, channel: int, delivery_tag: int, multiple: bool, ack: bool) -> None:
        """Publisher confirm: basic.ack (ack=True) or basic.nack from the server."""
        raise NotImplementedError

    def close_channel(self, channel: int, reply_code: int, reply_text: str,
                      class_id: int = 0, method_id: int = 0) -> None:
        """Server-initiated channel.close. Until close-ok arrives, everything else on that
        channel is discarded; then ChannelClosed is emitted."""
        raise NotImplementedError

    def close_connection(self, reply_code: int, reply_text: str,
                         class_id: int = 0, method_id: int = 0) -> None:
        """Server-initiated connection.close; afterwards only close-ok is accepted."""
        raise NotImplementedError

    def tick(self, now: float) -> None:
        """Heartbeat bookkeeping with a monotonic `now` in seconds."""
        raise NotImplementedError
