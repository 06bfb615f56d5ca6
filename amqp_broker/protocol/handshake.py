"""Connection-level part of `ServerConnection`: protocol header, start/start-ok, tune/tune-ok,
open, and the connection methods allowed on channel 0 once open.

A base class of `ServerConnection` (connection.py), split out to keep each file to one job.
It owns the negotiated values and validates tune-ok as RabbitMQ does
(rabbit_reader:validate_negotiated_integer_value): a value below the minimum (frame_max 4096)
other than 0, or above the server's (0 counts as above when the server's is not 0) closes the
socket after RabbitMQ's 3 s silent-close delay, without a connection.close (its reader does
not send one before connection.open). The 530 text is kept as the close reason.
"""

from __future__ import annotations

from pamqp import commands

from .config import ProtocolConfig
from .events import Event, LoginRequest, MethodReceived, OpenRequest, Tuned
from .methods import decode_method, encode_method
from .output import Output
from .replies import ACCESS_REFUSED, CHANNEL_ERROR, NOT_ALLOWED, ProtocolError, reply_text
from .sasl import MECHANISMS, parse_response
from .states import (
    AWAIT_HEADER, AWAIT_LOGIN, AWAIT_OPEN, AWAIT_OPEN_DECISION, AWAIT_START_OK, AWAIT_TUNE_OK,
    OPEN,
)

__all__ = ["Handshake", "PROTOCOL_HEADER", "FRAME_MIN_SIZE"]

PROTOCOL_HEADER = b"AMQP\x00\x00\x09\x01"
FRAME_MIN_SIZE = 4096  # smallest frame_max a client may ask for
_PRE_TUNE_FRAME_MAX = 8192  # frames are capped at this until tune-ok
_START_OK = commands.Connection.StartOk.index
_TUNE_OK = commands.Connection.TuneOk.index
_OPEN = commands.Connection.Open.index
_CLOSE = commands.Connection.Close.index
_CLOSE_OK = commands.Connection.CloseOk.index
_UPDATE_SECRET = commands.Connection.UpdateSecret.index
# RabbitMQ's names for the states, used in "unexpected method in connection state X".
_STATE_NAMES = {
    AWAIT_START_OK: "starting", AWAIT_LOGIN: "securing", AWAIT_TUNE_OK: "tuning",
    AWAIT_OPEN: "opening", AWAIT_OPEN_DECISION: "opening", OPEN: "running",
}


class Handshake:
    """Handshake state and negotiated values (public attributes are read by the server)."""

    def __init__(self, config: ProtocolConfig) -> None:
        self._config = config
        self._events: list[Event] = []
        self._out = Output()
        self.state = AWAIT_HEADER
        #: Negotiated values; the server's proposals until tune-ok arrives.
        self.channel_max = config.channel_max
        self.frame_max = config.frame_max
        self.heartbeat = config.heartbeat
        self.client_properties: dict = {}
        self.client_capabilities: dict = {}
        self.mechanism = ""
        self.username = ""
        self.virtual_host = ""
        self._frame_limit = _PRE_TUNE_FRAME_MAX  # largest payload accepted (8-byte fudge)
        self._max_body = config.frame_max - 8 if config.frame_max else 0
        self._opened = False
        self._tuned = False  # tune-ok accepted: heartbeats apply

    # -- answers from the server ---------------------------------------------------------------
    def accept_login(self) -> None:
        """Answer a LoginRequest positively: send connection.tune."""
        if self.state != AWAIT_LOGIN:
            return
        cfg = self._config
        self._out.buf += encode_method(0, commands.Connection.Tune(
            cfg.channel_max, cfg.frame_max, cfg.heartbeat))
        self.state = AWAIT_TUNE_OK
        self._process()

    def refuse_login(self) -> None:
        """Answer a LoginRequest negatively: 403 close if the client advertised
        authentication_failure_close, else a silent close (after RabbitMQ's 3 s delay)."""
        if self.state != AWAIT_LOGIN:
            return
        detail = (f"Login was refused using authentication mechanism {self.mechanism}. "
                  "For details see the broker logfile.")
        if self.client_capabilities.get("authentication_failure_close"):
            # RabbitMQ 3.10 sends class and method ids 0/0 here.
            self._send_close(ACCESS_REFUSED, reply_text(ACCESS_REFUSED, detail))
        else:
            self._silent_close(reply_text(ACCESS_REFUSED, detail))

    def accept_open(self) -> None:
        """Answer an OpenRequest positively: send connection.open-ok."""
        if self.state != AWAIT_OPEN_DECISION:
            return
        self._out.buf += encode_method(0, commands.Connection.OpenOk())
        self.state = OPEN
        self._opened = True
        self._process()

    def refuse_open(self, text: str) -> None:
        """Answer an OpenRequest negatively: connection.close 530 NOT_ALLOWED. `text` may be the
        detail ("vhost x not found") or the full text ("NOT_ALLOWED - vhost x not found")."""
        if self.state != AWAIT_OPEN_DECISION:
            return
        if not text.startswith("NOT_ALLOWED - "):
            text = reply_text(NOT_ALLOWED, text)
        self._send_close(NOT_ALLOWED, text, 10, 40)

    # -- input ---------------------------------------------------------------------------------
    def _on_protocol_header(self) -> bool:
        """Check the 8-byte protocol header; True once it has been accepted."""
        buf = self._buf
        head = bytes(buf[:8])
        if not PROTOCOL_HEADER.startswith(head[:4]) or (len(head) == 8 and head != PROTOCOL_HEADER):
            self._out.buf += PROTOCOL_HEADER
            self._silent_close("bad protocol header", 0.0)
            return False
        if len(head) < 8:
            return False
        del buf[:8]
        cfg = self._config
        self._out.buf += encode_method(0, commands.Connection.Start(
            0, 9, cfg.server_properties, cfg.mechanisms, cfg.locales))
        self.state = AWAIT_START_OK
        return True

    def _on_connection_method(self, mid: int, payload: bytes) -> None:
        state = self.state
        if state == OPEN and mid >> 16 != 10:
            raise ProtocolError(CHANNEL_ERROR, "unexpected method in connection state running",
                                mid >> 16, mid & 0xFFFF)
        method = decode_method(mid, payload)
        if state == AWAIT_START_OK and mid == _START_OK:
            self._on_start_ok(method)
        elif state == AWAIT_TUNE_OK and mid == _TUNE_OK:
            self._on_tune_ok(method)
        elif state == AWAIT_OPEN and mid == _OPEN:
            self.virtual_host = method.virtual_host
            self.state = AWAIT_OPEN_DECISION
            self._events.append(OpenRequest(method.virtual_host))
        elif mid == _CLOSE and state in (AWAIT_TUNE_OK, AWAIT_OPEN, OPEN):
            self._on_client_close(method)
        elif mid == _CLOSE_OK and state == OPEN:
            pass  # stray close-ok; nothing was closing
        elif mid == _UPDATE_SECRET and state == OPEN:
            self._events.append(MethodReceived(0, method))
        else:
            name = _STATE_NAMES.get(state, state)
            raise ProtocolError(CHANNEL_ERROR, f"unexpected method in connection state {name}",
                                mid >> 16, mid & 0xFFFF)

    def _on_start_ok(self, method) -> None:
        props = method.client_properties or {}
        self.client_properties = props
        caps = props.get("capabilities")
        self.client_capabilities = caps if isinstance(caps, dict) else {}
        mechanism = method.mechanism
        self.mechanism = mechanism
        offered = self._config.mechanisms.split()
        if mechanism not in MECHANISMS or mechanism not in offered:
            self._silent_close(f"unknown authentication mechanism {mechanism!r}")
            return
        response = method.response
        if isinstance(response, str):
            response = response.encode("utf-8")
        self.state = AWAIT_LOGIN
        try:
            username, password = parse_response(mechanism, response or b"")
        except Exception:  # malformed response: refused like a wrong password
            self.refuse_login()
            return
        self.username = username
        self._events.append(LoginRequest(mechanism, username, password, props))

    def _on_tune_ok(self, method) -> None:
        cfg = self._config
        _validate("channel_max", 0, cfg.channel_max, method.channel_max)
        _validate("frame_max", FRAME_MIN_SIZE, cfg.frame_max, method.frame_max)
        self.channel_max = method.channel_max
        self.frame_max = method.frame_max
        self.heartbeat = method.heartbeat
        self._frame_limit = method.frame_max or 0xFFFFFFFF
        self._max_body = method.frame_max - 8 if method.frame_max else 0
        self._tuned = True
        self.state = AWAIT_OPEN
        self._events.append(Tuned(method.heartbeat))

    # Provided by ServerConnection.
    def _process(self) -> None: raise NotImplementedError
    def _send_close(self, code: int, text: str, class_id: int = 0, method_id: int = 0) -> None:
        raise NotImplementedError
    def _silent_close(self, reason: str, linger: float = 3.0) -> None: raise NotImplementedError
    def _on_client_close(self, method) -> None: raise NotImplementedError


def _validate(field: str, minimum: int, server: int, client: int) -> None:
    if client != 0 and client < minimum:
        raise ProtocolError(NOT_ALLOWED, (
            f"negotiated {field} = {client} is lower than the minimum allowed value "
            f"({minimum})"), 10, 31)
    if server != 0 and (client == 0 or client > server):
        raise ProtocolError(NOT_ALLOWED, (
            f"negotiated {field} = {client} is higher than the maximum allowed value "
            f"({server})"), 10, 31)
