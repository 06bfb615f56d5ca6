"""Where a message's time goes in a cluster: a tracer loaded into every broker process.

Not part of the broker. Put this directory first on PYTHONPATH when starting a cluster and set
LATENCY_TRACE=<dir>; Python imports this `sitecustomize` at start-up, and when the broker's
server module is imported it wraps a few `quorum.driver.NodeDriver` methods, `AsyncLog.wait_durable`
and `QuorumQueue.publish` to write one line per message per event into <dir>/<pid>.txt:
"<node> <event> <send_ns> <monotonic_ns> [extra]", where send_ns is the publisher's
time.monotonic_ns() in the first 8 body bytes (probe.py and bench/broker_bench.py's latency
scenario put it there; one machine, one clock). Events: pub (the queue gets it), append_L /
append_F (handed to the WAL as leader / follower), durable (sync driver only), recv_append,
recv_resp (an AppendResp about it, and from whom), recv_commit (an Append or Heartbeat says it is
committed), commit (this replica knows it is committed), apply. See probe.py and analyze.py:

    LATENCY_TRACE=/tmp/trace PYTHONPATH=bench/latency_trace:. \
        amqp-broker-cluster start --nodes 3 --port 5741 --data-dir /tmp/tc
    python bench/latency_trace/probe.py amqp://guest:guest@localhost:5741/,...5742/,...5743/ 0 0 1 /tmp/out.json
    python bench/latency_trace/analyze.py /tmp/trace /tmp/out.json
"""
import os
if os.environ.get("LATENCY_TRACE"):
    import struct, time, atexit
    _out = []
    _fname = os.path.join(os.environ["LATENCY_TRACE"], f"{os.getpid()}.txt")
    def _emit(node, ev, sn, extra=""):
        _out.append(f"{node} {ev} {sn} {time.monotonic_ns()} {extra}\n")
        if len(_out) >= 300:
            _flush()
    def _flush():
        if _out:
            with open(_fname, "a") as f:
                f.writelines(_out)
            _out.clear()
    atexit.register(_flush)
    import importlib.abc, sys

    def _patch():
        import quorum.driver as D
        from quorum.raft import Append, AppendResp, Heartbeat, EntryKind
        from quorum.fifo import decode_command, Enqueue
        from quorum.replica import _decode_forward
        ND = D.NodeDriver
        seen = {}   # (group, index) -> sn
        commit_pending = {}  # group -> {index: sn}
        def sn_of(e):
            data = e.data
            try:
                if e.kind is EntryKind.FORWARDED:
                    data = _decode_forward(data).data
                cmd = decode_command(data)
            except Exception:
                return None
            if type(cmd) is not Enqueue or cmd.size < 8:
                return None
            p = cmd.payload
            return struct.unpack_from(">Q", p, len(p) - cmd.size)[0]
        def track(node, g, entries, ev):
            for e in entries:
                key = (g, e.index)
                sn = seen.get(key)
                if sn is None:
                    sn = sn_of(e)
                    if sn is None:
                        continue
                    seen[key] = sn
                    commit_pending.setdefault(g, {})[e.index] = sn
                _emit(node, ev, sn)
        pending = []
        orig_persist = ND._persist
        async def _persist(self, g, rd):
            if rd.entries:
                track(self.node_id, g.id, rd.entries, "append_L" if g.raft.is_leader else "append_F")
                pending.append((self.node_id, g.id, rd.entries[0].index, rd.entries[-1].index))
            return await orig_persist(self, g, rd)
        ND._persist = _persist
        from quorum.log import AsyncLog
        orig_wd = AsyncLog.wait_durable
        async def wait_durable(self, token):
            r = await orig_wd(self, token)
            for node, g, lo, hi in pending:
                for i in range(lo, hi + 1):
                    sn = seen.get((g, i))
                    if sn:
                        _emit(node, "durable", sn)
            pending.clear()
            return r
        AsyncLog.wait_durable = wait_durable
        orig_deliver = ND.deliver
        def deliver(self, peer, group, data):
            orig_deliver(self, peer, group, data)
            g = self._groups.get(group)
            if g is None or not g.inbox:
                return
            m = g.inbox[-1]
            t = type(m)
            if t is Append:
                if m.entries:
                    track(self.node_id, group, m.entries, "recv_append")
                cp = commit_pending.get(group)
                if cp:
                    for i in [i for i in cp if i <= m.commit]:
                        _emit(self.node_id, "recv_commit", cp[i], "append" + ("+e" if m.entries else ""))
            elif t is Heartbeat:
                cp = commit_pending.get(group)
                if cp:
                    for i in [i for i in cp if i <= m.commit]:
                        _emit(self.node_id, "recv_commit", cp[i], "hb")
            elif t is AppendResp and not m.reject:
                for i in range(max(1, m.index - 600), m.index + 1):
                    sn = seen.get((group, i))
                    if sn and (group, i, peer) not in resp_seen:
                        resp_seen.add((group, i, peer))
                        _emit(self.node_id, "recv_resp", sn, peer)
        resp_seen = set()
        ND.deliver = deliver
        orig_feed = ND._feed
        def _feed(self, g, ticks, now_ms):
            orig_feed(self, g, ticks, now_ms)
            cp = commit_pending.get(g.id)
            if cp:
                c = g.raft.commit_index
                for i in [i for i in cp if i <= c]:
                    _emit(self.node_id, "commit", cp.pop(i), "L" if g.raft.is_leader else "F")
        ND._feed = _feed
        orig_apply = ND._apply
        def _apply(self, g, committed):
            for e in committed:
                sn = seen.pop((g.id, e.index), None)
                if sn:
                    _emit(self.node_id, "apply", sn, "L" if g.raft.is_leader else "F")
            return orig_apply(self, g, committed)
        ND._apply = _apply
        import amqp_broker.queues.quorum as Q
        orig_pub = Q.QuorumQueue.publish
        def publish(self, message, now_ms, confirm=None):
            b = message.body
            if len(b) >= 8:
                _emit(self.runtime.node, "pub", struct.unpack_from(">Q", b, 0)[0])
            return orig_pub(self, message, now_ms, confirm)
        Q.QuorumQueue.publish = publish

    class _Hook(importlib.abc.MetaPathFinder):
        done = False
        def find_spec(self, name, path, target=None):
            if name == "amqp_broker.server.node" and not _Hook.done:
                _Hook.done = True
                try:
                    _patch()
                except Exception as e:
                    sys.stderr.write(f"lat12 tracer failed: {e!r}\n")
            return None
    sys.meta_path.insert(0, _Hook())
