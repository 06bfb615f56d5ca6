"""The sans-IO AMQP 0-9-1 server connection (like h11): bytes in -> events, calls -> bytes out.

Called by the trio shell (`amqp_broker/server/`):

    conn = ServerConnection(config)
    loop:  conn.feed(await stream.receive_some())    # b"" means the peer closed the socket
           for event in conn.next_events(): ...        # answer with accept_login() etc.
           await stream.send_all(conn.data_to_send())
           if conn.closed: sleep(conn.linger); discard input for conn.drain s; close the socket
    timer: conn.tick(trio.current_time())              # about once a second

Contract:
- `feed` never raises on bad input. Protocol errors become a connection.close (or, before the
  client has sent start-ok and been answered, a silent close) plus a `ConnectionClosed` event.
- `ConnectionClosed` is emitted exactly once, when the connection stops carrying traffic: the
  server should then drop its channels and consumers. `closed` becomes true when the socket
  should be closed (after our close got its close-ok, at once for a client close, or after a
  timeout counted by `tick`); `linger` is how long to wait first (RabbitMQ's 3 s silent-close
  delay against pre-auth floods and after frame errors). After a client's connection.close,
  `drain` says how long to keep reading (and discarding) what the client still sends, so that
  frames it queued behind its close do not meet a reset socket (as RabbitMQ: until the client
  closes, at most the heartbeat interval capped at 30 s).
- While a LoginRequest or OpenRequest is unanswered, input is buffered and not parsed.
  accept_login()/accept_open() parse what was buffered at once, so they may produce new
  events: call next_events() again after answering (loop until it returns []).
- Output to a channel that is not open (or is closing) is dropped, so the server never has to
  race a client-initiated channel.close.
- The heartbeat used is the one the client put in tune-ok (the client already applied the
  "0 means take the other side's, else the smaller" rule).

No IO, no trio, no clock reads here.
"""

from __future__ import annotations

import struct
import traceback
from typing import Callable

from pamqp import commands

from amqp_broker.core.erlterm import Atom, format_after

from . import fastpath as _fp
from .channel import EXPECT_BODY, EXPECT_HEADER, EXPECT_METHOD, Channel
from .config import ProtocolConfig
from .events import (
    Ack, Acks, ChannelClosed, ChannelCloseRequested, ChannelFailed, ChannelOpened, ConnectionClosed,
    ConnectionCloseRequested, Event, MethodReceived, Nack, Reject,
)
from .handshake import Handshake
from .liveness import SILENT_CLOSE_DELAY as _SILENT_CLOSE_DELAY
from .liveness import Liveness
from .methods import SERVER_ONLY, decode_method, encode_method, method_id
from .replies import (
    CHANNEL_ERROR, COMMAND_INVALID, FRAME_ERROR, INTERNAL_ERROR, NOT_ALLOWED, ChannelError,
    ProtocolError, UNEXPECTED_FRAME,
)
from .states import (
    AWAIT_HEADER, CLOSED, CLOSING, OPEN, PAUSED_STATES, SILENT_STATES,
)

__all__ = ["ServerConnection"]

_FRAME_HDR = struct.Struct(">BHI")
_I = struct.Struct(">I")
_OPEN_OK = struct.Struct(">BHIIIB")
_CHANNEL_OPEN = commands.Channel.Open.index
_CHANNEL_CLOSE = commands.Channel.Close.index
_CHANNEL_CLOSE_OK = commands.Channel.CloseOk.index
_CONNECTION_CLASS = 10
_DRAIN_MAX = 30  # seconds of input discarded after a client close, at most (RabbitMQ)


def _frame_rest(buf: bytearray) -> int:
    """How many bytes the frame at the start of `buf` still lacks (0 if its header is not
    whole yet)."""
    if len(buf) < 7:
        return 0
    return 8 + _I.unpack_from(buf, 3)[0] - len(buf)


class ServerConnection(Handshake, Liveness):
    """One AMQP connection, server side. See the module docstring for the calling contract."""

    def __init__(self, config: ProtocolConfig) -> None:
        super().__init__(config)
        self._buf = bytearray()
        self._channels: dict[int, Channel] = {}
        # Asked before each channel.open-ok: a text refuses it (530, closing the connection).
        self.channel_guard: Callable[[], str | None] | None = None
        self._ended = False  # ConnectionClosed emitted
        self._bug = ""  # traceback of an exception caught in feed(), for ConnectionClosed
        self._init_liveness()
        self.linger = 0.0
        self.drain = 0.0

    # -- input ---------------------------------------------------------------------------------
    def feed(self, data: bytes) -> None:
        """Consume bytes read from the socket; b"" means end of file."""
        if self.state == CLOSED:
            return
        if not data:
            self._finish("connection closed by peer")
            self._set_closed(0.0)
            return
        self._recv_flag = True
        if self.state != OPEN and self.state != CLOSING:  # the handshake: small, rare reads
            self._buf += data
            self._process()
            return
        buf = self._buf
        if buf:
            # Top up the frame left incomplete by the last read, handle it, then read the rest
            # of `data` in place: a read of large bodies is not copied whole into the buffer.
            rest = _frame_rest(buf)
            if not 0 < rest < len(data):
                buf += data
                self._process()
                return
            view = memoryview(data)
            buf += view[:rest]
            self._process()
            if self._buf or self.state in PAUSED_STATES:  # CLOSED among them
                if self.state != CLOSED:
                    self._buf += view[rest:]
                return
            data = view[rest:]
        self._buf = data  # parsed in place; `_process` keeps a copy of the unparsed tail
        self._process()

    def next_events(self) -> list[Event]:
        """Drain and return the events produced so far."""
        events, self._events = self._events, []
        return events

    def data_to_send(self) -> bytes:
        """Drain and return the bytes to write (b"" if none)."""
        return b"".join(self.take_output())

    def take_output(self) -> list:
        """Drain and return the output as pieces to write in order (a vectored write; large
        bodies are among them uncopied); [] if none."""
        if not self._out:
            return []
        self._sent_flag = True
        return self._out.take()

    def output_size(self) -> int:
        """Bytes queued and not yet taken (the shell bounds this)."""
        return len(self._out)

    def output_mark(self) -> tuple[int, int]:
        """Where the output ends now (see `take_output_since`)."""
        return self._out.mark()

    def take_output_since(self, mark: tuple[int, int]) -> bytes:
        """Take back the bytes queued after `mark` (a reply that must wait for something,
        e.g. a cluster-wide commit); `put_output` queues them again."""
        return self._out.take_since(mark)

    def put_output(self, data: bytes) -> None:
        self._out.buf += data

    @property
    def closed(self) -> bool:
        """True once the socket should be closed (after flushing data_to_send())."""
        return self.state == CLOSED

    # -- output --------------------------------------------------------------------------------
    def _writable(self, channel: int) -> bool:
        if self.state != OPEN:
            return False
        ch = self._channels.get(channel)
        return ch is not None and not ch.closing

    def send_method(self, channel: int, method) -> None:
        """Send any pamqp method object on `channel` (generic, slow path).

        Raises ValueError/TypeError (from pamqp) if the method's arguments are invalid.
        A Channel.Close or Connection.Close is routed to close_channel / close_connection so
        the close handshake state is kept.
        """
        if isinstance(method, commands.Channel.Close):
            self.close_channel(channel, method.reply_code, method.reply_text, method.class_id,
                               method.method_id)
        elif isinstance(method, commands.Connection.Close):
            self.close_connection(method.reply_code, method.reply_text, method.class_id,
                                  method.method_id)
        elif channel == 0 and self.state == OPEN or self._writable(channel):
            self._out.buf += encode_method(channel, method)

    def send_declare_ok(self, channel: int, queue: str, message_count: int,
                        consumer_count: int) -> None:
        """queue.declare-ok without pamqp: pamqp's Queue.DeclareOk refuses names outside
        [a-zA-Z0-9-_.:@#,/+ ], while RabbitMQ allows any UTF-8 name up to 255 bytes."""
        if self._writable(channel):
            _fp.write_declare_ok(self._out.buf, channel, queue, message_count, consumer_count)

    def send_deliver(self, channel: int, consumer_tag: str, delivery_tag: int,
                     redelivered: bool, exchange: str, routing_key: str,
                     properties: bytes, body: bytes) -> None:
        """basic.deliver + content header + body frames (struct fast path)."""
        if self._writable(channel):
            _fp.write_delivery(self._out, channel, consumer_tag, delivery_tag, redelivered,
                               exchange, routing_key, properties, body, self._max_body)

    def send_get_ok(self, channel: int, delivery_tag: int, redelivered: bool, exchange: str,
                    routing_key: str, message_count: int, properties: bytes,
                    body: bytes) -> None:
        """basic.get-ok + content (struct fast path)."""
        if self._writable(channel):
            _fp.write_get_ok(self._out.buf, channel, delivery_tag, redelivered, exchange,
                             routing_key, message_count)
            _fp.write_content(self._out, channel, properties, body, self._max_body)

    def send_return(self, channel: int, reply_code: int, reply_text: str, exchange: str,
                    routing_key: str, properties: bytes, body: bytes) -> None:
        """basic.return + content (struct fast path)."""
        if self._writable(channel):
            _fp.write_return(self._out.buf, channel, reply_code, _clip(reply_text), exchange,
                             routing_key)
            _fp.write_content(self._out, channel, properties, body, self._max_body)

    def send_confirm(self, channel: int, delivery_tag: int, multiple: bool, ack: bool) -> None:
        """Publisher confirm: basic.ack (ack=True) or basic.nack from the server."""
        if self._writable(channel):
            _fp.write_confirm(self._out.buf, channel, delivery_tag, multiple, ack)

    def close_channel(self, channel: int, reply_code: int, reply_text: str,
                      class_id: int = 0, method_id: int = 0) -> None:
        """Server-initiated channel.close. Until close-ok arrives, everything else on that
        channel is discarded; then ChannelClosed is emitted."""
        if not self._writable(channel):
            return
        self._out.buf += encode_method(channel, commands.Channel.Close(
            reply_code, _clip(reply_text), class_id, method_id))
        ch = self._channels[channel]
        ch.closing = True
        ch.expect = EXPECT_METHOD

    def close_connection(self, reply_code: int, reply_text: str,
                         class_id: int = 0, method_id: int = 0) -> None:
        """Server-initiated connection.close; afterwards only close-ok is accepted.
        Emits ConnectionClosed (once) like every other way a connection ends."""
        if self.state in (CLOSING, CLOSED):
            return
        if self.state in SILENT_STATES:
            self._silent_close(f"{reply_code} {reply_text}", 0.0)
            return
        self._send_close(reply_code, reply_text, class_id, method_id)

    # -- ending --------------------------------------------------------------------------------
    def _finish(self, reason: str) -> None:
        if not self._ended:
            self._ended = True
            self._events.append(ConnectionClosed(reason, self._bug))

    def _set_closed(self, linger: float) -> None:
        self.state = CLOSED
        self.linger = linger
        # A new buffer rather than clear(): the frame loop may hold a memoryview of the old one
        # (clear() would raise BufferError there); it stops once the state is CLOSED.
        self._buf = bytearray()
        self._channels.clear()

    def _silent_close(self, reason: str, linger: float = _SILENT_CLOSE_DELAY) -> None:
        self._finish(reason)
        self._set_closed(linger)

    def _send_close(self, code: int, text: str, class_id: int = 0, method_id: int = 0) -> None:
        self._out.buf += encode_method(0, commands.Connection.Close(
            code, _clip(text), class_id, method_id))
        self.state = CLOSING
        self._channels.clear()
        self._finish(f"{code} {text}")

    def _fail(self, err: ProtocolError) -> None:
        """Turn a protocol error into the close RabbitMQ would do in the current state."""
        if self.state == CLOSED:
            return
        if self.state == CLOSING:
            # Bad framing while waiting for close-ok: stop reading (also ends _process's loop).
            self._set_closed(_SILENT_CLOSE_DELAY)
            return
        if self.state in SILENT_STATES:
            self._silent_close(err.text)
            return
        self._send_close(err.code, err.text, err.class_id, err.method_id)
        if err.code == FRAME_ERROR:
            # The byte stream can no longer be trusted: do not wait for close-ok.
            self._set_closed(_SILENT_CLOSE_DELAY)

    def _fail_channel(self, err: ChannelError) -> None:
        """A soft error on one channel: close it; the server drops its state at ChannelFailed."""
        self.close_channel(err.channel, err.code, err.text, err.class_id, err.method_id)
        self._events.append(ChannelFailed(err.channel, err.code, err.text, err.class_id,
                                          err.method_id))

    # -- frame loop ----------------------------------------------------------------------------
    def _process(self) -> None:
        if self.state == AWAIT_HEADER and not self._on_protocol_header():
            return
        self._pos = 0
        while True:
            try:
                self._parse()
                break
            except ChannelError as err:
                self._fail_channel(err)
            except ProtocolError as err:
                self._fail(err)
            except Exception as err:  # never let a bug in a handler escape feed()
                self._bug = traceback.format_exc()  # reported in ConnectionClosed.bug
                self._fail(ProtocolError(INTERNAL_ERROR, f"{type(err).__name__}: {err}"))
            if self.state == CLOSED:
                break
        buf = self._buf
        if self.state == CLOSED:
            self._buf = bytearray()
        elif type(buf) is bytearray:
            del buf[: self._pos]
        else:  # `feed`'s input, parsed in place
            self._buf = bytearray(memoryview(buf)[self._pos:])

    def _parse(self) -> None:
        """Handle every whole frame in the buffer from self._pos; stops when paused.

        The size is checked on the 7-byte header, before waiting for the payload, so a huge
        declared size is refused without buffering it. The loop itself handles the per-message
        frames (publish, header, body, ack) on an open channel; everything else goes through
        `_on_frame`. Cost: ~1 us per ack, ~3 us per publish (3 frames) on an idle core.
        """
        buf = self._buf
        n = len(buf)
        pos = self._pos
        view = memoryview(buf)
        channels = self._channels  # empty unless OPEN (cleared when closing)
        events = self._events
        limit = self._frame_limit
        max_size = self._config.max_message_size
        try:
            while self.state not in PAUSED_STATES and n - pos >= 7:
                ftype, number, size = _FRAME_HDR.unpack_from(buf, pos)
                if size > limit:  # judged before the payload is read: no octets to show
                    raise ProtocolError(FRAME_ERROR, _frame_text(
                        ftype, b"", (Atom("frame_too_large"), size, limit - 8)))
                start = pos + 7
                end = start + size
                if end >= n:
                    break
                if buf[end] != 0xCE:
                    raise ProtocolError(FRAME_ERROR, _frame_text(
                        ftype, bytes(view[start:end]), (Atom("invalid_frame_end_marker"), buf[end])))
                pos = self._pos = end + 1
                ch = channels.get(number)
                if ch is not None and not ch.closing:
                    expect = ch.expect
                    if ftype == 3 and expect == EXPECT_BODY:
                        publish = ch.on_body(bytes(view[start:end]))
                        if publish is not None:
                            events.append(publish)
                        continue
                    if ftype == 1 and expect == EXPECT_METHOD and size >= 9:
                        mid = _I.unpack_from(buf, start)[0]
                        if mid == _fp.ACK:
                            try:
                                tag, multiple = _fp.decode_ack(buf, start, end)
                            except ValueError:
                                pass  # the slow path below reports the error
                            else:
                                self._add_ack(number, tag, multiple)
                                continue
                        if mid == _fp.PUBLISH:
                            try:
                                ch.start_publish(_fp.decode_publish(bytes(view[start:end])))
                                continue
                            except (ValueError, UnicodeDecodeError):
                                pass  # the slow path below reports the error
                    if ftype == 2 and expect == EXPECT_HEADER:
                        publish = ch.on_header(bytes(view[start:end]), max_size)
                        if publish is not None:
                            events.append(publish)
                        continue
                self._on_frame(ftype, number, bytes(view[start:end]))
        finally:
            view.release()

    def _add_ack(self, channel: int, tag: int, multiple: bool) -> None:
        """A single ack joins the `Acks` of its channel when that is the newest event."""
        events = self._events
        if multiple:
            events.append(Ack(channel, tag, True))
            return
        last = events[-1] if events else None
        if type(last) is Acks and last.channel == channel:
            last.delivery_tags.append(tag)
        else:
            events.append(Acks(channel, [tag]))

    def _on_frame(self, ftype: int, channel: int, payload: bytes) -> None:
        if self.state == CLOSING:
            self._on_frame_closing(ftype, channel, payload)
        elif ftype == 1:
            if channel == 0:
                self._on_connection_method(method_id(payload), payload)
            else:
                self._on_channel_method(channel, payload)
        elif ftype == 2 or ftype == 3:
            self._on_content(ftype, channel, payload)
        elif ftype == 8 and not payload:
            if channel != 0:
                raise ProtocolError(UNEXPECTED_FRAME, _frame_text(8, payload))
        else:  # an unknown type, or a heartbeat with a payload (RabbitMQ cannot parse either)
            raise ProtocolError(FRAME_ERROR, _frame_text(ftype, payload, Atom("unknown_frame")))

    def _on_frame_closing(self, ftype: int, channel: int, payload: bytes) -> None:
        # After our connection.close only close-ok (or a crossing close) matters.
        if ftype != 1 or channel != 0 or len(payload) < 4:
            return
        mid = method_id(payload)
        if mid == commands.Connection.CloseOk.index:
            self._set_closed(0.0)
        elif mid == commands.Connection.Close.index:
            self._out.buf += encode_method(0, commands.Connection.CloseOk())
            self._set_closed(0.0)

    # -- channels ------------------------------------------------------------------------------
    def _on_channel_method(self, number: int, payload: bytes) -> None:
        mid = method_id(payload)
        ch = self._channels.get(number)
        if ch is not None and not ch.closing and ch.expect == EXPECT_METHOD:
            # Hot path first: publish, ack, nack, reject on an open channel.
            try:
                if mid == _fp.PUBLISH:
                    ch.start_publish(_fp.decode_publish(payload))
                    return
                if mid == _fp.ACK:
                    self._add_ack(number, *_fp.decode_ack(payload))
                    return
                if mid == _fp.NACK:
                    self._events.append(Nack(number, *_fp.decode_nack(payload)))
                    return
                if mid == _fp.REJECT:
                    self._events.append(Reject(number, *_fp.decode_reject(payload)))
                    return
            except (ValueError, UnicodeDecodeError):
                decode_method(mid, payload)  # raises the proper 540/501 error
                raise ProtocolError(FRAME_ERROR, "cannot decode arguments") from None
        if self.state != OPEN:
            raise ProtocolError(UNEXPECTED_FRAME, (
                f"frame on channel {number} before the connection was opened"))
        if ch is not None:
            if ch.closing:  # only close-ok (or a crossing close) matters; no decoding
                self._on_closing_channel(ch, mid)
                return
            if ch.expect != EXPECT_METHOD:
                raise ch.unexpected_method()
        method = decode_method(mid, payload)
        if ch is None:
            self._on_unopened(number, mid, method)
        else:
            self._dispatch(ch, mid, method)

    def _on_unopened(self, number: int, mid: int, method) -> None:
        if mid == _CHANNEL_OPEN:
            # As RabbitMQ (rabbit_reader): any number 1..65535 may be used; channel_max limits
            # how many are open at once. Its text, with class and method ids 0/0.
            limit = self.channel_max or 65535
            if len(self._channels) >= limit:
                raise ProtocolError(NOT_ALLOWED, (
                    f"number of channels opened ({len(self._channels)}) has reached the "
                    f"negotiated channel_max ({limit})"))
            refusal = self.channel_guard() if self.channel_guard is not None else None
            if refusal:  # e.g. the user's max-channels limit
                raise ProtocolError(NOT_ALLOWED, refusal)
            self._channels[number] = Channel(number)
            # RabbitMQ sends an empty channel-id longstr; pamqp insists on "0", so pack it here.
            self._out.buf += _OPEN_OK.pack(1, number, 8, 0x0014000B, 0, 0xCE)
            self._events.append(ChannelOpened(number))
        elif mid == _CHANNEL_CLOSE:
            self._out.buf += encode_method(number, commands.Channel.CloseOk())
        elif mid != _CHANNEL_CLOSE_OK:
            raise ProtocolError(CHANNEL_ERROR, "expected 'channel.open'", mid >> 16, mid & 0xFFFF)

    def _on_closing_channel(self, ch: Channel, mid: int) -> None:
        if mid == _CHANNEL_CLOSE_OK:
            del self._channels[ch.number]
            self._events.append(ChannelClosed(ch.number))
        elif mid == _CHANNEL_CLOSE:  # both sides closed at once
            self._out.buf += encode_method(ch.number, commands.Channel.CloseOk())

    def _dispatch(self, ch: Channel, mid: int, method) -> None:
        cls_id = mid >> 16
        if mid == _CHANNEL_CLOSE:
            del self._channels[ch.number]
            self._out.buf += encode_method(ch.number, commands.Channel.CloseOk())
            self._events.append(ChannelCloseRequested(
                ch.number, method.reply_code, method.reply_text, method.class_id,
                method.method_id))
        elif mid == _CHANNEL_OPEN:
            raise ProtocolError(CHANNEL_ERROR, "second 'channel.open' seen", 20, 10)
        elif mid == _CHANNEL_CLOSE_OK:
            pass  # we never sent channel.close on this channel; ignore like RabbitMQ
        elif cls_id == _CONNECTION_CLASS or mid in SERVER_ONLY:
            raise ProtocolError(COMMAND_INVALID, "unimplemented method", cls_id, mid & 0xFFFF)
        else:
            self._events.append(MethodReceived(ch.number, method))

    def _on_content(self, ftype: int, number: int, payload: bytes) -> None:
        if self.state != OPEN:
            raise ProtocolError(UNEXPECTED_FRAME,
                                "expected method frame, got non method frame instead")
        ch = self._channels.get(number)
        if ch is None:
            raise ProtocolError(CHANNEL_ERROR, "expected 'channel.open'")
        if ch.closing:
            return
        if ftype == 2:
            publish = ch.on_header(payload, self._config.max_message_size)
        else:
            publish = ch.on_body(payload)
        if publish is not None:
            self._events.append(publish)

    # -- connection.close from the client (called by Handshake when OPEN) ------------------------
    def _on_client_close(self, method) -> None:
        self._out.buf += encode_method(0, commands.Connection.CloseOk())
        self._events.append(ConnectionCloseRequested(
            method.reply_code, method.reply_text, method.class_id, method.method_id))
        self._finish("client closed the connection")
        self._set_closed(0.0)
        self.drain = float(min(self.heartbeat or _DRAIN_MAX, _DRAIN_MAX))


def _frame_text(ftype: int, payload: bytes, error: object = None) -> str:
    """RabbitMQ's detail for a bad frame (rabbit_reader): the type, the payload's octets (all
    of them up to 16, else the first 16) and the reason, laid out as Erlang's ~p does."""
    which = "all" if len(payload) <= 16 else "first 16"
    text = format_after(f"type {ftype}, {which} octets = ", payload[:16])
    return text if error is None else format_after(text + ": ", error)


def _clip(text: str) -> str:
    """Cut a reply text to the 255-byte shortstr limit without breaking a UTF-8 sequence."""
    raw = text.encode("utf-8")
    if len(raw) <= 255:
        return text
    return raw[:255].decode("utf-8", "ignore")
