"""A small HTTP/1.1 server for ASGI apps on trio: h11 for the wire format, one task per
connection, keep-alive, request bodies streamed to the app as it asks for them.

Who calls it: `http.serve_management` (the management API) and `metrics.serve_metrics` (the
Prometheus endpoint); nothing else.

Why not hypercorn: hypercorn writes its status lines without a reason phrase
("HTTP/1.1 401 \\r\\n") and has no setting for one, while RabbitMQ (cowboy) sends
"HTTP/1.1 401 Unauthorized" and clients report or match that text. h11 writes whatever reason it
is given, so this server gives it the standard phrase of the status code.

With `tls` (an `amqp_broker.tls.ServerTls`) it serves HTTPS: the TLS handshake runs first
(within `IDLE_TIMEOUT`), on the context current at accept time, so reloaded certificates apply
to new connections. What it does not do (the management API does not need it): HTTP/2,
websockets, ASGI lifespan events. A connection idle for `IDLE_TIMEOUT` seconds between requests is closed; a
malformed request gets a 400 and the connection is closed; an app that fails before it started
its response gives a 500.
"""

from __future__ import annotations

import email.utils
import functools
import http
import logging
import urllib.parse
from typing import Any

import h11
import trio

__all__ = ["serve_http", "IDLE_TIMEOUT"]

IDLE_TIMEOUT = 60.0  # seconds a keep-alive connection may wait for its next request
_READ_SIZE = 65536
_DRAIN_LIMIT = 1 << 20  # unread request body bytes skipped to keep a connection open
_log = logging.getLogger(__name__)


def reason_phrase(status: int) -> bytes:
    """"Unauthorized" for 401; an unknown code gets an empty phrase, as the grammar allows."""
    try:
        return http.HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""


async def serve_http(app: Any, host: str, port: int, *, tls: Any = None,
                     task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Serve `app` on host:port (port 0 picks a free one) until cancelled, over TLS when `tls`
    is given; reports the bound port once it listens."""
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            functools.partial(trio.serve_tcp, functools.partial(_serve_connection, app, tls),
                              port, host=host or None))
        task_status.started(listeners[0].socket.getsockname()[1])


class _Exchange:
    """One HTTP connection: reads requests, runs the app for each, writes its responses."""

    def __init__(self, app: Any, stream: trio.abc.Stream, sock: Any, scheme: str) -> None:
        self.app = app
        self.stream = stream
        self.conn = h11.Connection(h11.SERVER)
        self.client = _address(sock.getpeername())
        self.server = _address(sock.getsockname())
        self.scheme = scheme

    async def send(self, event: Any) -> None:
        data = self.conn.send(event)
        if data:
            await self.stream.send_all(data)

    async def next_event(self, timeout: float = IDLE_TIMEOUT) -> Any:
        """The next h11 event, or None when the peer closed or stayed silent `timeout` s."""
        while True:
            event = self.conn.next_event()
            if event is not h11.NEED_DATA:
                return None if isinstance(event, h11.ConnectionClosed) else event
            data = b""
            with trio.move_on_after(timeout):
                data = await self.stream.receive_some(_READ_SIZE)
            if not data:
                return None
            self.conn.receive_data(data)

    async def serve(self) -> None:
        while True:
            request = await self.next_event()
            if not isinstance(request, h11.Request):
                return
            if not await self._respond(request) or not await self._drain():
                return
            if self.conn.our_state is not h11.DONE or self.conn.their_state is not h11.DONE:
                return  # either side asked to close
            self.conn.start_next_cycle()

    async def _drain(self) -> bool:
        """Read what the app left of the request body (h11 reports the end of even an empty
        body as its own event); False when it is too long to bother or the peer went away."""
        left = _DRAIN_LIMIT
        while self.conn.their_state is h11.SEND_BODY:
            event = await self.next_event()
            if event is None:
                return False
            if isinstance(event, h11.Data):
                left -= len(event.data)
                if left < 0:
                    return False
        return True

    async def _respond(self, request: h11.Request) -> bool:
        """Run the app for one request; False when the connection must be dropped."""
        head = request.method == b"HEAD"
        state = {"body_done": False, "started": False, "continued": False}
        # A client that asked for "100 Continue" and did not get it may never send its body:
        # such a connection is closed after the response instead of drained.
        expects_continue = self.conn.they_are_waiting_for_100_continue
        finished = trio.Event()

        async def receive() -> dict:
            if state["body_done"]:
                await finished.wait()
                return {"type": "http.disconnect"}
            if self.conn.they_are_waiting_for_100_continue:
                await self.send(h11.InformationalResponse(status_code=100, headers=[],
                                                          reason=reason_phrase(100)))
                state["continued"] = True
            event = await self.next_event()
            if isinstance(event, h11.Data):
                return {"type": "http.request", "body": bytes(event.data), "more_body": True}
            state["body_done"] = True
            if isinstance(event, h11.EndOfMessage):
                return {"type": "http.request", "body": b"", "more_body": False}
            return {"type": "http.disconnect"}

        async def send(message: dict) -> None:
            if message["type"] == "http.response.start":
                state["started"] = True
                status = message["status"]
                headers = [(k, v) for k, v in message.get("headers", [])]
                headers.append((b"date", email.utils.formatdate(usegmt=True).encode()))
                await self.send(h11.Response(status_code=status, headers=headers,
                                             reason=reason_phrase(status)))
            elif message["type"] == "http.response.body":
                body = message.get("body", b"")
                if body and not head:
                    await self.send(h11.Data(data=body))
                if not message.get("more_body", False):
                    await self.send(h11.EndOfMessage())
                    finished.set()

        try:
            await self.app(_scope(request, self.client, self.server, self.scheme), receive, send)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return False
        except Exception:
            _log.exception("HTTP %s %s failed", request.method.decode(), request.target.decode())
            if state["started"]:
                return False
            await self.send_error(500)
            return False
        return finished.is_set() and (state["continued"] or not expects_continue)

    async def send_error(self, status: int) -> None:
        """An empty error response that closes the connection, when h11 still allows one."""
        if self.conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
            return
        await self.send(h11.Response(status_code=status, reason=reason_phrase(status),
                                     headers=[(b"content-length", b"0"), (b"connection", b"close")]))
        await self.send(h11.EndOfMessage())


async def _serve_connection(app: Any, tls: Any, stream: trio.SocketStream) -> None:
    sock = stream.socket
    try:
        peer = _address(sock.getpeername())
    except OSError:  # the peer is already gone
        await stream.aclose()
        return
    if tls is not None:
        secured = await tls.handshake(stream, f"{peer[0]}:{peer[1]}" if peer else "?",
                                      IDLE_TIMEOUT)
        if secured is None:
            return
        stream = secured
    try:
        exchange = _Exchange(app, stream, sock, "https" if tls is not None else "http")
    except OSError:  # the peer is already gone
        await stream.aclose()
        return
    try:
        await exchange.serve()
    except h11.RemoteProtocolError as err:
        try:
            await exchange.send_error(err.error_status_hint)
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.LocalProtocolError):
            pass
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    finally:
        await stream.aclose()


def _address(addr: Any) -> tuple[str, int] | None:
    return (addr[0], addr[1]) if isinstance(addr, tuple) and len(addr) >= 2 else None


def _scope(request: h11.Request, client: Any, server: Any, scheme: str = "http") -> dict:
    target = request.target
    raw_path, _, query = target.partition(b"?")
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": request.http_version.decode(),
        "method": request.method.decode(),
        "scheme": scheme,
        "path": urllib.parse.unquote_to_bytes(raw_path).decode("utf-8", "replace"),
        "raw_path": raw_path,
        "query_string": query,
        "root_path": "",
        "headers": [(k, v) for k, v in request.headers],
        "client": client,
        "server": server,
    }
