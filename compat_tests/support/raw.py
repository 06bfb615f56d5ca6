"""A tiny blocking AMQP client on a raw socket, built on pamqp, for tests that must send bytes no
real client library would send (bad protocol header, oversized frame) and read the exact reply.

Used by compat_tests/test_raw_protocol.py, test_bad_input_table.py and tests/hardening/.  Frames are read whole before pamqp decodes them,
because pamqp.frame.unmarshal raises on partial input.
"""

from __future__ import annotations

import socket
import struct
import time
from urllib.parse import unquote, urlparse

from pamqp import commands, frame, header

_FRAME_END = b"\xce"


class RawClient:
    def __init__(self, url: str, timeout: float = 10.0) -> None:
        u = urlparse(url)
        self.user = unquote(u.username or "guest")
        self.password = unquote(u.password or "guest")
        self.vhost = unquote(u.path[1:]) if u.path and u.path != "/" else "/"
        self.sock = socket.create_connection((u.hostname or "localhost", u.port or 5672), timeout=timeout)
        self._buf = b""
        self.eof = False  # set by read_until_eof when the server closed the socket
        self.reset = False  # set by read_until_eof when that close was a TCP reset
        self.start: commands.Connection.Start | None = None
        self.tune: commands.Connection.Tune | None = None

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "RawClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- bytes ---------------------------------------------------------------------------------

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, channel: int, value) -> None:
        self.sock.sendall(frame.marshal(value, channel))

    def recv_exact(self, n: int) -> bytes:
        """Read exactly n bytes (fewer only if the peer closed)."""
        while len(self._buf) < n:
            try:
                chunk = self.sock.recv(65536)
            except ConnectionResetError:
                break  # RabbitMQ resets instead of a FIN in some error paths; same as EOF here
            if not chunk:
                break
            self._buf += chunk
        out, self._buf = self._buf[:n], self._buf[n:]
        return out

    def read_until_eof(self, timeout: float = 10.0) -> bytes:
        """Everything the server sends until it closes the socket (then `eof` is set) or until
        the timeout."""
        self.sock.settimeout(timeout)
        data, self._buf = self._buf, b""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                break
            except ConnectionResetError:
                self.eof = self.reset = True
                break
            if not chunk:
                self.eof = True
                break
            data += chunk
        return data

    # -- frames --------------------------------------------------------------------------------

    def read_frame(self):
        """Return (channel, frame value), or None at EOF.  Heartbeats are returned too."""
        head = self.recv_exact(7)
        if len(head) < 7:
            return None
        size = struct.unpack(">I", head[3:7])[0]
        rest = self.recv_exact(size + 1)
        if len(rest) < size + 1:
            return None
        _, channel, value = frame.unmarshal(head + rest)
        return channel, value

    def read_raw_frame(self):
        """Return (frame type, channel, payload bytes) without decoding, or None at EOF."""
        head = self.recv_exact(7)
        if len(head) < 7:
            return None
        kind, channel, size = struct.unpack(">BHI", head)
        rest = self.recv_exact(size + 1)
        if len(rest) < size + 1:
            return None
        return kind, channel, rest[:-1]

    def read_method(self, kind=None):
        """Next non-heartbeat frame value; asserts its type when `kind` is given."""
        while True:
            got = self.read_frame()
            if got is None:
                return None
            channel, value = got
            if value.name == "Heartbeat":
                continue
            if kind is not None:
                assert isinstance(value, kind), f"expected {kind.__name__}, got {value!r}"
            return value

    # -- handshake -----------------------------------------------------------------------------

    def handshake(self, *, vhost: str | None = None, tune_ok: dict | None = None,
                  capabilities: dict | None = None, mechanism: str = "PLAIN"):
        """Header, start-ok (PLAIN with the URL's credentials, or ANONYMOUS with an empty
        response), tune-ok (echoing the server's tune unless overridden), open.
        Returns the reply to connection.open (OpenOk or Close)."""
        self.send_raw(frame.marshal(header.ProtocolHeader(), 0))
        self.start = self.read_method(commands.Connection.Start)
        caps = capabilities if capabilities is not None else {"authentication_failure_close": True}
        self.send(0, commands.Connection.StartOk(
            client_properties={"product": "compat-raw", "capabilities": caps},
            mechanism=mechanism,
            response=f"\0{self.user}\0{self.password}" if mechanism == "PLAIN" else ""))
        self.tune = self.read_method()
        if not isinstance(self.tune, commands.Connection.Tune):
            return self.tune
        t = dict(channel_max=self.tune.channel_max, frame_max=self.tune.frame_max, heartbeat=0)
        t.update(tune_ok or {})
        self.send(0, commands.Connection.TuneOk(**t))
        self.send(0, commands.Connection.Open(virtual_host=vhost if vhost is not None else self.vhost))
        return self.read_method()

    def open_channel(self, channel: int = 1) -> None:
        self.send(channel, commands.Channel.Open())
        self.read_method(commands.Channel.OpenOk)

    def publish(self, channel: int, exchange: str, routing_key: str, body_bytes: bytes, *,
                mandatory: bool = False, immediate: bool = False, properties=None) -> None:
        """basic.publish + content header + one body frame (bodies here are small)."""
        from pamqp import body as _body, header as _header
        self.send(channel, commands.Basic.Publish(exchange=exchange, routing_key=routing_key,
                                                  mandatory=mandatory, immediate=immediate))
        self.send(channel, _header.ContentHeader(0, len(body_bytes),
                                                 properties or commands.Basic.Properties()))
        if body_bytes:
            self.send(channel, _body.ContentBody(body_bytes))

