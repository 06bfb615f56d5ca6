"""`amqp-broker-cluster`: start and stop a cluster of `amqp-broker` nodes on this machine.

Entry point `amqp_broker.cli.cluster:main` (pyproject). `start --nodes N --port P --data-dir
DIR` writes each node's broker.conf and the shared cookie under DIR (the layout of
`cli/local_cluster.py`), starts the nodes detached from this command (their own sessions,
output in DIR/rabbitK/broker.log), records their pids in DIR/cluster.json, waits until the
cluster has formed, and prints one JSON line per node. `stop --data-dir DIR` sends the
recorded nodes SIGTERM (the clean shutdown), SIGKILL after a grace, and says which it stopped.
A second `start` on the same DIR restarts the nodes on their data.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence, TextIO

from .local_cluster import (LocalNode, NotFormed, log_tail, node_config, plan_nodes,
                            ports_in_use, share_cookie, wait_formed)

__all__ = ["main", "build_parser"]

_STATE = "cluster.json"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="amqp-broker-cluster",
                                description="Start or stop a local cluster of amqp-broker nodes "
                                            "(rabbit1@localhost, rabbit2@localhost, ...).")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    start = sub.add_parser("start", help="start N nodes and wait until they have formed a cluster")
    start.add_argument("--nodes", type=int, default=3, help="how many nodes (default 3)")
    start.add_argument("--port", type=int, default=5672,
                       help="AMQP port of rabbit1; node K gets PORT+K-1 (default 5672)")
    start.add_argument("--management-port", type=int, default=None,
                       help="management API port of rabbit1 (default PORT+10000)")
    start.add_argument("--prometheus-port", type=int, default=None,
                       help="Prometheus port of rabbit1 (default management port + 90)")
    start.add_argument("--dist-port", type=int, default=None,
                       help="inter-node port of rabbit1 (default PORT+20000)")
    start.add_argument("--data-dir", type=Path, required=True,
                       help="where the nodes' configs, data and logs go (DIR/rabbitK/)")
    start.add_argument("--timeout", type=float, default=60.0,
                       help="seconds to wait for the cluster to form (default 60)")
    stop = sub.add_parser("stop", help="stop the nodes started from DIR")
    stop.add_argument("--data-dir", type=Path, required=True)
    stop.add_argument("--timeout", type=float, default=15.0,
                      help="seconds after SIGTERM before SIGKILL (default 15)")
    return p


def main(argv: list[str] | None = None, *, out: TextIO | None = None,
         err: TextIO | None = None) -> int:
    args = build_parser().parse_args(argv)
    out, err = out or sys.stdout, err or sys.stderr
    root = args.data_dir.expanduser().resolve()
    if args.command == "start":
        return _start(args, root, out, err)
    return _stop(root, args.timeout, out, err)


# -- start -------------------------------------------------------------------------------------

def _start(args: argparse.Namespace, root: Path, out: TextIO, err: TextIO) -> int:
    running = [n for n in _recorded(root) if _alive(n)]
    if running:
        print(f"amqp-broker-cluster: a cluster started from {root} is running "
              f"({', '.join(_who(n) for n in running)}); stop it first: "
              f"amqp-broker-cluster stop --data-dir {root}", file=err)
        return 1
    try:
        nodes = plan_nodes(root, args.nodes, amqp=args.port, management=args.management_port,
                           prometheus=args.prometheus_port, dist=args.dist_port)
    except ValueError as e:
        print(f"amqp-broker-cluster: {e}", file=err)
        return 2
    busy = ports_in_use(nodes)
    if busy:
        print(f"amqp-broker-cluster: port(s) {', '.join(map(str, busy))} already in use on "
              f"127.0.0.1; choose others with --port / --management-port / --prometheus-port / "
              f"--dist-port", file=err)
        return 1
    for node in nodes:
        node.directory.mkdir(parents=True, exist_ok=True)
        node.config_path.write_text(node_config(node, nodes))
    share_cookie(nodes)
    started = time.monotonic()
    procs = [_spawn(node) for node in nodes]
    _write_state(root, nodes, procs)  # before waiting: `stop` works even if we are interrupted
    try:
        wait_formed(nodes, args.timeout, check=lambda: _exited(nodes, procs))
    except (NotFormed, KeyboardInterrupt) as e:
        reason = str(e) or "interrupted"
        print(f"amqp-broker-cluster: {reason}; stopping the nodes", file=err)
        for node, proc in zip(nodes, procs):
            print(f"--- {node.name}: {node.log_path} ---\n{log_tail(node.log_path, 15)}", file=err)
        _stop(root, 10.0, err, err)
        return 1
    for node, proc in zip(nodes, procs):
        print(json.dumps({"node": node.name, "amqp_port": node.amqp_port,
                          "management_port": node.management_port, "pid": proc.pid}), file=out)
    print(f"amqp-broker-cluster: {len(nodes)} node(s) formed a cluster in "
          f"{time.monotonic() - started:.1f}s; logs in {root}/rabbitK/broker.log; "
          f"stop with: amqp-broker-cluster stop --data-dir {root}", file=err)
    return 0


def _spawn(node: LocalNode) -> subprocess.Popen:
    """The node as its own session, so it outlives this command and ignores its Ctrl-C."""
    with open(node.log_path, "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "amqp_broker", "--config", str(node.config_path),
             "--data-dir", str(node.data_dir)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)


def _exited(nodes: Sequence[LocalNode], procs: Sequence[subprocess.Popen]) -> str | None:
    for node, proc in zip(nodes, procs):
        if proc.poll() is not None:
            return f"{node.name} exited with code {proc.returncode} before the cluster formed"
    return None


# -- the record of what runs -------------------------------------------------------------------

def _write_state(root: Path, nodes: Sequence[LocalNode], procs: Sequence[subprocess.Popen]) -> None:
    rows = [{"node": n.name, "pid": p.pid, "amqp_port": n.amqp_port,
             "management_port": n.management_port, "config": str(n.config_path)}
            for n, p in zip(nodes, procs)]
    tmp = root / (_STATE + ".tmp")
    tmp.write_text(json.dumps({"nodes": rows}, indent=1) + "\n")
    os.replace(tmp, root / _STATE)


def _recorded(root: Path) -> list[dict]:
    try:
        return json.loads((root / _STATE).read_text())["nodes"]
    except FileNotFoundError:
        return []


def _who(row: dict) -> str:
    return f"{row['node']} pid {row['pid']}"


def _alive(row: dict) -> bool:
    """The recorded process still runs and is that node (a pid can be reused: on Linux its
    command line must name the node's config). A zombie is not alive."""
    pid = row["pid"]
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False  # someone else's process now
    proc = Path(f"/proc/{pid}")
    if not proc.exists():
        return True  # no /proc (not Linux): trust the pid
    try:
        state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        cmdline = (proc / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return False  # gone meanwhile
    return state != "Z" and row["config"].encode() in cmdline


# -- stop --------------------------------------------------------------------------------------

def _stop(root: Path, grace: float, out: TextIO, err: TextIO) -> int:
    rows = _recorded(root)
    if not rows:
        print(f"amqp-broker-cluster: no cluster was started from {root} "
              f"({root / _STATE} is missing)", file=err)
        return 1
    running = []
    for row in rows:
        if _alive(row):
            os.kill(row["pid"], signal.SIGTERM)
            running.append(row)
        else:
            print(f"{row['node']} (pid {row['pid']}) was not running", file=out)
    deadline = time.monotonic() + grace
    while any(_alive(r) for r in running) and time.monotonic() < deadline:
        time.sleep(0.05)
    for row in running:
        if _alive(row):
            os.kill(row["pid"], signal.SIGKILL)
            print(f"Killed {row['node']} (pid {row['pid']}): still running {grace:g}s after "
                  f"SIGTERM", file=out)
        else:
            print(f"Stopped {row['node']} (pid {row['pid']})", file=out)
    deadline = time.monotonic() + 5.0  # SIGKILL is not instant either
    while any(_alive(r) for r in running) and time.monotonic() < deadline:
        time.sleep(0.02)
    (root / _STATE).unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
