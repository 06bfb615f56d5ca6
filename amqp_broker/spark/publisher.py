"""Publish a stream of messages with publisher confirms, pipelined, on one blocking socket.

Called by the sink's `write()` in executor tasks (`sink.py`), and so by `amqp-broker-dlq replay`.
On a `wire.WireConnection`, the frames of each `basic.publish` are built by hand and a whole
chunk of the window goes out in one `sendall`; acks are read between chunks (non-blocking) and
waited for only when the window of `maxInFlight` unconfirmed messages is full or the input is
exhausted.  A nack, a `basic.return` (with mandatory, unless returns are only counted), a channel
or connection close, or a confirm older than `confirmTimeout` raises `PublishError`, so Spark
fails and retries the task (at-least-once).  Heartbeats are off for these short-lived
connections: a task blocks on its input between chunks and could not answer them.
"""

from __future__ import annotations

import collections
import dataclasses
import struct
import time
from collections.abc import Iterator

from pamqp import commands

from .messages import Outgoing
from .wire import (CHANNEL, FRAME_BODY, FRAME_END, FRAME_HEADER, FRAME_METHOD, IDS,
                   WireConnection, WireError, encode_properties, frame, method_of, shortstr)

_FRAME_HEAD = struct.Struct(">BHI")  # type, channel, size
_CONTENT_HEAD = struct.Struct(">HHQ")  # class, weight, body size
_CHUNK = 256  # messages per sendall: big enough to amortise the syscall, small enough to overlap


class PublishError(RuntimeError):
    """The broker did not take every message; the Spark task must fail."""


class _ConnectError(PublishError):
    """Nothing was published: the next URL may be tried."""


@dataclasses.dataclass
class PublishResult:
    published: int = 0
    returned: int = 0


class PublishFrames:
    """The frames of basic.publish messages, for one connection's frame_max.  The method frame
    of each destination is built once: a sink mostly writes to a few."""

    def __init__(self, frame_max: int) -> None:
        self.frame_max = frame_max
        self._methods: dict[tuple[str, str, bool], bytes] = {}

    def _method_frame(self, exchange: str, routing_key: str, mandatory: bool) -> bytes:
        key = (exchange, routing_key, mandatory)
        method = self._methods.get(key)
        if method is None:
            method = frame(FRAME_METHOD, b"\x00\x3c\x00\x28\x00\x00" + shortstr(exchange)
                           + shortstr(routing_key) + (b"\x01" if mandatory else b"\x00"))
            if len(self._methods) < 1024:  # a sink mostly writes to a few destinations
                self._methods[key] = method
        return method

    def of(self, msg: Outgoing, mandatory: bool) -> bytes:
        """method + header + body frames of one basic.publish, joined once (the body is
        copied only into the result)."""
        body = msg.body
        size = len(body)
        props = encode_properties(msg.properties)
        out = [self._method_frame(msg.exchange, msg.routing_key, mandatory),
               _FRAME_HEAD.pack(FRAME_HEADER, CHANNEL, 12 + len(props)),
               _CONTENT_HEAD.pack(60, 0, size), props, FRAME_END]
        room = self.frame_max - 8
        if size <= room:
            if size:
                out += (_FRAME_HEAD.pack(FRAME_BODY, CHANNEL, size), body, FRAME_END)
        else:
            for start in range(0, size, room):
                piece = body[start:start + room]
                out += (_FRAME_HEAD.pack(FRAME_BODY, CHANNEL, len(piece)), piece, FRAME_END)
        return b"".join(out)


class WirePublisher:
    """Channel 1 of a `WireConnection`, in confirm mode.  One per task; not thread-safe."""

    def __init__(self, url: str) -> None:
        try:
            self.conn = WireConnection(url)
            self.conn.call(commands.Confirm.Select(), commands.Confirm.SelectOk)
        except WireError as exc:
            if getattr(self, "conn", None) is not None:
                self.conn.abort()
            raise _ConnectError(str(exc)) from exc
        self.frames = PublishFrames(self.conn.frame_max)

    def close(self) -> None:
        self.conn.close()

    def publish_all(self, messages: Iterator[Outgoing], *, mandatory: bool, count_unroutable: bool,
                    max_in_flight: int, confirm_timeout: float) -> PublishResult:
        result = PublishResult()
        sent = confirmed = 0
        chunks: collections.deque[tuple[int, float]] = collections.deque()  # (last tag, sent at)
        exhausted = False
        conn = self.conn
        conn.sock.settimeout(min(1.0, confirm_timeout))
        while not exhausted or confirmed < sent:
            room = min(_CHUNK, max_in_flight - (sent - confirmed))
            if not exhausted and room > 0:
                out = []
                for msg in messages:
                    out.append(self.frames.of(msg, mandatory))
                    if len(out) >= room:
                        break
                else:
                    exhausted = True
                if out:
                    conn.send(b"".join(out))
                    sent += len(out)
                    result.published += len(out)
                    chunks.append((sent, time.monotonic()))
                window_full = sent - confirmed >= max_in_flight
                got = conn.recv(block=window_full or exhausted)
            else:
                got = conn.recv(block=True)
            confirmed = self._handle_frames(confirmed, result, count_unroutable)
            while chunks and chunks[0][0] <= confirmed:
                chunks.popleft()
            if not got and chunks and time.monotonic() - chunks[0][1] > confirm_timeout:
                raise PublishError(f"no publisher confirm within {confirm_timeout}s "
                                   f"({sent - confirmed} unconfirmed)")
        return result

    def _handle_frames(self, confirmed: int, result: PublishResult, count_unroutable: bool) -> int:
        for ftype, payload in self.conn.frames():
            if ftype != FRAME_METHOD:
                continue  # heartbeats, and the header/body frames of a basic.return
            class_id, method_id = IDS.unpack_from(payload, 0)
            if (class_id, method_id) == (60, 80):  # basic.ack
                tag, bits = struct.unpack_from(">QB", payload, 4)
                confirmed = max(confirmed, tag)
            elif (class_id, method_id) == (60, 120):  # basic.nack
                tag = struct.unpack_from(">Q", payload, 4)[0]
                raise PublishError(f"broker nacked publish up to tag {tag}")
            elif (class_id, method_id) == (60, 50):  # basic.return
                result.returned += 1
                if not count_unroutable:
                    method = method_of(payload)
                    raise PublishError(
                        f"unroutable message returned: {method.reply_code} {method.reply_text} "
                        f"(exchange={method.exchange!r}, routing_key={method.routing_key!r}); "
                        "set onUnroutable=count to only count these")
            elif (class_id, method_id) in ((20, 40), (10, 50)):  # channel.close / connection.close
                method = method_of(payload)
                raise PublishError(f"channel closed by broker: {method.reply_code} {method.reply_text}")
        return confirmed


def publish_all(urls: tuple[str, ...], messages: Iterator[Outgoing], *, mandatory: bool = True,
                count_unroutable: bool = False, max_in_flight: int = 1000,
                confirm_timeout: float = 30.0, heartbeat: int = 30) -> PublishResult:
    """Publish everything and wait for every confirm; raise PublishError otherwise.
    With several URLs, the next one is tried only if the connection could not be opened.
    (`heartbeat` is accepted for the option's sake; these connections run without heartbeats.)"""
    last: BaseException | None = None
    for url in urls:
        try:
            pub = WirePublisher(url)
        except _ConnectError as exc:
            last = exc
            continue
        try:
            return pub.publish_all(messages, mandatory=mandatory, count_unroutable=count_unroutable,
                                   max_in_flight=max_in_flight, confirm_timeout=confirm_timeout)
        except (OSError, WireError) as exc:
            raise PublishError(f"connection to the broker failed while publishing: {exc}") from exc
        finally:
            pub.close()
    raise PublishError(f"could not publish to any of {len(urls)} broker URL(s): {last}")
