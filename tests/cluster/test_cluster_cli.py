"""`amqp-broker-cluster start` / `stop` as a user runs them (a subprocess): JSON lines that
parse, ports that answer, a second start refused while it runs, and stop leaving no process."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pika

from compat_tests.support.launcher import free_port

NODES = 2


def _cli(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "amqp_broker.cli.cluster", *argv],
                          capture_output=True, text=True, timeout=timeout)


def _free_run(k: int) -> int:
    """A base port with k consecutive ports free on loopback (the command takes base ports)."""
    for _ in range(100):
        base = free_port()
        socks = []
        try:
            for port in range(base, base + k):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError(f"no {k} consecutive free ports found")


def _gone(pid: int) -> bool:
    """No such process, or only a zombie (nothing reaps the detached nodes in a container)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def test_start_prints_a_json_line_per_node_and_stop_leaves_no_process(tmp_path):
    base = _free_run(4 * NODES)  # AMQP, management, Prometheus, distribution: one block each
    ports = ["--port", str(base), "--management-port", str(base + NODES),
             "--prometheus-port", str(base + 2 * NODES), "--dist-port", str(base + 3 * NODES)]
    started = _cli("start", "--nodes", str(NODES), *ports, "--data-dir", str(tmp_path))
    rows = [json.loads(line) for line in started.stdout.splitlines()]
    try:
        assert started.returncode == 0, started.stderr
        assert [r["node"] for r in rows] == ["rabbit1@localhost", "rabbit2@localhost"]
        assert [r["amqp_port"] for r in rows] == [base, base + 1]
        assert [r["management_port"] for r in rows] == [base + NODES, base + NODES + 1]
        for r in rows:
            nodes = httpx.get(f"http://127.0.0.1:{r['management_port']}/api/nodes",
                              auth=("guest", "guest")).json()
            assert {n["name"]: n["running"] for n in nodes} == {
                "rabbit1@localhost": True, "rabbit2@localhost": True}
            me = next(n for n in nodes if n["name"] == r["node"])
            assert me["os_pid"] == str(r["pid"])
            conn = pika.BlockingConnection(pika.URLParameters(
                f"amqp://guest:guest@127.0.0.1:{r['amqp_port']}/%2F"))
            assert conn.channel().is_open
            conn.close()
        again = _cli("start", "--nodes", str(NODES), *ports, "--data-dir", str(tmp_path))
        assert again.returncode == 1 and "is running" in again.stderr
    finally:
        stopped = _cli("stop", "--data-dir", str(tmp_path))
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stdout.splitlines() == [f"Stopped {r['node']} (pid {r['pid']})" for r in rows]
    assert all(_gone(r["pid"]) for r in rows)
    assert not (tmp_path / "cluster.json").exists()
    assert _cli("stop", "--data-dir", str(tmp_path)).returncode == 1  # nothing left to stop
