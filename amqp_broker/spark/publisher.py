"""Publish a stream of messages with publisher confirms, pipelined, on one blocking socket.

Called by the sink's `write()` in executor tasks (`sink.py`), and by `amqp-broker-dlq replay`.
The hot path builds the frames of each `basic.publish` by hand and sends a whole window chunk in one
`sendall`; acks are read between chunks (non-blocking) and waited for only when the window of
`maxInFlight` unconfirmed messages is full or the input is exhausted.  pamqp encodes the rare
methods (handshake, channel and confirm set-up) and header tables.  A nack, a `basic.return` (with
mandatory, unless returns are only counted), a channel or connection close, or a confirm older than
`confirmTimeout` raises `PublishError`, so Spark fails and retries the task (at-least-once).
Heartbeats are switched off for these short-lived connections: a task blocks on its input
between chunks and could not answer them.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import socket
import struct
import time
import urllib.parse
from collections.abc import Iterator

from pamqp import commands
from pamqp import encode as pencode
from pamqp import frame as pframe

from .messages import Outgoing

FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT = 1, 2, 3, 8
_FRAME_END = b"\xce"
_HDR = struct.Struct(">BHI")
_IDS = struct.Struct(">HH")
_CHANNEL = 1
_CHUNK = 256  # messages per sendall: big enough to amortise the syscall, small enough to overlap

# basic.properties in wire order: (name, flag bit, encoder)
_SHORT, _OCTET, _TABLE, _STAMP = "shortstr", "octet", "table", "timestamp"
_PROPERTY_LAYOUT = (
    ("content_type", 15, _SHORT), ("content_encoding", 14, _SHORT), ("headers", 13, _TABLE),
    ("delivery_mode", 12, _OCTET), ("priority", 11, _OCTET), ("correlation_id", 10, _SHORT),
    ("reply_to", 9, _SHORT), ("expiration", 8, _SHORT), ("message_id", 7, _SHORT),
    ("timestamp", 6, _STAMP), ("type", 5, _SHORT), ("user_id", 4, _SHORT), ("app_id", 3, _SHORT))


class PublishError(RuntimeError):
    """The broker did not take every message; the Spark task must fail."""


class _ConnectError(PublishError):
    """Nothing was published: the next URL may be tried."""


@dataclasses.dataclass
class PublishResult:
    published: int = 0
    returned: int = 0


def _shortstr(value: str) -> bytes:
    raw = value.encode("utf-8")
    if len(raw) > 255:
        raise PublishError(f"AMQP short string longer than 255 bytes: {value[:40]!r}...")
    return bytes((len(raw),)) + raw


def _timestamp(value) -> int:
    if isinstance(value, dt.datetime):
        return int(value.timestamp())
    return int(value)


def encode_properties(props: dict) -> bytes:
    """basic.properties (pika-style keyword names) -> property flags + values."""
    flags = 0
    parts = []
    for name, bit, kind in _PROPERTY_LAYOUT:
        value = props.get(name)
        if value is None:
            continue
        flags |= 1 << bit
        if kind == _SHORT:
            parts.append(_shortstr(str(value)))
        elif kind == _OCTET:
            parts.append(bytes((int(value),)))
        elif kind == _STAMP:
            parts.append(struct.pack(">Q", _timestamp(value)))
        else:
            parts.append(pencode.field_table(dict(value)))
    return struct.pack(">H", flags) + b"".join(parts)


def _frame(ftype: int, payload: bytes) -> bytes:
    return _HDR.pack(ftype, _CHANNEL, len(payload)) + payload + _FRAME_END


class WirePublisher:
    """One connection, channel 1 in confirm mode.  Blocking; one per task; not thread-safe."""

    def __init__(self, url: str, connect_timeout: float = 10.0) -> None:
        parts = urllib.parse.urlparse(url)
        self._user = urllib.parse.unquote(parts.username or "guest")
        self._password = urllib.parse.unquote(parts.password or "guest")
        path = parts.path[1:] if parts.path.startswith("/") else parts.path
        self._vhost = urllib.parse.unquote(path) if path else "/"
        self._buf = bytearray()
        self.frame_max = 131072
        try:
            self._sock = socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 5672),
                                                  timeout=connect_timeout)
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._handshake()
        except (OSError, PublishError) as exc:
            self.close()
            raise _ConnectError(f"cannot connect to {parts.hostname}:{parts.port}: {exc}") from exc

    # -- plumbing ---------------------------------------------------------------------------

    def _send_method(self, channel: int, method) -> None:
        self._sock.sendall(pframe.marshal(method, channel))

    def _frame_ready(self) -> bool:
        return len(self._buf) >= 7 and len(self._buf) >= 8 + _HDR.unpack_from(self._buf, 0)[2]

    def _recv(self, block: bool) -> bool:
        """Read what the socket has (waiting if `block`); False when nothing came."""
        try:
            chunk = self._sock.recv(1 << 20) if block else self._sock.recv(1 << 20, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return False
        except socket.timeout:
            return False
        if not chunk:
            raise PublishError("connection closed by broker")
        self._buf += chunk
        return True

    def _next_frame(self) -> tuple[int, int, bytes]:
        ftype, channel, size = _HDR.unpack_from(self._buf, 0)
        payload = bytes(self._buf[7:7 + size])
        del self._buf[:8 + size]
        return ftype, channel, payload

    def _expect(self, cls):
        while True:
            while not self._frame_ready():
                if not self._recv(block=True):
                    raise PublishError(f"timed out waiting for {cls.__name__}")
            ftype, channel, payload = self._next_frame()
            if ftype != FRAME_METHOD:
                continue
            method = pframe.unmarshal(_HDR.pack(ftype, channel, len(payload)) + payload + _FRAME_END)[2]
            if isinstance(method, (commands.Connection.Close, commands.Channel.Close)):
                raise PublishError(f"{method.reply_code} {method.reply_text}")
            if isinstance(method, cls):
                return method

    def _handshake(self) -> None:
        self._sock.sendall(b"AMQP\x00\x00\x09\x01")
        self._expect(commands.Connection.Start)
        self._send_method(0, commands.Connection.StartOk(
            client_properties={"product": "amqp_broker.spark",
                               "capabilities": {"publisher_confirms": True,
                                                "basic.nack": True}},
            mechanism="PLAIN", response=f"\x00{self._user}\x00{self._password}", locale="en_US"))
        tune = self._expect(commands.Connection.Tune)
        if tune.frame_max:
            self.frame_max = min(self.frame_max, tune.frame_max)
        self._send_method(0, commands.Connection.TuneOk(channel_max=tune.channel_max,
                                                        frame_max=self.frame_max, heartbeat=0))
        self._send_method(0, commands.Connection.Open(virtual_host=self._vhost))
        self._expect(commands.Connection.OpenOk)
        self._send_method(_CHANNEL, commands.Channel.Open())
        self._expect(commands.Channel.OpenOk)
        self._send_method(_CHANNEL, commands.Confirm.Select())
        self._expect(commands.Confirm.SelectOk)

    def close(self) -> None:
        sock = getattr(self, "_sock", None)
        if sock is None:
            return
        try:
            sock.settimeout(2.0)
            self._send_method(0, commands.Connection.Close(reply_code=200, reply_text="done",
                                                           class_id=0, method_id=0))
            self._expect(commands.Connection.CloseOk)
        except (OSError, PublishError):
            pass
        sock.close()
        self._sock = None

    # -- the hot path -----------------------------------------------------------------------

    def frames(self, msg: Outgoing, mandatory: bool) -> bytes:
        """method + header + body frames of one basic.publish."""
        method = (b"\x00\x3c\x00\x28\x00\x00" + _shortstr(msg.exchange) + _shortstr(msg.routing_key)
                  + (b"\x01" if mandatory else b"\x00"))
        body = msg.body
        header = struct.pack(">HHQ", 60, 0, len(body)) + encode_properties(msg.properties)
        out = [_frame(FRAME_METHOD, method), _frame(FRAME_HEADER, header)]
        room = self.frame_max - 8
        for start in range(0, len(body), room):
            out.append(_frame(FRAME_BODY, body[start:start + room]))
        return b"".join(out)

    def publish_all(self, messages: Iterator[Outgoing], *, mandatory: bool, count_unroutable: bool,
                    max_in_flight: int, confirm_timeout: float) -> PublishResult:
        result = PublishResult()
        sent = confirmed = 0
        chunks: collections.deque[tuple[int, float]] = collections.deque()  # (last tag, sent at)
        exhausted = False
        self._sock.settimeout(min(1.0, confirm_timeout))
        while not exhausted or confirmed < sent:
            room = min(_CHUNK, max_in_flight - (sent - confirmed))
            if not exhausted and room > 0:
                out = []
                for msg in messages:
                    out.append(self.frames(msg, mandatory))
                    if len(out) >= room:
                        break
                else:
                    exhausted = True
                if out:
                    self._sock.sendall(b"".join(out))
                    sent += len(out)
                    result.published += len(out)
                    chunks.append((sent, time.monotonic()))
                window_full = sent - confirmed >= max_in_flight
                got = self._recv(block=window_full or exhausted)
            else:
                got = self._recv(block=True)
            confirmed = self._handle_frames(confirmed, result, count_unroutable)
            while chunks and chunks[0][0] <= confirmed:
                chunks.popleft()
            if not got and chunks and time.monotonic() - chunks[0][1] > confirm_timeout:
                raise PublishError(f"no publisher confirm within {confirm_timeout}s "
                                   f"({sent - confirmed} unconfirmed)")
        return result

    def _handle_frames(self, confirmed: int, result: PublishResult, count_unroutable: bool) -> int:
        while self._frame_ready():
            ftype, _channel, payload = self._next_frame()
            if ftype != FRAME_METHOD:
                continue  # heartbeats, and the header/body frames of a basic.return
            class_id, method_id = _IDS.unpack_from(payload, 0)
            if (class_id, method_id) == (60, 80):  # basic.ack
                tag, bits = struct.unpack_from(">QB", payload, 4)
                confirmed = max(confirmed, tag)
            elif (class_id, method_id) == (60, 120):  # basic.nack
                tag = struct.unpack_from(">Q", payload, 4)[0]
                raise PublishError(f"broker nacked publish up to tag {tag}")
            elif (class_id, method_id) == (60, 50):  # basic.return
                result.returned += 1
                if not count_unroutable:
                    method = pframe.unmarshal(_HDR.pack(FRAME_METHOD, 1, len(payload)) + payload
                                              + _FRAME_END)[2]
                    raise PublishError(
                        f"unroutable message returned: {method.reply_code} {method.reply_text} "
                        f"(exchange={method.exchange!r}, routing_key={method.routing_key!r}); "
                        "set onUnroutable=count to only count these")
            elif (class_id, method_id) in ((20, 40), (10, 50)):  # channel.close / connection.close
                method = pframe.unmarshal(_HDR.pack(FRAME_METHOD, 1, len(payload)) + payload
                                          + _FRAME_END)[2]
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
        except OSError as exc:
            raise PublishError(f"connection to the broker failed while publishing: {exc}") from exc
        finally:
            pub.close()
    raise PublishError(f"could not publish to any of {len(urls)} broker URL(s): {last}")
