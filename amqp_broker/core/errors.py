"""Typed AMQP errors raised by the pure cores and turned into closes by the server.

Every error carries the AMQP reply code and the full reply text as RabbitMQ sends it,
e.g. ``"NOT_FOUND - no exchange 'x' in vhost '/'"``. The server layer (``amqp_broker/server``)
catches ``AMQPError``: a *soft* error (``is_soft``) closes the channel, a *hard* one closes the
connection. ``class_id``/``method_id`` may be filled in by the caller that knows which method
failed (``with_method``); cores raise without them.

Codes and soft/hard classes follow ``rabbit_framing_amqp_0_9_1:lookup_amqp_exception/1``.
"""

from __future__ import annotations

__all__ = [
    "AMQPError",
    "SoftError",
    "HardError",
    "ContentTooLarge",
    "NoRoute",
    "NoConsumers",
    "AccessRefused",
    "NotFound",
    "ResourceLocked",
    "PreconditionFailed",
    "ConnectionForced",
    "InvalidPath",
    "FrameError",
    "SyntaxError_",
    "CommandInvalid",
    "ChannelError",
    "UnexpectedFrame",
    "ResourceError",
    "NotAllowed",
    "NotImplemented_",
    "InternalError",
    "error_for_code",
    "vhost_resource",
]


class AMQPError(Exception):
    """Base of all protocol errors; ``reply_text`` is the full text sent to the client."""

    reply_code: int = 541
    reply_name: str = "INTERNAL_ERROR"
    is_soft: bool = False

    def __init__(self, message: str, *, class_id: int = 0, method_id: int = 0) -> None:
        # ``message`` is the part after "NAME - "; the prefix is added here once.
        self.message = message
        self.reply_text = f"{self.reply_name} - {message}"
        self.class_id = class_id
        self.method_id = method_id
        super().__init__(self.reply_text)

    @property
    def is_hard(self) -> bool:
        return not self.is_soft

    def with_method(self, class_id: int, method_id: int) -> "AMQPError":
        """Return self after recording which method failed (for the close frame)."""
        self.class_id = class_id
        self.method_id = method_id
        return self

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.reply_code}, {self.reply_text!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, AMQPError):
            return NotImplemented
        return (self.reply_code, self.reply_text) == (other.reply_code, other.reply_text)

    def __hash__(self) -> int:
        return hash((self.reply_code, self.reply_text))


class SoftError(AMQPError):
    """Closes the channel only."""

    is_soft = True


class HardError(AMQPError):
    """Closes the whole connection."""

    is_soft = False


class ContentTooLarge(SoftError):
    reply_code, reply_name = 311, "CONTENT_TOO_LARGE"


class NoRoute(SoftError):
    reply_code, reply_name = 312, "NO_ROUTE"


class NoConsumers(SoftError):
    reply_code, reply_name = 313, "NO_CONSUMERS"


class AccessRefused(SoftError):
    reply_code, reply_name = 403, "ACCESS_REFUSED"


class NotFound(SoftError):
    reply_code, reply_name = 404, "NOT_FOUND"


class ResourceLocked(SoftError):
    reply_code, reply_name = 405, "RESOURCE_LOCKED"


class PreconditionFailed(SoftError):
    reply_code, reply_name = 406, "PRECONDITION_FAILED"


class ConnectionForced(HardError):
    reply_code, reply_name = 320, "CONNECTION_FORCED"


class InvalidPath(HardError):
    reply_code, reply_name = 402, "INVALID_PATH"


class FrameError(HardError):
    reply_code, reply_name = 501, "FRAME_ERROR"


class SyntaxError_(HardError):  # trailing _ : do not shadow the builtin
    reply_code, reply_name = 502, "SYNTAX_ERROR"


class CommandInvalid(HardError):
    reply_code, reply_name = 503, "COMMAND_INVALID"


class ChannelError(HardError):
    reply_code, reply_name = 504, "CHANNEL_ERROR"


class UnexpectedFrame(HardError):
    reply_code, reply_name = 505, "UNEXPECTED_FRAME"


class ResourceError(HardError):
    reply_code, reply_name = 506, "RESOURCE_ERROR"


class NotAllowed(HardError):
    reply_code, reply_name = 530, "NOT_ALLOWED"


class NotImplemented_(HardError):  # trailing _ : do not shadow the builtin
    reply_code, reply_name = 540, "NOT_IMPLEMENTED"


class InternalError(HardError):
    reply_code, reply_name = 541, "INTERNAL_ERROR"


_BY_CODE: dict[int, type[AMQPError]] = {
    cls.reply_code: cls
    for cls in (
        ContentTooLarge, NoRoute, NoConsumers, AccessRefused, NotFound, ResourceLocked,
        PreconditionFailed, ConnectionForced, InvalidPath, FrameError, SyntaxError_,
        CommandInvalid, ChannelError, UnexpectedFrame, ResourceError, NotAllowed,
        NotImplemented_, InternalError,
    )
}


def error_for_code(code: int, message: str) -> AMQPError:
    """Build the error class for a reply code (unknown codes become INTERNAL_ERROR)."""
    return _BY_CODE.get(code, InternalError)(message)


def vhost_resource(kind: str, name: str, vhost: str) -> str:
    """RabbitMQ's resource phrase: ``exchange 'x' in vhost '/'``."""
    return f"{kind} '{name}' in vhost '{vhost}'"
