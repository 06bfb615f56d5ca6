"""Parsing of the SASL responses in connection.start-ok (PLAIN, AMQPLAIN and ANONYMOUS).

Called by connection.py when start-ok arrives. Checking the credentials is the server's job
(it receives a LoginRequest event); this module only extracts username and password.
"""

from __future__ import annotations

import struct

from pamqp import decode

__all__ = ["MECHANISMS", "parse_response"]

MECHANISMS = ("PLAIN", "AMQPLAIN", "ANONYMOUS")


def parse_response(mechanism: str, response: bytes) -> tuple[str, str]:
    """Return (username, password); ValueError if the response is malformed. ANONYMOUS
    carries no credentials (its optional trace is ignored): ("", ""), and the server logs
    in its configured anonymous user."""
    if mechanism == "PLAIN":
        return _plain(response)
    if mechanism == "AMQPLAIN":
        return _amqplain(response)
    if mechanism == "ANONYMOUS":
        return "", ""
    raise ValueError(f"unsupported mechanism {mechanism!r}")


def _plain(response: bytes) -> tuple[str, str]:
    # RFC 4616: [authzid] NUL authcid NUL passwd
    parts = response.split(b"\x00")
    if len(parts) != 3:
        raise ValueError("PLAIN response malformed")
    return parts[1].decode("utf-8"), parts[2].decode("utf-8")


def _amqplain(response: bytes) -> tuple[str, str]:
    # A field table without its 4-byte length prefix, with LOGIN and PASSWORD keys.
    _consumed, table = decode.field_table(struct.pack(">I", len(response)) + response)
    login, password = table.get("LOGIN"), table.get("PASSWORD")
    if isinstance(login, bytes):
        login = login.decode("utf-8")
    if isinstance(password, bytes):
        password = password.decode("utf-8")
    if not isinstance(login, str) or not isinstance(password, str):
        raise ValueError("AMQPLAIN response lacks LOGIN or PASSWORD")
    return login, password
