"""Reply codes and the internal error type of the protocol layer.

`ProtocolError` is raised inside the connection's frame handlers and caught in one place
(`ServerConnection.feed`), which turns it into a connection.close (or a silent close before
the handshake has got far enough). `ChannelError` is the soft kind: it closes only its channel
(a message declared larger than max_message_size). Neither escapes the protocol package.

Texts follow RabbitMQ's "NAME - detail" form, because clients show and sometimes parse them.
"""

from __future__ import annotations

__all__ = [
    "ProtocolError",
    "ChannelError",
    "reply_text",
    "ACCESS_REFUSED",
    "PRECONDITION_FAILED",
    "FRAME_ERROR",
    "SYNTAX_ERROR",
    "COMMAND_INVALID",
    "CHANNEL_ERROR",
    "UNEXPECTED_FRAME",
    "NOT_ALLOWED",
    "NOT_IMPLEMENTED",
    "INTERNAL_ERROR",
    "CONNECTION_FORCED",
    "REPLY_SUCCESS",
]

REPLY_SUCCESS = 200
CONNECTION_FORCED = 320
ACCESS_REFUSED = 403
PRECONDITION_FAILED = 406
FRAME_ERROR = 501
SYNTAX_ERROR = 502
COMMAND_INVALID = 503
CHANNEL_ERROR = 504
UNEXPECTED_FRAME = 505
NOT_ALLOWED = 530
NOT_IMPLEMENTED = 540
INTERNAL_ERROR = 541

_NAMES = {
    REPLY_SUCCESS: "OK",
    CONNECTION_FORCED: "CONNECTION_FORCED",
    ACCESS_REFUSED: "ACCESS_REFUSED",
    PRECONDITION_FAILED: "PRECONDITION_FAILED",
    FRAME_ERROR: "FRAME_ERROR",
    SYNTAX_ERROR: "SYNTAX_ERROR",
    COMMAND_INVALID: "COMMAND_INVALID",
    CHANNEL_ERROR: "CHANNEL_ERROR",
    UNEXPECTED_FRAME: "UNEXPECTED_FRAME",
    NOT_ALLOWED: "NOT_ALLOWED",
    NOT_IMPLEMENTED: "NOT_IMPLEMENTED",
    INTERNAL_ERROR: "INTERNAL_ERROR",
}


def reply_text(code: int, detail: str) -> str:
    """RabbitMQ-style reply text: "FRAME_ERROR - detail"."""
    return f"{_NAMES.get(code, str(code))} - {detail}"


class ProtocolError(Exception):
    """A hard (connection-level) error found while processing client input."""

    def __init__(self, code: int, detail: str, class_id: int = 0, method_id: int = 0) -> None:
        self.code = code
        self.text = reply_text(code, detail)
        self.class_id = class_id
        self.method_id = method_id
        super().__init__(self.text)


class ChannelError(ProtocolError):
    """A soft error found in the input of one channel: only that channel is closed."""

    def __init__(self, channel: int, code: int, detail: str, class_id: int = 0,
                 method_id: int = 0) -> None:
        super().__init__(code, detail, class_id, method_id)
        self.channel = channel
