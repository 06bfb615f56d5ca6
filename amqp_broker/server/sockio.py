"""Reads and writes of a plain TCP connection with fewer passes of trio's run loop.

Used by `session.py` for every AMQP connection not on TLS (`for_stream`). trio's
`SocketStream` yields to the scheduler after every successful `recv` or `send`, even when the
task has just waited for the socket or goes straight back to a wait of its own: each such
yield is one more pass of the run loop. At a low message rate, where every message is a read,
a delivery and a confirm of their own, those passes are a good part of the broker's CPU. Here
a read that had to wait for the socket, and a write that the kernel takes whole, return
without the extra yield; a read that found data at once still yields, so a connection that
keeps sending cannot starve the others. Errors are trio's: `BrokenResourceError` for a reset
or broken socket, `ClosedResourceError` once it is closed.
"""

from __future__ import annotations

import errno
import os

import trio

__all__ = ["for_stream"]


def for_stream(stream):
    """The object a session reads and writes through: `DirectSocket` for a plain TCP stream,
    the stream itself otherwise (TLS)."""
    if isinstance(stream, trio.SocketStream):
        return DirectSocket(stream)
    return stream


class DirectSocket:
    """`receive_some` / `send_all` of a `trio.SocketStream`, on its non-blocking socket."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self._stream = stream
        self._sock = stream.socket

    async def receive_some(self, max_bytes: int) -> bytes:
        sock = self._sock
        fd = sock.fileno()
        if fd < 0:
            raise trio.ClosedResourceError("the socket was closed")
        waited = False
        while True:
            try:
                data = os.read(fd, max_bytes)
                break
            except BlockingIOError:
                await trio.lowlevel.wait_readable(sock)
                waited = True
            except OSError as exc:
                raise _broken(exc) from exc
        if not waited:  # as trio: every call is a checkpoint
            await trio.lowlevel.cancel_shielded_checkpoint()
        return data

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        fd = self._sock.fileno()
        if fd < 0:
            raise trio.ClosedResourceError("the socket was closed")
        try:
            sent = os.write(fd, data)
        except BlockingIOError:
            sent = 0
        except OSError as exc:
            raise _broken(exc) from exc
        if sent < len(data):  # the kernel's buffer is full: trio waits for room
            await self._stream.send_all(memoryview(data)[sent:])


def _broken(exc: OSError) -> trio.BrokenResourceError | trio.ClosedResourceError:
    if exc.errno == errno.EBADF:
        return trio.ClosedResourceError("the socket was closed")
    return trio.BrokenResourceError(f"socket error: {exc}")
