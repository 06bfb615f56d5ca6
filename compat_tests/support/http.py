"""An httpx client for a management API that behaves the same against both servers."""

from __future__ import annotations

import httpx


def management_client(base_url: str, auth: tuple[str, str]) -> httpx.Client:
    """A client that opens a new connection per request. RabbitMQ's HTTP server may close a
    kept-alive connection after refusing a request (401, 403) whose body it did not read; a client
    reusing that connection then sees "Server disconnected without sending a response"."""
    return httpx.Client(base_url=base_url, auth=auth, timeout=30, headers={"Connection": "close"})
