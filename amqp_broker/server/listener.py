"""TCP listener: accepts AMQP clients and runs one `Session` per socket.

Started by `node.run_node` with `await nursery.start(serve_amqp, broker)`; reports the bound port
through `task_status.started(port)` so tests and the CLI can bind to port 0. Every bound
listener is added to `broker.bound_listeners` (the management API's listener rows). The
`listeners.ssl.NAME` listeners (when `broker.amqp_tls` is set) run the TLS handshake, within
the handshake timeout, before the session starts; the session then reads and writes through
the TLS stream. A TLS ClientHello sent to a plain listener is no AMQP header: the protocol layer
answers with the AMQP header and closes, as RabbitMQ does.
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING

import trio

from .session import Session

if TYPE_CHECKING:
    from amqp_broker.tls import ServerTls

    from .broker import Broker

__all__ = ["serve_amqp"]

_log = logging.getLogger(__name__)


async def serve_amqp(broker: "Broker", *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Listen on the primary host/port plus any extra listeners (`listeners.tcp.NAME` in
    rabbitmq.conf); report the primary port."""
    settings = broker.settings
    plain, secure = [], []
    port = 0
    endpoints = [(settings.host, settings.port)]
    endpoints += [(x.host, x.port) for x in getattr(settings, "extra_listeners", ())]
    tls = broker.amqp_tls
    tls_endpoints = [(x.host, x.port) for x in getattr(settings, "ssl_listeners", ())] if tls else []
    for host, wanted, over_tls in ([(h, p, False) for h, p in endpoints]
                                   + [(h, p, True) for h, p in tls_endpoints]):
        opened = await _open(host, wanted)
        bound = opened[0].socket.getsockname()[1]
        (secure if over_tls else plain).extend(opened)
        broker.bound_listeners.append({"protocol": "amqp/ssl" if over_tls else "amqp",
                                       "ip_address": host or "0.0.0.0", "port": bound,
                                       "tls": tls if over_tls else None})
        if over_tls:
            _log.info("AMQP 0-9-1 over TLS listening on %s:%d", host or "0.0.0.0", bound)
        else:
            port = port or bound
            _log.info("AMQP 0-9-1 listening on %s:%d (data dir %s)", host or "0.0.0.0", bound,
                      settings.data_dir)
    async with trio.open_nursery() as nursery:
        task_status.started(port)
        if secure:
            nursery.start_soon(functools.partial(
                trio.serve_listeners, lambda stream: _handle(broker, stream, tls), secure,
                handler_nursery=nursery))
        await trio.serve_listeners(lambda stream: _handle(broker, stream), plain,
                                   handler_nursery=nursery)


async def _open(host: str, port: int) -> list:
    if host not in ("", "0.0.0.0", "::"):
        return await trio.open_tcp_listeners(port, host=host)
    if port:
        return await trio.open_tcp_listeners(port)  # every address family
    # Port 0 on all interfaces: trio would give IPv4 and IPv6 different ports; use one.
    opened = await trio.open_tcp_listeners(0, host="0.0.0.0")
    try:
        opened += await trio.open_tcp_listeners(opened[0].socket.getsockname()[1], host="::")
    except OSError:
        pass  # no IPv6, or the port is taken there: IPv4 only
    return opened


async def _handle(broker: "Broker", stream: trio.SocketStream,
                  tls: "ServerTls | None" = None) -> None:
    try:
        peer = stream.socket.getpeername()
        stream.setsockopt(trio.socket.IPPROTO_TCP, trio.socket.TCP_NODELAY, 1)
    except OSError:
        await stream.aclose()
        return
    if tls is not None:
        secured = await tls.handshake(stream, f"{peer[0]}:{peer[1]}",
                                      broker.settings.handshake_timeout)
        if secured is None:
            return
        stream = secured
    session = Session(broker, stream, peer)
    try:
        await session.run()
    except Exception:
        _log.exception("session %s crashed", session.name)
