"""Connection states of `ServerConnection.state` (plain strings, cheap to compare and log)."""

from __future__ import annotations

__all__ = [
    "AWAIT_HEADER", "AWAIT_START_OK", "AWAIT_LOGIN", "AWAIT_TUNE_OK", "AWAIT_OPEN",
    "AWAIT_OPEN_DECISION", "OPEN", "CLOSING", "CLOSED", "SILENT_STATES", "PAUSED_STATES",
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

# Until connection.open, errors are answered by a silent close, as RabbitMQ's reader does
# outside the running state (it does not trust a peer that has not finished the handshake with
# a close frame): a bad tune-ok too. The exceptions send a close themselves: a refused login
# with the authentication_failure_close capability, and a refused connection.open (530).
SILENT_STATES = frozenset({AWAIT_HEADER, AWAIT_START_OK, AWAIT_LOGIN, AWAIT_TUNE_OK, AWAIT_OPEN})
# Input is buffered but not parsed while the server decides.
PAUSED_STATES = frozenset({AWAIT_LOGIN, AWAIT_OPEN_DECISION, CLOSED})
