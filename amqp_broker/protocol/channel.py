"""Per-channel state of a server connection: open/closing, and content assembly.

Content assembly turns basic.publish + content header + body frames into one `Publish`
event, with RabbitMQ's checks (rabbit_command_assembler): frames of one channel may not
interleave, a header needs a publish before it, a body frame may not exceed what is left of
the declared size. Frames of *different* channels may interleave freely. A header declaring a
body larger than max_message_size is refused when it arrives (a `ChannelError`: the connection
closes this channel and discards the body frames that follow), so no body over the limit is
ever assembled. RabbitMQ 3.10 assembles it first and refuses it after the last frame, with the
same 406 text.

Used by: connection.py only.
"""

from __future__ import annotations

from .events import Publish
from .fastpath import decode_content_header
from .properties import check_properties
from .replies import (
    FRAME_ERROR, PRECONDITION_FAILED, SYNTAX_ERROR, UNEXPECTED_FRAME, ChannelError,
    ProtocolError,
)
from .tables import TableTooDeep

__all__ = ["Channel", "EXPECT_METHOD", "EXPECT_HEADER", "EXPECT_BODY"]

EXPECT_METHOD = 0
EXPECT_HEADER = 1
EXPECT_BODY = 2

_BASIC = 60
_PUBLISH = 40


class Channel:
    """One open channel. `closing` is True after we sent channel.close and until close-ok."""

    __slots__ = ("number", "closing", "expect", "_publish", "_props", "_parts", "_remaining")

    def __init__(self, number: int) -> None:
        self.number = number
        self.closing = False
        self.expect = EXPECT_METHOD
        self._publish: tuple[str, str, bool, bool] | None = None
        self._props = b""
        self._parts: list[bytes] = []
        self._remaining = 0

    def start_publish(self, args: tuple[str, str, bool, bool]) -> None:
        """A basic.publish arrived; its content header must come next."""
        self._publish = args
        self.expect = EXPECT_HEADER

    def unexpected_method(self) -> ProtocolError:
        """The error for a method frame arriving in the middle of a content; as RabbitMQ, it
        names basic.publish (60, 40), the method whose content was being assembled."""
        if self.expect == EXPECT_HEADER:
            detail = "expected content header for class 60, got non content header frame instead"
        else:
            detail = "expected content body, got non content body frame instead"
        return ProtocolError(UNEXPECTED_FRAME, detail, _BASIC, _PUBLISH)

    def on_header(self, payload: bytes, max_size: int) -> Publish | None:
        """Content header frame; returns the Publish at once when the body is empty.
        A declared body over `max_size` raises ChannelError (406, RabbitMQ's text)."""
        if self.expect != EXPECT_HEADER:
            raise self._unexpected_content()
        try:
            class_id, body_size, props = decode_content_header(payload)
            check_properties(props)
        except TableTooDeep as err:
            raise ProtocolError(SYNTAX_ERROR, str(err)) from None
        except (ValueError, UnicodeDecodeError):
            raise ProtocolError(FRAME_ERROR, "cannot decode content header") from None
        if class_id != _BASIC:
            raise ProtocolError(
                UNEXPECTED_FRAME,
                f"expected content header for class 60, got one for class {class_id} instead",
            )
        if body_size > max_size:
            self._publish = None
            self.expect = EXPECT_METHOD
            raise ChannelError(
                self.number, PRECONDITION_FAILED,
                f"message size {body_size} is larger than configured max size {max_size}",
                _BASIC, _PUBLISH)
        self._props = props
        if body_size == 0:
            return self._complete(b"")
        self._remaining = body_size
        self.expect = EXPECT_BODY
        return None

    def on_body(self, payload: bytes) -> Publish | None:
        """Content body frame; returns the Publish when the declared size is reached."""
        if self.expect != EXPECT_BODY:
            raise self._unexpected_content()
        size = len(payload)
        if size > self._remaining:
            raise ProtocolError(FRAME_ERROR, "content body frame exceeds remaining content size")
        self._remaining -= size
        if self._remaining:
            self._parts.append(payload)
            return None
        if self._parts:
            self._parts.append(payload)
            body = b"".join(self._parts)
            self._parts = []
        else:
            body = payload
        return self._complete(body)

    def _complete(self, body: bytes) -> Publish:
        exchange, routing_key, mandatory, immediate = self._publish  # type: ignore[misc]
        self._publish = None
        self.expect = EXPECT_METHOD
        return Publish(self.number, exchange, routing_key, mandatory, immediate, self._props, body)

    def _unexpected_content(self) -> ProtocolError:
        if self.expect == EXPECT_METHOD:
            return ProtocolError(UNEXPECTED_FRAME,
                                 "expected method frame, got non method frame instead")
        return self.unexpected_method()
