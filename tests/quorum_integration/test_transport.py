"""quorum.transport on loopback: multiplexed frames, shared-secret auth, reconnects, bounds."""

from __future__ import annotations

import pytest
import trio

from quorum.transport import Transport

pytestmark = pytest.mark.trio

SECRET = b"cookie"


class Inbox:
    def __init__(self) -> None:
        self.frames: list[tuple[str, str, bytes]] = []
        self.changed = trio.Event()

    def __call__(self, peer: str, group: str, data: bytes) -> None:
        self.frames.append((peer, group, data))
        self.changed.set()
        self.changed = trio.Event()

    async def wait_for(self, n: int) -> None:
        while len(self.frames) < n:
            await self.changed.wait()


async def start_cluster(nursery, names, secrets=None, **kw):
    """Start one transport per name, then tell each the others' ports."""
    inboxes = {n: Inbox() for n in names}
    ts = {}
    for n in names:
        peers = {p: ("127.0.0.1", 1) for p in names}  # ports filled in below
        ts[n] = Transport(n, peers, (secrets or {}).get(n, SECRET), inboxes[n],
                          backoff=(0.01, 0.05), **kw)
        await nursery.start(ts[n].run)
    for n in names:
        for p in names:
            if p != n:
                ts[n].set_address(p, ("127.0.0.1", ts[p].port))
    return ts, inboxes


async def test_frames_for_many_groups_flow_both_ways():
    async with trio.open_nursery() as nursery:
        ts, inbox = await start_cluster(nursery, ["n1", "n2", "n3"])
        with trio.fail_after(10):
            for i in range(50):
                ts["n1"].send("n2", f"q{i % 5}", b"to-n2-%d" % i)
                ts["n3"].send("n1", "meta", b"to-n1-%d" % i)
                ts["n2"].send("n3", "q1", b"x" * 100_000)
            await inbox["n2"].wait_for(50)
            await inbox["n1"].wait_for(50)
            await inbox["n3"].wait_for(50)
        assert inbox["n2"].frames[:3] == [("n1", "q0", b"to-n2-0"), ("n1", "q1", b"to-n2-1"),
                                          ("n1", "q2", b"to-n2-2")]
        assert [f[2] for f in inbox["n1"].frames] == [b"to-n1-%d" % i for i in range(50)]
        assert all(f == ("n2", "q1", b"x" * 100_000) for f in inbox["n3"].frames)
        nursery.cancel_scope.cancel()


async def test_wrong_secret_is_refused():
    async with trio.open_nursery() as nursery:
        ts, inbox = await start_cluster(nursery, ["a", "b"], secrets={"b": b"other"})
        ts["a"].send("b", "g", b"hello")
        with trio.fail_after(10):
            while ts["a"].auth_failures + ts["b"].auth_failures == 0:
                await trio.sleep(0.01)
        assert inbox["b"].frames == []
        assert not ts["a"].is_connected("b")
        nursery.cancel_scope.cancel()


async def test_send_to_unknown_or_full_peer_drops():
    async with trio.open_nursery() as nursery:
        t = Transport("a", {"b": ("127.0.0.1", 1)}, SECRET, Inbox(), queue_size=4, backoff=(0.5, 1))
        await nursery.start(t.run)
        assert not t.send("nobody", "g", b"x")
        results = [t.send("b", "g", b"x") for _ in range(10)]  # b is unreachable
        assert results == [True] * 4 + [False] * 6
        assert t.statistics()["b"]["dropped"] == 6
        nursery.cancel_scope.cancel()


async def test_link_through_a_proxy_reconnects_after_a_cut():
    async with trio.open_nursery() as nursery:
        inbox_b = Inbox()
        b = Transport("b", {"a": ("127.0.0.1", 1)}, SECRET, inbox_b)
        await nursery.start(b.run)
        cut = {"event": trio.Event()}

        async def handle(client):
            server = await trio.open_tcp_stream("127.0.0.1", b.port)
            my_cut = cut["event"]
            async with trio.open_nursery() as n:
                async def pump(src, dst):
                    try:
                        while data := await src.receive_some(65536):
                            await dst.send_all(data)
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        pass
                    n.cancel_scope.cancel()

                async def watch():
                    await my_cut.wait()
                    n.cancel_scope.cancel()
                n.start_soon(pump, client, server)
                n.start_soon(pump, server, client)
                n.start_soon(watch)
            await trio.aclose_forcefully(client)
            await trio.aclose_forcefully(server)

        listeners = await nursery.start(trio.serve_tcp, handle, 0)
        proxy_port = listeners[0].socket.getsockname()[1]
        a = Transport("a", {"b": ("127.0.0.1", b.port)}, SECRET, Inbox(), backoff=(0.01, 0.05),
                      address_override=lambda peer, addr: ("127.0.0.1", proxy_port))
        await nursery.start(a.run)
        with trio.fail_after(10):
            a.send("b", "g", b"before")
            await inbox_b.wait_for(1)
            cut["event"].set()  # the link dies; a redials through a fresh proxy connection
            cut["event"] = trio.Event()
            while not a.is_connected("b") or not b.is_connected("a"):
                await trio.sleep(0.01)
            n = len(inbox_b.frames)
            while len(inbox_b.frames) == n:  # frames sent on a dying link may be lost: resend
                a.send("b", "g", b"after")
                await trio.sleep(0.05)
        assert inbox_b.frames[0] == ("a", "g", b"before")
        assert inbox_b.frames[-1] == ("a", "g", b"after")
        nursery.cancel_scope.cancel()


async def test_oversized_frame_drops_the_link():
    async with trio.open_nursery() as nursery:
        ts, inbox = await start_cluster(nursery, ["a", "b"], max_frame=1024)
        ts["a"].send("b", "g", b"small")
        with trio.fail_after(10):
            await inbox["b"].wait_for(1)
            ts["a"].send("b", "g", b"x" * 5000)
            ts["a"].send("b", "g", b"next")
            while ts["b"].statistics()["a"]["connected"] and len(inbox["b"].frames) < 2:
                await trio.sleep(0.01)
        assert all(len(f[2]) < 1024 for f in inbox["b"].frames)
        nursery.cancel_scope.cancel()


async def test_peers_added_and_removed_while_running():
    async with trio.open_nursery() as nursery:
        ts, inbox = await start_cluster(nursery, ["n1", "n2"])
        n3_inbox = Inbox()
        n3 = Transport("n3", {}, SECRET, n3_inbox, backoff=(0.01, 0.05))
        await nursery.start(n3.run)
        assert not ts["n1"].send("n3", "g", b"x")  # not a peer yet
        for n, t in ts.items():
            t.add_peer("n3", ("127.0.0.1", n3.port))
            n3.add_peer(n, ("127.0.0.1", t.port))
        with trio.fail_after(10):
            await ts["n1"].wait_connected("n3")
            await ts["n2"].wait_connected("n3")
            ts["n1"].send("n3", "g", b"from-n1")
            n3.send("n2", "g", b"from-n3")
            await n3_inbox.wait_for(1)
            await inbox["n2"].wait_for(1)
        assert n3_inbox.frames == [("n1", "g", b"from-n1")]
        assert inbox["n2"].frames == [("n3", "g", b"from-n3")]
        ts["n1"].remove_peer("n3")
        with trio.fail_after(10):
            while n3.is_connected("n1"):
                await trio.sleep(0.01)
        assert "n3" not in ts["n1"].peers and not ts["n1"].send("n3", "g", b"y")
        await trio.sleep(0.2)  # n3 still lists n1 but n1 neither dials nor accepts it
        assert not n3.is_connected("n1") and n3.is_connected("n2")
        nursery.cancel_scope.cancel()


async def test_a_stranger_with_the_secret_may_ask_one_question():
    from quorum.transport import AuthError, ask

    async def answer(peer: str, question: bytes) -> bytes:
        return b"hello " + peer.encode() + b": " + question

    async with trio.open_nursery() as nursery:
        t = Transport("n1", {}, SECRET, Inbox(), on_request=answer)
        await nursery.start(t.run)
        with trio.fail_after(10):
            got = await ask("stranger", "n1", ("127.0.0.1", t.port), SECRET, b"may I join?")
            assert got == b"hello stranger: may I join?"
            with pytest.raises(AuthError):
                await ask("stranger", "n1", ("127.0.0.1", t.port), b"wrong", b"may I?")
            with pytest.raises(AuthError):  # the node is not the one named
                await ask("stranger", "n9", ("127.0.0.1", t.port), SECRET, b"may I?")
        plain = Transport("n2", {}, SECRET, Inbox())  # takes no questions
        await nursery.start(plain.run)
        with trio.fail_after(10), pytest.raises(AuthError):
            await ask("stranger", "n2", ("127.0.0.1", plain.port), SECRET, b"may I?")
        nursery.cancel_scope.cancel()


async def test_ticks_keep_an_idle_link_up_and_a_silent_one_is_dropped():
    """With `ticktime`, a link nobody sends on stays up (ticks flow), and one on which nothing
    arrives for `ticktime` (a frozen peer: here a proxy that stops forwarding but keeps its
    sockets open, as a SIGSTOPped process does) is closed at both ends."""
    ticktime = 0.3
    async with trio.open_nursery() as nursery:
        b = Transport("b", {"a": ("127.0.0.1", 1)}, SECRET, Inbox(), ticktime=ticktime)
        await nursery.start(b.run)
        frozen = trio.Event()

        async def handle(client):
            server = await trio.open_tcp_stream("127.0.0.1", b.port)

            async def pump(src, dst):
                try:
                    while data := await src.receive_some(65536):
                        if frozen.is_set():
                            await trio.sleep_forever()  # hold the bytes, keep the sockets
                        await dst.send_all(data)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    pass
            async with trio.open_nursery() as n:
                n.start_soon(pump, client, server)
                n.start_soon(pump, server, client)

        listeners = await nursery.start(trio.serve_tcp, handle, 0)
        proxy_port = listeners[0].socket.getsockname()[1]
        a = Transport("a", {"b": ("127.0.0.1", b.port)}, SECRET, Inbox(), backoff=(5.0, 5.0),
                      address_override=lambda peer, addr: ("127.0.0.1", proxy_port),
                      ticktime=ticktime)
        await nursery.start(a.run)
        with trio.fail_after(10):
            while not a.is_connected("b") or not b.is_connected("a"):
                await trio.sleep(0.01)
            await trio.sleep(4 * ticktime)  # idle: only ticks go over the link
            assert a.is_connected("b") and b.is_connected("a")
            frozen.set()
            while a.is_connected("b") or b.is_connected("a"):
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
