"""trio TCP between cluster nodes: one authenticated connection per node pair, all groups on it.

Used by `quorum.driver.NodeDriver` (and anything else that wants node-to-node frames). The
node with the smaller id dials; the other accepts. Both directions share that connection.

Wire: every frame is ``<u32 length><body>``; the length is checked against `max_frame` before
the body is read. Before any data, the link is authenticated with a shared secret (like the
Erlang cookie), without sending it: the dialer sends its id and a random nonce, the acceptor
answers with its id, its nonce and an HMAC-SHA256 over both nonces and both ids, and the dialer
answers with its own HMAC. A peer that fails the challenge is dropped. Data frames carry
``<u16 group length><group id><message bytes>``; the bytes are opaque here (Raft messages
encoded by `quorum.raft.encode_message`).

Sending never blocks: each peer has a bounded queue and a message that does not fit is dropped
(Raft retransmits). A writer task sends everything queued since it last woke in one
`send_all`. Lost links are redialled with exponential backoff. With `ticktime` (Erlang's
net_ticktime) each end sends a tick on a link idle for a quarter of it, and a link on which
nothing arrived for `ticktime` seconds is closed: a peer that is stopped (SIGSTOP) or cut off
without its sockets closing counts as gone, as one that died. `address_override` is the test
hook that lets a test route a link through a proxy it can cut.

Peers can change while the transport runs (`add_peer`, `remove_peer`: nodes joining and leaving
a cluster). Besides links, a node that is not (yet) a peer can `ask` one question: it proves the
same secret, sends one frame and gets one answer from the acceptor's `on_request` (how a node
asks to join a cluster).
With `tls` (an (accepting, dialling) pair of `ssl.SSLContext`s) every link runs over TLS: the
handshake happens before the shared-secret challenge, within the same 5 s, and the contexts
decide who is trusted (the broker builds them from its ssl_options, mutual TLS).
"""

from __future__ import annotations

import hashlib
import hmac
import math
import os
import ssl
import struct
from functools import partial
from typing import Awaitable, Callable

import msgspec
import trio

__all__ = ["Transport", "AuthError", "ask"]

_LEN = struct.Struct("<I")
_GLEN = struct.Struct("<H")
_HELLO = 1
_CHALLENGE = 2
_PROOF = 3
_DATA = 4
_ASK = 5  # a one-question link: hello, challenge, proof, one request frame, one answer frame
_TICK = 6  # nothing but "this end is alive": sent on a link idle for a quarter of `ticktime`
_TICK_BODY = bytes((_TICK,))
_TICK_FRAME = _LEN.pack(1) + _TICK_BODY


class AuthError(Exception):
    """The peer failed the shared-secret challenge."""


class _Hello(msgspec.Struct, array_like=True):
    kind: int
    node: str
    nonce: bytes
    mac: bytes = b""


def _mac(secret: bytes, label: bytes, *parts: bytes) -> bytes:
    return hmac.new(secret, label + b"\0".join(parts), hashlib.sha256).digest()


class _Peer:
    """Outbound state for one peer, kept across reconnects."""

    def __init__(self, node: str, queue_size: int) -> None:
        self.node = node
        self.send_ch, self.recv_ch = trio.open_memory_channel[bytes](queue_size)
        self.stream: trio.abc.Stream | None = None
        self.connected = trio.Event()
        self.dropped = 0
        self.sent = 0
        self.dialer: trio.CancelScope | None = None  # the dial loop, on the dialling side


class Transport:
    """Frames between this node and its peers.

    `on_frame(peer, group, data)` is called from the reader task for every data frame; it must
    not block (the driver just queues the message and wakes its loop).
    """

    def __init__(
        self,
        node_id: str,
        peers: dict[str, tuple[str, int]],
        secret: bytes,
        on_frame: Callable[[str, str, bytes], None],
        *,
        listen: tuple[str, int] = ("127.0.0.1", 0),
        queue_size: int = 4096,
        max_frame: int = 64 * 1024 * 1024,
        address_override: Callable[[str, tuple[str, int]], tuple[str, int]] | None = None,
        backoff: tuple[float, float] = (0.05, 2.0),
        on_request: Callable[[str, bytes], Awaitable[bytes]] | None = None,
        tls: tuple[ssl.SSLContext, ssl.SSLContext] | None = None,
        ticktime: float | None = None,
    ) -> None:
        self.node_id = node_id
        self._ticktime = ticktime
        self._addrs = {p: a for p, a in peers.items() if p != node_id}
        self._secret = secret
        self._on_frame = on_frame
        self._listen = listen
        self._max_frame = max_frame
        self._override = address_override
        self._backoff = backoff
        self._queue_size = queue_size
        self._tls = tls
        self._peers = {p: _Peer(p, queue_size) for p in sorted(self._addrs)}
        self._on_request = on_request
        self._nursery: trio.Nursery | None = None
        self.port: int | None = None
        self.auth_failures = 0

    # -- sending ------------------------------------------------------------------------------
    def send(self, peer: str, group: str, data: bytes) -> bool:
        """Queue one message; False if it was dropped (unknown peer or full queue)."""
        p = self._peers.get(peer)
        if p is None:
            return False
        g = group.encode()
        frame = b"".join((_LEN.pack(1 + 2 + len(g) + len(data)), bytes((_DATA,)), _GLEN.pack(len(g)), g, data))
        try:
            p.send_ch.send_nowait(frame)
        except trio.WouldBlock:
            p.dropped += 1
            return False
        return True

    def is_connected(self, peer: str) -> bool:
        p = self._peers.get(peer)
        return p is not None and p.stream is not None

    async def wait_connected(self, peer: str) -> None:
        await self._peers[peer].connected.wait()

    def statistics(self) -> dict[str, dict[str, int]]:
        return {p.node: {"connected": int(p.stream is not None), "dropped": p.dropped, "sent": p.sent}
                for p in self._peers.values()}

    # -- running ------------------------------------------------------------------------------
    async def run(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen, dial the peers this node dials, and serve until cancelled. Reports the port."""
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(
                partial(trio.serve_tcp, self._accepted, self._listen[1], host=self._listen[0]))
            self.port = listeners[0].socket.getsockname()[1]
            self._nursery = nursery
            for peer in self._peers:
                self._start_dialling(peer)
            task_status.started(self.port)

    def _start_dialling(self, peer: str) -> None:
        p = self._peers[peer]
        if self._nursery is not None and self.node_id < peer and p.dialer is None:
            p.dialer = trio.CancelScope()
            self._nursery.start_soon(self._dial_loop, peer, p.dialer)

    @property
    def peers(self) -> list[str]:
        return sorted(self._peers)

    def add_peer(self, peer: str, addr: tuple[str, int]) -> None:
        """Link to `peer` from now on (a node that joined the cluster)."""
        if peer == self.node_id:
            return
        self._addrs[peer] = addr
        if peer not in self._peers:
            self._peers[peer] = _Peer(peer, self._queue_size)
        self._start_dialling(peer)

    def remove_peer(self, peer: str) -> None:
        """Stop linking to `peer` (a node that left or was forgotten): its link is closed and
        it is refused from now on."""
        self._addrs.pop(peer, None)
        p = self._peers.pop(peer, None)
        if p is None:
            return
        if p.dialer is not None:
            p.dialer.cancel()
        if p.stream is not None and self._nursery is not None:
            self._nursery.start_soon(trio.aclose_forcefully, p.stream)

    def _address(self, peer: str) -> tuple[str, int]:
        addr = self._addrs[peer]
        return self._override(peer, addr) if self._override else addr

    def set_address(self, peer: str, addr: tuple[str, int]) -> None:
        self._addrs[peer] = addr

    async def _dial_loop(self, peer: str, scope: trio.CancelScope) -> None:
        with scope:
            await self._dial(peer)

    async def _dial(self, peer: str) -> None:
        delay = self._backoff[0]
        while peer in self._addrs:
            try:
                stream = await trio.open_tcp_stream(*self._address(peer))
                if self._tls is not None:
                    stream = trio.SSLStream(stream, self._tls[1])
            except OSError:
                await trio.sleep(delay)
                delay = min(delay * 2, self._backoff[1])
                continue
            try:
                with trio.fail_after(5):
                    leftover = await self._dialer_handshake(stream, peer)
                delay = self._backoff[0]
                await self._serve(stream, peer, leftover)
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError,
                    AuthError, ValueError, msgspec.DecodeError):
                pass
            finally:
                await trio.aclose_forcefully(stream)
            await trio.sleep(delay)
            delay = min(delay * 2, self._backoff[1])

    async def _accepted(self, stream: trio.abc.Stream) -> None:
        if self._tls is not None:
            stream = trio.SSLStream(stream, self._tls[0], server_side=True)
        try:
            with trio.fail_after(5):
                peer, leftover, kind = await self._acceptor_handshake(stream)
            if kind == _ASK:
                await self._answer(stream, peer, leftover)
            else:
                await self._serve(stream, peer, leftover)
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError,
                AuthError, ValueError, msgspec.DecodeError):
            pass
        finally:
            await trio.aclose_forcefully(stream)

    # -- handshake ----------------------------------------------------------------------------
    async def _dialer_handshake(self, stream: trio.abc.Stream, peer: str) -> bytes:
        """Returns bytes read past the handshake (the start of the first data frames)."""
        reader = _FrameReader(stream, 4096)
        mine = os.urandom(16)
        await stream.send_all(_pack(msgspec.msgpack.encode(_Hello(_HELLO, self.node_id, mine))))
        ch = msgspec.msgpack.decode(await reader.next(), type=_Hello)
        expect = _mac(self._secret, b"acceptor", mine, ch.nonce, ch.node.encode(), self.node_id.encode())
        if ch.kind != _CHALLENGE or ch.node != peer or not hmac.compare_digest(ch.mac, expect):
            self.auth_failures += 1
            raise AuthError(f"{peer} failed authentication")
        proof = _mac(self._secret, b"dialer", ch.nonce, mine, self.node_id.encode(), peer.encode())
        await stream.send_all(_pack(msgspec.msgpack.encode(_Hello(_PROOF, self.node_id, b"", proof))))
        return reader.buffer

    async def _acceptor_handshake(self, stream: trio.abc.Stream) -> tuple[str, bytes, int]:
        reader = _FrameReader(stream, 4096)
        hello = msgspec.msgpack.decode(await reader.next(), type=_Hello)
        peer = hello.node
        asking = hello.kind == _ASK and self._on_request is not None
        if not asking and (hello.kind != _HELLO or peer not in self._peers
                           or peer > self.node_id):
            self.auth_failures += 1
            raise AuthError(f"unexpected hello from {peer!r}")
        mine = os.urandom(16)
        mac = _mac(self._secret, b"acceptor", hello.nonce, mine, self.node_id.encode(), peer.encode())
        await stream.send_all(_pack(msgspec.msgpack.encode(_Hello(_CHALLENGE, self.node_id, mine, mac))))
        proof = msgspec.msgpack.decode(await reader.next(), type=_Hello)
        expect = _mac(self._secret, b"dialer", mine, hello.nonce, peer.encode(), self.node_id.encode())
        if proof.kind != _PROOF or not hmac.compare_digest(proof.mac, expect):
            self.auth_failures += 1
            raise AuthError(f"{peer} failed authentication")
        return peer, reader.buffer, hello.kind

    async def _answer(self, stream: trio.abc.Stream, peer: str, leftover: bytes) -> None:
        """One question from a node that proved the secret (`ask`), one answer."""
        reader = _FrameReader(stream, self._max_frame, leftover)
        with trio.fail_after(5):
            question = await reader.next()
        answer = await self._on_request(peer, question)
        await stream.send_all(_pack(answer))

    # -- an authenticated link ----------------------------------------------------------------
    async def _serve(self, stream: trio.abc.Stream, peer: str, leftover: bytes) -> None:
        p = self._peers.get(peer)
        if p is None:
            return  # removed while the link was being set up
        old = p.stream
        if old is not None:
            await trio.aclose_forcefully(old)  # the newest link wins
        p.stream = stream
        p.connected.set()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_guard, self._writer(stream, p), nursery.cancel_scope)
                await _guard(self._reader(stream, peer, leftover), nursery.cancel_scope)
        finally:
            if p.stream is stream:
                p.stream = None
                p.connected = trio.Event()

    async def _writer(self, stream: trio.abc.Stream, p: _Peer) -> None:
        idle = self._ticktime / 4 if self._ticktime else math.inf
        while True:
            first = _TICK_FRAME
            with trio.move_on_after(idle):
                first = await p.recv_ch.receive()
            batch = [first]
            while True:
                try:
                    batch.append(p.recv_ch.receive_nowait())
                except trio.WouldBlock:
                    break
            await stream.send_all(b"".join(batch))
            p.sent += len(batch)

    async def _reader(self, stream: trio.abc.Stream, peer: str, leftover: bytes) -> None:
        reader = _FrameReader(stream, self._max_frame, leftover)
        on_frame = self._on_frame
        silence = self._ticktime or math.inf
        with trio.CancelScope() as quiet:  # its deadline moves on with every frame
            while True:
                quiet.deadline = trio.current_time() + silence
                body = await reader.next()
                if body == _TICK_BODY:
                    continue
                if not body or body[0] != _DATA:
                    raise ValueError("unexpected frame")
                (glen,) = _GLEN.unpack_from(body, 1)
                group = bytes(body[3 : 3 + glen]).decode()
                on_frame(peer, group, bytes(body[3 + glen :]))
        raise trio.BrokenResourceError(f"nothing from {peer} for {silence} s")


_LINK_ERRORS = (OSError, trio.BrokenResourceError, trio.ClosedResourceError, ValueError,
                msgspec.DecodeError, UnicodeDecodeError)


async def _guard(coro, scope: trio.CancelScope) -> None:
    """Run one half of a link; when it ends or breaks, end the other half too."""
    try:
        await coro
    except _LINK_ERRORS:
        pass
    finally:
        scope.cancel()


async def ask(node_id: str, peer: str, addr: tuple[str, int], secret: bytes, question: bytes,
              timeout: float = 30.0, tls: ssl.SSLContext | None = None) -> bytes:
    """Ask node `peer` at `addr` one question as `node_id` (proving `secret`; over TLS with
    the dialling context `tls` when the links use TLS); its answer. Raises OSError
    (unreachable), AuthError (wrong secret, or `peer` answers nothing of the kind) or
    trio.TooSlowError."""
    with trio.fail_after(timeout):
        stream = await trio.open_tcp_stream(*addr)
        if tls is not None:
            stream = trio.SSLStream(stream, tls)
        try:
            reader = _FrameReader(stream, 64 * 1024 * 1024)
            mine = os.urandom(16)
            await stream.send_all(_pack(msgspec.msgpack.encode(_Hello(_ASK, node_id, mine))))
            try:
                ch = msgspec.msgpack.decode(await reader.next(), type=_Hello)
            except (trio.BrokenResourceError, ValueError, msgspec.DecodeError) as err:
                raise AuthError(f"{peer} refused the connection") from err
            expect = _mac(secret, b"acceptor", mine, ch.nonce, ch.node.encode(), node_id.encode())
            if ch.kind != _CHALLENGE or ch.node != peer or not hmac.compare_digest(ch.mac, expect):
                raise AuthError(f"{peer} failed authentication (is the cookie the same?)")
            proof = _mac(secret, b"dialer", ch.nonce, mine, node_id.encode(), peer.encode())
            await stream.send_all(_pack(msgspec.msgpack.encode(_Hello(_PROOF, node_id, b"", proof)))
                                  + _pack(question))
            try:
                return await reader.next()
            except trio.BrokenResourceError as err:
                raise AuthError(f"{peer} closed the connection without an answer (is the "
                                f"cookie the same?)") from err
        finally:
            await trio.aclose_forcefully(stream)


def _pack(body: bytes) -> bytes:
    return _LEN.pack(len(body)) + body


class _FrameReader:
    """Length-prefixed frames from a stream; the length is checked before the body is read."""

    def __init__(self, stream: trio.abc.Stream, max_frame: int, initial: bytes = b"") -> None:
        self._stream = stream
        self._max = max_frame
        self._buf = bytearray(initial)

    @property
    def buffer(self) -> bytes:
        return bytes(self._buf)

    async def _fill(self, n: int) -> None:
        while len(self._buf) < n:
            chunk = await self._stream.receive_some(65536)
            if not chunk:
                raise trio.BrokenResourceError("peer closed")
            self._buf += chunk

    async def next(self) -> bytes:
        await self._fill(4)
        (length,) = _LEN.unpack_from(self._buf, 0)
        if length > self._max:
            raise ValueError(f"frame of {length} bytes exceeds {self._max}")
        await self._fill(4 + length)
        body = bytes(self._buf[4 : 4 + length])
        del self._buf[: 4 + length]
        return body
