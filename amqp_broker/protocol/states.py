"""Connection states of `ServerConnection.state` (plain strings, cheap to compare and log)."""

from __future__ import annotations

__all__ = [
    "AWAIT_HEADER", "AWAIT_START_OK", "AWAIT_LOGIN", "AWAIT_TUNE_OK", "AWAIT_OPEN",
    "AWAIT_OPEN_DECISION", "OPEN", "CLOSING", "CLOSED", "PRE_TUNE_STATES", "PAUSED_STATES",
]

AWAIT_HEADER = "await_header"  # nothing received yet
AWAIT_START_OK = "await_start_ok"  # connection.start sent
AWAIT_LOGIN = "await_login"  # LoginRequest emitted, waiting for accept_login/refuse_login
AWAIT_TUNE_OK = "await_tune_ok"  # connection.tune sent
AWAIT_OPEN = "await_open"  # tune-ok received
AWAIT_OPEN_DECISION = "await_open_decision"  # OpenRequest emitted, waiting for the server
OPEN = "open"  # open-ok sent; channels may be used
CLOSING = "closing"  # we sent connection.close; waiting for close-ok
CLOSED = "closed"  # the socket should be closed

# Before the client has been told to tune, errors are answered by a silent close (RabbitMQ
# does not trust unauthenticated peers with a close frame).
PRE_TUNE_STATES = frozenset({AWAIT_HEADER, AWAIT_START_OK, AWAIT_LOGIN})
# Input is buffered but not parsed while the server decides.
PAUSED_STATES = frozenset({AWAIT_LOGIN, AWAIT_OPEN_DECISION, CLOSED})
