"""A deliberately lean AMQP 0-9-1 client for the load generator.

pika and aio-pika spend more CPU per message than a broker does, so a benchmark driven by them
measures the client. This client uses pamqp for the handshake and the rare methods, and hand-built
frames for the hot ones (publish, ack, deliver, confirm). It runs on plain blocking sockets, one per
process, and knows only what `bench/broker_bench.py` and `bench/cluster_bench.py` need.
"""
from __future__ import annotations

import socket
import struct
import urllib.parse

from pamqp import commands, frame as pframe

FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT = 1, 2, 3, 8
FRAME_END = b"\xce"
_HDR = struct.Struct(">BHI")
_METHOD_IDS = struct.Struct(">HH")


def _shortstr(value: str) -> bytes:
    raw = value.encode()
    return bytes((len(raw),)) + raw


class WireClient:
    """One connection, one channel (1). Blocking; not thread-safe."""

    def __init__(self, url: str, frame_max: int = 131072):
        parts = urllib.parse.urlparse(url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 5672
        self.user = urllib.parse.unquote(parts.username or "guest")
        self.password = urllib.parse.unquote(parts.password or "guest")
        vhost = urllib.parse.unquote(parts.path[1:]) if parts.path not in ("", "/") else "/"
        self.vhost = vhost
        self.sock = socket.create_connection((self.host, self.port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._buf = bytearray()
        self.frame_max = frame_max
        self._handshake()

    # -- plumbing ---------------------------------------------------------------------------
    def _send_method(self, channel: int, method) -> None:
        self.sock.sendall(pframe.marshal(method, channel))

    def _fill(self) -> bool:
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("broker closed the connection")
        self._buf += chunk
        return True

    def read_frame(self) -> tuple[int, int, memoryview | bytes]:
        """Return (type, channel, payload) of the next frame, blocking until it is whole."""
        while True:
            if len(self._buf) >= 7:
                ftype, channel, size = _HDR.unpack_from(self._buf, 0)
                end = 7 + size + 1
                if len(self._buf) >= end:
                    payload = bytes(self._buf[7:7 + size])
                    del self._buf[:end]
                    return ftype, channel, payload
            self._fill()

    def frames_available(self) -> bool:
        if len(self._buf) < 7:
            return False
        size = _HDR.unpack_from(self._buf, 0)[2]
        return len(self._buf) >= 7 + size + 1

    def recv_more(self) -> None:
        self._fill()

    def _expect(self, cls):
        while True:
            ftype, channel, payload = self.read_frame()
            if ftype == FRAME_HEARTBEAT:
                continue
            if ftype != FRAME_METHOD:
                continue
            raw = _HDR.pack(ftype, channel, len(payload)) + payload + FRAME_END
            _, _, method = pframe.unmarshal(raw)
            if isinstance(method, (commands.Connection.Close, commands.Channel.Close)):
                raise RuntimeError(f"broker closed: {method.reply_code} {method.reply_text}")
            if isinstance(method, cls):
                return method

    def _handshake(self) -> None:
        self.sock.sendall(b"AMQP\x00\x00\x09\x01")
        self._expect(commands.Connection.Start)
        response = f"\x00{self.user}\x00{self.password}"
        self._send_method(0, commands.Connection.StartOk(
            client_properties={"product": "bench", "capabilities": {"publisher_confirms": True}},
            mechanism="PLAIN", response=response, locale="en_US"))
        tune = self._expect(commands.Connection.Tune)
        self.frame_max = min(self.frame_max, tune.frame_max or self.frame_max)
        self._send_method(0, commands.Connection.TuneOk(
            channel_max=tune.channel_max, frame_max=self.frame_max, heartbeat=0))
        self._send_method(0, commands.Connection.Open(virtual_host=self.vhost))
        self._expect(commands.Connection.OpenOk)
        self._send_method(1, commands.Channel.Open())
        self._expect(commands.Channel.OpenOk)

    # -- rare methods -------------------------------------------------------------------------
    def queue_declare(self, name: str, durable: bool = True, arguments: dict | None = None,
                      passive: bool = False):
        """The DeclareOk (its message_count, consumer_count)."""
        self._send_method(1, commands.Queue.Declare(queue=name, durable=durable, passive=passive,
                                                    arguments=arguments or {}))
        return self._expect(commands.Queue.DeclareOk)

    def queue_delete(self, name: str) -> None:
        self._send_method(1, commands.Queue.Delete(queue=name))
        self._expect(commands.Queue.DeleteOk)

    def queue_purge(self, name: str) -> None:
        self._send_method(1, commands.Queue.Purge(queue=name))
        self._expect(commands.Queue.PurgeOk)

    def confirm_select(self) -> None:
        self._send_method(1, commands.Confirm.Select())
        self._expect(commands.Confirm.SelectOk)

    def qos(self, prefetch: int) -> None:
        self._send_method(1, commands.Basic.Qos(prefetch_count=prefetch))
        self._expect(commands.Basic.QosOk)

    def consume(self, queue: str, tag: str = "bench") -> None:
        self._send_method(1, commands.Basic.Consume(queue=queue, consumer_tag=tag))
        self._expect(commands.Basic.ConsumeOk)

    def close(self) -> None:
        try:
            self._send_method(0, commands.Connection.Close(reply_code=200, reply_text="bye", class_id=0, method_id=0))
            self._expect(commands.Connection.CloseOk)
        except (OSError, RuntimeError, ConnectionError):
            pass
        self.sock.close()

    # -- hot path -----------------------------------------------------------------------------
    def publish_frames(self, exchange: str, routing_key: str, body: bytes,
                       persistent: bool = True) -> bytes:
        """Bytes of one basic.publish (method + header + body frames) on channel 1."""
        method = (_METHOD_IDS.pack(60, 40) + b"\x00\x00" + _shortstr(exchange)
                  + _shortstr(routing_key) + b"\x00")
        # property flags: delivery-mode only (bit 12)
        props = struct.pack(">HB", 0x1000, 2 if persistent else 1)
        header = struct.pack(">HHQ", 60, 0, len(body)) + props
        out = [_HDR.pack(FRAME_METHOD, 1, len(method)), method, FRAME_END,
               _HDR.pack(FRAME_HEADER, 1, len(header)), header, FRAME_END]
        chunk = self.frame_max - 8
        for start in range(0, len(body), chunk):
            part = body[start:start + chunk]
            out += [_HDR.pack(FRAME_BODY, 1, len(part)), part, FRAME_END]
        return b"".join(out)

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    @staticmethod
    def ack_frame(delivery_tag: int, multiple: bool = False) -> bytes:
        payload = struct.pack(">HHQB", 60, 80, delivery_tag, 1 if multiple else 0)
        return _HDR.pack(FRAME_METHOD, 1, len(payload)) + payload + FRAME_END


def parse_basic_ack(payload: bytes) -> tuple[int, bool]:
    tag, bits = struct.unpack_from(">QB", payload, 4)
    return tag, bool(bits & 1)


def parse_deliver_tag(payload: bytes) -> int:
    """Delivery tag of a basic.deliver payload (after the consumer tag shortstr)."""
    ctag_len = payload[4]
    return struct.unpack_from(">Q", payload, 5 + ctag_len)[0]


def method_ids(payload: bytes) -> tuple[int, int]:
    return _METHOD_IDS.unpack_from(payload, 0)


def describe_close(payload: bytes) -> str:
    raw = _HDR.pack(FRAME_METHOD, 0, len(payload)) + payload + FRAME_END
    _, _, method = pframe.unmarshal(raw)
    return f"{type(method).__name__}: {getattr(method, 'reply_code', '')} {getattr(method, 'reply_text', '')}"


__all__ = ["WireClient", "parse_basic_ack", "parse_deliver_tag", "method_ids", "describe_close",
           "FRAME_METHOD", "FRAME_HEADER", "FRAME_BODY", "FRAME_HEARTBEAT"]
