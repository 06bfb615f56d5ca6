"""A TCP proxy the cluster tests control: one listener per inter-node link, forwarding to the
real distribution port, that a test can cut and heal.

Used by the fault-injection test (`test_jepsen.py`, through `nemesis.py`) to partition nodes,
and tested on its own by `test_proxy.py`. The broker's transport keeps one TCP connection per
node pair, dialled by the node with the smaller name, so a link here is that dialled direction
(`dialer -> acceptor`); cutting it cuts the pair both ways.

`cut(name)` closes the link's live connections with a TCP reset and then either refuses new
ones (accepted and reset at once: a dead peer) or, with `blackhole=True`, accepts them and
never forwards a byte (a peer behind a firewall that drops packets: the dialer's handshake times
out). `heal(name)` lets new connections through again and drops the black-holed ones, whose
dialers have given up on them by then. `stall(name)` is the other partition a real network
makes: the live connections stay open but nothing crosses them until `heal`, when the held
bytes flow again (TCP retransmission after a firewall rule goes).

The proxy runs trio in a thread of its own so that blocking test code (pika, the nemesis) calls
it with plain methods.
"""

from __future__ import annotations

import socket
import struct
import threading
from dataclasses import dataclass, field

import trio

__all__ = ["Proxy", "LinkStats"]

_CHUNK = 65536


@dataclass
class LinkStats:
    """What one link has seen (for tests and the nemesis log)."""
    accepted: int = 0     # connections forwarded to the target
    refused: int = 0      # connections reset at once while cut
    blackholed: int = 0   # connections held silent while cut
    reset: int = 0        # live connections reset by `cut`
    bytes: int = 0        # bytes forwarded, both ways


@dataclass
class _Link:
    name: str
    target: tuple[str, int]
    port: int = 0
    state: str = "open"   # "open" | "refuse" | "blackhole" | "stall"
    stats: LinkStats = field(default_factory=LinkStats)
    live: list = field(default_factory=list)      # [_Conn] being forwarded
    held: list = field(default_factory=list)      # [trio.CancelScope] of black-holed ones
    flowing: trio.Event = field(default_factory=trio.Event)  # set unless stalled


class _Conn:
    """One forwarded connection: the accepted stream, the stream to the target, and the scope
    that ends both pumps."""

    def __init__(self, left: trio.SocketStream, right: trio.SocketStream) -> None:
        self.left = left
        self.right = right
        self.scope = trio.CancelScope()


def _reset_on_close(stream: trio.SocketStream) -> None:
    """SO_LINGER 0: closing sends a RST, as a node's socket does when the node is killed."""
    try:
        stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass


class Proxy:
    """Links by name, each `add_link(name, target)` -> the port to dial instead of target."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self._links: dict[str, _Link] = {}
        self._token: trio.lowlevel.TrioToken | None = None
        self._nursery: trio.Nursery | None = None
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None

    # -- life cycle (caller's thread) ---------------------------------------------------------
    def start(self) -> "Proxy":
        self._thread = threading.Thread(target=self._main, name="link-proxy", daemon=True)
        self._thread.start()
        self._started.wait(10)
        if self._error is not None:
            raise self._error
        return self

    def close(self) -> None:
        if self._token is not None:
            try:
                trio.from_thread.run_sync(self._nursery.cancel_scope.cancel,
                                          trio_token=self._token)
            except trio.RunFinishedError:
                pass
        if self._thread is not None:
            self._thread.join(10)

    def __enter__(self) -> "Proxy":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def _main(self) -> None:
        try:
            trio.run(self._run)
        except BaseException as e:  # reported to start(); a crash later shows in the test
            self._error = e
            self._started.set()

    async def _run(self) -> None:
        async with trio.open_nursery() as nursery:
            self._token = trio.lowlevel.current_trio_token()
            self._nursery = nursery
            self._started.set()
            await trio.sleep_forever()

    def _call(self, fn, *args):
        return trio.from_thread.run_sync(fn, *args, trio_token=self._token)

    # -- links (caller's thread) --------------------------------------------------------------
    def add_link(self, name: str, target: tuple[str, int], port: int = 0) -> int:
        """Listen for `name` on `port` (0: any free one) and forward to `target`."""
        link = _Link(name, target)
        link.flowing.set()
        self._links[name] = link
        return trio.from_thread.run(self._listen, link, port, trio_token=self._token)

    def cut(self, name: str, *, blackhole: bool = False) -> None:
        self._call(self._cut, self._links[name], "blackhole" if blackhole else "refuse")

    def stall(self, name: str) -> None:
        self._call(self._stall, self._links[name])

    def heal(self, name: str) -> None:
        self._call(self._heal, self._links[name])

    def heal_all(self) -> None:
        for name in self._links:
            self.heal(name)

    def state(self, name: str) -> str:
        return self._links[name].state

    def stats(self, name: str) -> LinkStats:
        return self._links[name].stats

    def live(self, name: str) -> int:
        """Connections being forwarded on `name` now."""
        return len(self._links[name].live)

    @property
    def links(self) -> list[str]:
        return list(self._links)

    # -- inside trio --------------------------------------------------------------------------
    async def _listen(self, link: _Link, port: int) -> int:
        listeners = await trio.open_tcp_listeners(port, host=self.host)
        link.port = listeners[0].socket.getsockname()[1]
        self._nursery.start_soon(trio.serve_listeners, lambda s: self._accepted(link, s),
                                 listeners)
        return link.port

    def _cut(self, link: _Link, mode: str) -> None:
        link.state = mode
        link.flowing.set()  # a stalled connection is reset like any other
        for conn in link.live:
            link.stats.reset += 1
            _reset_on_close(conn.left)
            _reset_on_close(conn.right)
            conn.scope.cancel()

    def _stall(self, link: _Link) -> None:
        link.state = "stall"
        if link.flowing.is_set():
            link.flowing = trio.Event()

    def _heal(self, link: _Link) -> None:
        link.state = "open"
        link.flowing.set()
        held, link.held = link.held, []
        for scope in held:
            scope.cancel()

    async def _accepted(self, link: _Link, stream: trio.SocketStream) -> None:
        if link.state == "refuse":
            link.stats.refused += 1
            _reset_on_close(stream)
            await trio.aclose_forcefully(stream)
            return
        if link.state == "blackhole":
            link.stats.blackholed += 1
            scope = trio.CancelScope()
            link.held.append(scope)
            with scope:
                await trio.sleep_forever()  # open and unread until `heal`
            _reset_on_close(stream)
            await trio.aclose_forcefully(stream)
            return
        try:
            right = await trio.open_tcp_stream(*link.target)
        except OSError:
            _reset_on_close(stream)  # the target is down: the dialer sees a refusal
            await trio.aclose_forcefully(stream)
            return
        conn = _Conn(stream, right)
        link.stats.accepted += 1
        link.live.append(conn)
        try:
            with conn.scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._pump, link, stream, right, nursery.cancel_scope)
                    nursery.start_soon(self._pump, link, right, stream, nursery.cancel_scope)
        finally:
            link.live.remove(conn)
            await trio.aclose_forcefully(stream)
            await trio.aclose_forcefully(right)

    async def _pump(self, link: _Link, src: trio.SocketStream, dst: trio.SocketStream,
                    done: trio.CancelScope) -> None:
        """Copy src -> dst until either side ends; waits while the link is stalled (before a
        read and before a write, so a stall holds bytes already read too)."""
        try:
            while True:
                await link.flowing.wait()
                data = await src.receive_some(_CHUNK)
                if not data:
                    break
                await link.flowing.wait()
                await dst.send_all(data)
                link.stats.bytes += len(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            done.cancel()
