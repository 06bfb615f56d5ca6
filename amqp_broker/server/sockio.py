"""Reads and writes of a plain TCP connection with fewer passes of trio's run loop.

Used by `session.py` for every AMQP connection not on TLS (`for_stream`). trio's
`SocketStream` yields to the scheduler after every successful `recv` or `send`, even when the
task has just waited for the socket or goes straight back to a wait of its own: each such
yield is one more pass of the run loop. At a low message rate, where every message is a read,
a delivery and a confirm of their own, those passes are a good part of the broker's CPU. Here
a read that had to wait for the socket, and a write that the kernel takes whole, return
without the extra yield; a read that found data at once still yields, so a connection that
keeps sending cannot starve the others. After a read that took less than it asked for,
the next one waits for the socket first instead of trying a read that fails with EAGAIN.
Errors are trio's: `BrokenResourceError` for a reset or broken socket, `ClosedResourceError`
once it is closed.
"""

from __future__ import annotations

import errno
import os

import trio

__all__ = ["for_stream"]


_IOV_MAX = 1024  # Linux's limit on the buffers of one writev


def for_stream(stream):
    """The object a session reads and writes through: `DirectSocket` for a plain TCP stream,
    `JoiningStream` otherwise (TLS). Both have `receive_some` and `send_pieces`."""
    if isinstance(stream, trio.SocketStream):
        return DirectSocket(stream)
    return JoiningStream(stream)


class JoiningStream:
    """`send_pieces` for a stream that only has `send_all` (TLS encrypts a copy anyway)."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self._stream = stream
        self.blocked_since: float | None = None  # trio time a send began (it may wait for room)

    async def receive_some(self, max_bytes: int) -> bytes:
        return await self._stream.receive_some(max_bytes)

    async def send_pieces(self, pieces: list) -> None:
        self.blocked_since = trio.current_time()
        try:
            await self._stream.send_all(pieces[0] if len(pieces) == 1 else b"".join(pieces))
        finally:
            self.blocked_since = None


class DirectSocket:
    """`receive_some` / `send_pieces` of a `trio.SocketStream`, on its non-blocking socket."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self._stream = stream
        self._sock = stream.socket
        self._drained = False   # the last read took less than asked: the kernel had no more
        self.blocked_since: float | None = None  # trio time a send began to wait for room

    async def receive_some(self, max_bytes: int) -> bytes:
        sock = self._sock
        fd = sock.fileno()
        if fd < 0:
            raise trio.ClosedResourceError("the socket was closed")
        waited = False
        if self._drained:
            # Most likely nothing has come since: wait for it rather than try a read that
            # fails with EAGAIN (at a low rate, one such read per message and connection).
            # epoll reports data that did come at once, so nothing waits longer for it.
            await trio.lowlevel.wait_readable(sock)
            waited = True
        while True:
            try:
                data = os.read(fd, max_bytes)
                break
            except BlockingIOError:
                await trio.lowlevel.wait_readable(sock)
                waited = True
            except OSError as exc:
                raise _broken(exc) from exc
        self._drained = len(data) < max_bytes
        if not waited:  # as trio: every call is a checkpoint
            await trio.lowlevel.cancel_shielded_checkpoint()
        return data

    async def send_pieces(self, pieces: list) -> None:
        """Write the buffers `pieces` in order with vectored writes, waiting for room in the
        kernel's buffer only when it is full (no checkpoint otherwise, as `send_all`)."""
        rest = self.try_send(pieces)
        if rest:
            self.blocked_since = trio.current_time()
            try:
                while rest:
                    await trio.lowlevel.wait_writable(self._sock)
                    rest = self.try_send(rest)
            finally:
                self.blocked_since = None

    def try_send(self, pieces: list) -> list:
        """Write what the kernel takes of `pieces` now, without waiting; return the rest (the
        first of it cut where the kernel stopped), empty when it took everything."""
        sock = self._sock
        i = 0
        while i < len(pieces):
            fd = sock.fileno()
            if fd < 0:
                raise trio.ClosedResourceError("the socket was closed")
            batch = pieces[i : i + _IOV_MAX]
            try:
                sent = os.writev(fd, batch)
            except BlockingIOError:
                sent = 0
            except OSError as exc:
                raise _broken(exc) from exc
            for piece in batch:
                if sent < len(piece):
                    return [memoryview(piece)[sent:], *pieces[i + 1 :]]
                sent -= len(piece)
                i += 1
        return []


def _broken(exc: OSError) -> trio.BrokenResourceError | trio.ClosedResourceError:
    if exc.errno == errno.EBADF:
        return trio.ClosedResourceError("the socket was closed")
    return trio.BrokenResourceError(f"socket error: {exc}")
