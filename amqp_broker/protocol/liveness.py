"""Time-driven part of `ServerConnection`: heartbeats, handshake timeout, close-ok timeout.

A base class of `ServerConnection` (connection.py). The connection never reads a clock: the
server shell calls `tick(now)` every `tick_interval` seconds with its monotonic time (once a
second, or every heartbeat/2 seconds once a shorter heartbeat is tuned; the `Tuned` event says
when to switch). `feed()` and `data_to_send()` only raise flags; the next tick turns them into
timestamps, so liveness is measured with tick resolution, which is all heartbeats need. Bytes
flagged at a tick are dated to the previous tick (they left at some point in between): that
dates our own heartbeat exactly, and never delays the next one.

Rules: send a heartbeat frame when nothing was sent for heartbeat/2 seconds (so every
heartbeat/2 on an idle connection, as RabbitMQ does); time out after 2 heartbeat intervals
without any inbound byte (RabbitMQ closes between 2x and 3x); the heartbeat is the value from
tune-ok, and 0 disables both directions.
"""

from __future__ import annotations

from .events import HeartbeatTimeout
from .states import CLOSED, CLOSING, OPEN

__all__ = ["Liveness", "SILENT_CLOSE_DELAY"]

SILENT_CLOSE_DELAY = 3.0  # RabbitMQ's ?SILENT_CLOSE_DELAY, seconds
_HEARTBEAT_FRAME = b"\x08\x00\x00\x00\x00\x00\x00\xce"


class Liveness:
    """Mixin; expects state, heartbeat, _config, _events, _out, _opened, _tuned and the
    _silent_close / _set_closed methods of ServerConnection."""

    def _init_liveness(self) -> None:
        self._recv_flag = False  # bytes arrived since the last tick
        self._sent_flag = False  # bytes left since the last tick
        self._last_recv = 0.0
        self._last_send = 0.0
        self._last_tick = 0.0
        self._born: float | None = None  # time of the first tick
        self._closing_since: float | None = None
        self._monitor_paused = False

    def pause_monitor(self) -> None:
        """Stop counting missed heartbeats: the server stopped reading on purpose (a blocked
        publisher during a resource alarm), as RabbitMQ pauses its heartbeat monitor."""
        self._monitor_paused = True

    def resume_monitor(self) -> None:
        """Count again, from now: the time spent paused is not held against the client."""
        self._monitor_paused = False
        self._recv_flag = True

    @property
    def tick_interval(self) -> float:
        """How often the server should call tick(): 1 s, or heartbeat/2 if that is shorter."""
        if self._tuned and self.heartbeat:
            return min(1.0, self.heartbeat / 2)
        return 1.0

    def tick(self, now: float) -> None:
        """Heartbeat, handshake-timeout and close-ok-timeout bookkeeping; `now` is monotonic
        seconds from the caller's clock."""
        if self.state == CLOSED:
            return
        if self._born is None:
            self._born = self._last_recv = self._last_send = self._last_tick = now
        if self._recv_flag or self._monitor_paused:
            self._recv_flag, self._last_recv = False, now
        if self._sent_flag:
            self._sent_flag = False
            self._last_send = max(self._last_send, self._last_tick)
        self._last_tick = now
        if self.state == CLOSING:
            self._tick_closing(now)
        elif not self._opened and self.state != OPEN:
            if now - self._born >= self._config.handshake_timeout:
                self._silent_close("handshake timeout", 0.0)
        if self.heartbeat and self._tuned and self.state != CLOSED:
            self._tick_heartbeat(now)

    def _tick_heartbeat(self, now: float) -> None:
        if now - self._last_recv >= 2 * self.heartbeat:
            self._events.append(HeartbeatTimeout())
            self._silent_close("missed heartbeats from client", 0.0)
            return
        if now - self._last_send >= self.heartbeat / 2:
            self._out.buf += _HEARTBEAT_FRAME
            self._last_send = now

    def _tick_closing(self, now: float) -> None:
        # Cap the wait for close-ok: 3 s before open, else min(heartbeat, 30 s).
        if self._closing_since is None:
            self._closing_since = now
            return
        wait = min(self.heartbeat or 30, 30) if self._opened else SILENT_CLOSE_DELAY
        if now - self._closing_since >= wait:
            self._set_closed(0.0)
