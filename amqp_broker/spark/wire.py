"""A lean AMQP 0-9-1 connection for the connector's hot paths: one blocking socket, channel 1.

Used by `publisher.py` (the sink's confirming publisher) and `consumer.py` (the source's driver
consumer).  pamqp encodes and decodes the rare methods (handshake, channel set-up, closes) and
field tables; the hot frames (publish, deliver, ack, confirm) are built and parsed by hand, since
pika spends far more CPU per message than the broker does.  Frame-level only: what a frame means
is up to the caller.  `send` is safe from several threads (the consumer acks from Spark's thread);
everything else belongs to one thread.
"""

from __future__ import annotations

import datetime as dt
import socket
import struct
import threading
import urllib.parse

from pamqp import commands
from pamqp import decode as pdecode
from pamqp import encode as pencode
from pamqp import frame as pframe

FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT = 1, 2, 3, 8
FRAME_END = b"\xce"
HEARTBEAT_FRAME = struct.pack(">BHI", FRAME_HEARTBEAT, 0, 0) + FRAME_END
CHANNEL = 1
_HDR = struct.Struct(">BHI")
IDS = struct.Struct(">HH")

# basic.properties in wire order: (pika-style name, flag bit, kind)
_SHORT, _OCTET, _TABLE, _STAMP = "shortstr", "octet", "table", "timestamp"
PROPERTY_LAYOUT = (
    ("content_type", 15, _SHORT), ("content_encoding", 14, _SHORT), ("headers", 13, _TABLE),
    ("delivery_mode", 12, _OCTET), ("priority", 11, _OCTET), ("correlation_id", 10, _SHORT),
    ("reply_to", 9, _SHORT), ("expiration", 8, _SHORT), ("message_id", 7, _SHORT),
    ("timestamp", 6, _STAMP), ("type", 5, _SHORT), ("user_id", 4, _SHORT), ("app_id", 3, _SHORT))


class WireError(RuntimeError):
    """The connection failed or the broker closed it; `code` is the AMQP reply code if any."""

    def __init__(self, text: str, code: int = 0) -> None:
        super().__init__(text)
        self.code = code


def shortstr(value: str) -> bytes:
    raw = value.encode("utf-8")
    if len(raw) > 255:
        raise WireError(f"AMQP short string longer than 255 bytes: {value[:40]!r}...")
    return bytes((len(raw),)) + raw


def frame(ftype: int, payload: bytes) -> bytes:
    return _HDR.pack(ftype, CHANNEL, len(payload)) + payload + FRAME_END


_LAYOUT_OF = {name: (name, bit, kind) for name, bit, kind in PROPERTY_LAYOUT}
_present_layouts: dict[tuple[str, ...], tuple] = {}


def _layout_of(names: tuple[str, ...]) -> tuple:
    """The layout entries of these property names, in wire order (a sink publishes rows of the
    same few names: worked out once per set, not per message)."""
    layout = _present_layouts.get(names)
    if layout is None:
        layout = tuple(sorted((_LAYOUT_OF[n] for n in names if n in _LAYOUT_OF), key=lambda e: -e[1]))
        if len(_present_layouts) < 64:
            _present_layouts[names] = layout
    return layout


_MODE_AND_ID = ("delivery_mode", "message_id")
_MODE_AND_ID_FLAGS = struct.pack(">H", 1 << 12 | 1 << 7)


def encode_properties(props: dict) -> bytes:
    """basic.properties (pika-style keyword names) -> property flags + values."""
    if tuple(props) == _MODE_AND_ID and props["message_id"] is not None:
        # every message of the sink's usual input: worked out directly
        return (_MODE_AND_ID_FLAGS + bytes((int(props["delivery_mode"]),))
                + shortstr(str(props["message_id"])))
    flags = 0
    parts = []
    for name, bit, kind in _layout_of(tuple(props)):
        value = props[name]
        if value is None:
            continue
        flags |= 1 << bit
        if kind == _SHORT:
            parts.append(shortstr(str(value)))
        elif kind == _OCTET:
            parts.append(bytes((int(value),)))
        elif kind == _STAMP:
            seconds = value.timestamp() if isinstance(value, dt.datetime) else value
            parts.append(struct.pack(">Q", int(seconds)))
        else:
            parts.append(pencode.field_table(dict(value)))
    return struct.pack(">H", flags) + b"".join(parts)


class Properties:
    """Decoded basic.properties with pika's attribute names (what `rows.make_row` reads):
    absent ones are the class's None, so a new instance costs nothing per property."""


for _name, _, _ in PROPERTY_LAYOUT:
    setattr(Properties, _name, None)


def decode_properties(data: bytes, offset: int = 0) -> Properties:
    """Property flags + values (a content header's payload after class, weight and size)."""
    props = Properties()
    flags = struct.unpack_from(">H", data, offset)[0]
    pos = offset + 2
    for name, bit, kind in PROPERTY_LAYOUT:
        if not flags & (1 << bit):
            continue
        if kind == _SHORT:
            n = data[pos]
            setattr(props, name, data[pos + 1:pos + 1 + n].decode("utf-8", errors="replace"))
            pos += 1 + n
        elif kind == _OCTET:
            setattr(props, name, data[pos])
            pos += 1
        elif kind == _STAMP:
            setattr(props, name, struct.unpack_from(">Q", data, pos)[0])
            pos += 8
        else:
            used, table = pdecode.field_table(data[pos:])
            props.headers = table
            pos += used
    return props


def method_of(payload: bytes):
    """A method frame's payload -> the pamqp method object (rare methods only)."""
    return pframe.unmarshal(_HDR.pack(FRAME_METHOD, CHANNEL, len(payload)) + payload + FRAME_END)[2]


class WireConnection:
    """Connection + channel 1, opened at construction.  Raises WireError if that fails."""

    def __init__(self, url: str, *, heartbeat: int = 0, connect_timeout: float = 10.0,
                 client: str = "amqp_broker.spark") -> None:
        parts = urllib.parse.urlparse(url)
        self._user = urllib.parse.unquote(parts.username or "guest")
        self._password = urllib.parse.unquote(parts.password or "guest")
        path = parts.path[1:] if parts.path.startswith("/") else parts.path
        self._vhost = urllib.parse.unquote(path) if path else "/"
        self._buf = bytearray()
        self._scratch = bytearray(1 << 20)
        self._scratch_view = memoryview(self._scratch)
        self._send_lock = threading.Lock()
        self.frame_max = 131072
        self.heartbeat = heartbeat
        self.sock = None
        try:
            self.sock = socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 5672),
                                                 timeout=connect_timeout)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._handshake(client)
        except (OSError, WireError) as exc:
            self.abort()
            raise WireError(f"cannot connect to {parts.hostname}:{parts.port}: {exc}",
                            getattr(exc, "code", 0)) from exc

    # -- frames -------------------------------------------------------------------------------

    def send(self, data: bytes) -> None:
        with self._send_lock:
            self.sock.sendall(data)

    def send_method(self, channel: int, method) -> None:
        self.send(pframe.marshal(method, channel))

    def frame_ready(self) -> bool:
        return len(self._buf) >= 7 and len(self._buf) >= 8 + _HDR.unpack_from(self._buf, 0)[2]

    def recv(self, block: bool) -> bool:
        """Read what the socket has (waiting up to its timeout if `block`); False if nothing."""
        try:
            # into one reused buffer: recv(n) allocates n bytes each call, and at 1 MiB that is an
            # mmap, page faults and a munmap per read
            n = self.sock.recv_into(self._scratch) if block else \
                self.sock.recv_into(self._scratch, 0, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError, socket.timeout):
            return False
        if not n:
            raise WireError("connection closed by broker")
        self._buf += self._scratch_view[:n]
        return True

    def next_frame(self) -> tuple[int, bytes]:
        """(type, payload) of the next whole frame; call only when `frame_ready()`."""
        return self.frames(limit=1)[0]

    def frames(self, limit: int | None = None) -> list[tuple[int, bytes]]:
        """(type, payload) of the whole frames in the buffer (at most `limit`), taken out of it
        in one piece: a burst of deliveries is thousands of frames."""
        buf, out, pos = self._buf, [], 0
        unpack = _HDR.unpack_from
        with memoryview(buf) as view:
            while len(buf) - pos >= 7 and (limit is None or len(out) < limit):
                ftype, _channel, size = unpack(buf, pos)
                end = pos + 8 + size
                if end > len(buf):
                    break
                out.append((ftype, bytes(view[pos + 7:end - 1])))
                pos = end
        del buf[:pos]
        return out

    def expect(self, cls):
        """Wait for a method of type `cls`, skipping heartbeats; a close raises WireError."""
        while True:
            while not self.frame_ready():
                if not self.recv(block=True):
                    raise WireError(f"timed out waiting for {cls.__name__}")
            ftype, payload = self.next_frame()
            if ftype != FRAME_METHOD:
                continue
            method = method_of(payload)
            if isinstance(method, (commands.Connection.Close, commands.Channel.Close)):
                raise WireError(f"{method.reply_code} {method.reply_text}", method.reply_code)
            if isinstance(method, cls):
                return method

    def call(self, method, reply_cls):
        self.send_method(CHANNEL, method)
        return self.expect(reply_cls)

    def _handshake(self, client: str) -> None:
        self.sock.sendall(b"AMQP\x00\x00\x09\x01")
        self.expect(commands.Connection.Start)
        self.send_method(0, commands.Connection.StartOk(
            client_properties={"product": client,
                               "capabilities": {"publisher_confirms": True, "basic.nack": True,
                                                "consumer_cancel_notify": True}},
            mechanism="PLAIN", response=f"\x00{self._user}\x00{self._password}", locale="en_US"))
        tune = self.expect(commands.Connection.Tune)
        if tune.frame_max:
            self.frame_max = min(self.frame_max, tune.frame_max)
        if self.heartbeat and tune.heartbeat:
            self.heartbeat = min(self.heartbeat, tune.heartbeat)
        self.send_method(0, commands.Connection.TuneOk(channel_max=tune.channel_max,
                                                       frame_max=self.frame_max,
                                                       heartbeat=self.heartbeat))
        self.send_method(0, commands.Connection.Open(virtual_host=self._vhost))
        self.expect(commands.Connection.OpenOk)
        self.call(commands.Channel.Open(), commands.Channel.OpenOk)

    # -- closing --------------------------------------------------------------------------------

    def close(self) -> None:
        """Connection.Close and wait briefly for CloseOk; the socket is closed in any case."""
        if self.sock is None:
            return
        try:
            self.sock.settimeout(2.0)
            self.send_method(0, commands.Connection.Close(reply_code=200, reply_text="done",
                                                          class_id=0, method_id=0))
            self.expect(commands.Connection.CloseOk)
        except (OSError, WireError):
            pass
        self.abort()

    def abort(self) -> None:
        if self.sock is not None:
            try:
                self.sock.close()
            finally:
                self.sock = None
