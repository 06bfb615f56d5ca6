"""The one way tests start this project's broker: the `amqp-broker` command as a subprocess.

Used by compat_tests/conftest.py (when no --broker-url / BROKER_URL is given), by tests/ (the
integration, management, CLI and Spark fixtures) and by bench/ (`free_port`, `free_ports`).
The broker binds port 0 for AMQP, the management API and Prometheus metrics, and the bound ports
are read back from its start-up log lines, so tests never race for a port (a fixed `port=` is
kept across restarts for reconnect tests).  Output goes to `<work_dir>/broker.log`; every start
failure raises `LaunchError` with the log tail.  `stop()` is SIGTERM (the clean shutdown path),
`kill()` is kill -9, `pause()` / `resume()` SIGSTOP / SIGCONT; `start()` again reuses the same
data directory.  `start()` is `spawn()` then `wait_ready()`: a cluster
(`compat_tests/support/cluster.py`) spawns every node before waiting for any.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["Broker", "LaunchError", "free_port", "free_ports", "launch_our_broker"]

_READY = re.compile(rb"amqp-broker \S+ ready on port (\d+)")
_MGMT = re.compile(rb"management API on http://\S+?:(\d+)/api")
_METRICS = re.compile(rb"Prometheus metrics on \S+?:(\d+)/metrics")

# Management and metrics on loopback, port 0; the caller's config text comes after it and wins.
_HTTP_CONF = ("management.tcp.ip = 127.0.0.1\nmanagement.tcp.port = 0\n"
              "prometheus.tcp.ip = 127.0.0.1\nprometheus.tcp.port = 0\n")


# free_ports picks from here up to the ephemeral range (below: RabbitMQ's 4369, 5672-5675 and
# their +10000 management ports are all under it; its +20000 distribution ports are not fixed
# here, and a port in use is skipped anyway)
_FIRST_PORT = 10000


class LaunchError(RuntimeError):
    """The broker did not start: the message ends with the tail of its log."""


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux's default when unknown)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_ports(k: int) -> list[int]:
    """k distinct loopback ports nothing listened on a moment ago (for multi-node tests, the
    quorum transport and "broker is down" URLs).  The sockets are held together so the ports
    differ.

    They are taken below the kernel's ephemeral range when it leaves room: a port from that
    range (what binding port 0 gives) can be taken by any outgoing connection between now and
    the broker's bind, and a node then fails to start with "Address already in use" (seen once
    in CI, on a cluster node's metrics port)."""
    low = _ephemeral_low()
    socks: list[socket.socket] = []
    try:
        if low - _FIRST_PORT >= 1000:
            rng = random.Random()
            tries = 0
            while len(socks) < k and tries < 50 * k:
                tries += 1
                s = socket.socket()
                try:
                    s.bind(("127.0.0.1", rng.randrange(_FIRST_PORT, low)))
                except OSError:
                    s.close()
                    continue
                socks.append(s)
        while len(socks) < k:   # no room below the ephemeral range: the kernel's pick
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def free_port() -> int:
    return free_ports(1)[0]


def _command() -> str:
    """The `amqp-broker` console script of the running Python (else the one on PATH)."""
    beside = Path(sys.executable).with_name("amqp-broker")
    exe = str(beside) if beside.exists() else shutil.which("amqp-broker")
    if exe is None:
        raise LaunchError("the `amqp-broker` command is not installed (pip install -e .)")
    return exe


class Broker:
    """One `amqp-broker` process with its data directory and log under `work_dir`.

    args: extra command-line flags; config: rabbitmq.conf text (written to
    `<work_dir>/broker.conf`); env: extra environment variables; management: serve the
    management API and metrics (on free ports) or not (`--management-port -1`); port: a fixed
    AMQP port kept across restarts (0: a new free one on every start).
    """

    def __init__(self, work_dir: Path, *, args: tuple[str, ...] = (), config: str | None = None,
                 env: dict[str, str] | None = None, management: bool = True,
                 port: int = 0) -> None:
        self.work_dir = Path(work_dir)
        self.data_dir = self.work_dir / "data"
        self.log_path = self.work_dir / "broker.log"
        self.args = tuple(args)
        self.config = config
        self.env = dict(env or {})
        self.management = management
        self.fixed_port = port
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.mgmt_port = 0
        self.metrics_port = 0
        self.paused = False
        self._log_offset = 0  # where this run's output starts in the log

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"

    @property
    def mgmt_url(self) -> str:
        return f"http://127.0.0.1:{self.mgmt_port}" if self.mgmt_port else ""

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}" if self.metrics_port else ""

    def _argv(self) -> list[str]:
        argv = [_command(), "--host", "127.0.0.1", "--port", str(self.fixed_port),
                "--data-dir", str(self.data_dir)]
        if not self.management:
            argv += ["--management-port", "-1"]
        text = (_HTTP_CONF if self.management else "") + (self.config or "")
        if text:
            conf = self.work_dir / "broker.conf"
            conf.write_text(text)
            argv += ["--config", str(conf)]
        return argv + list(self.args)

    def start(self, timeout: float = 30.0) -> "Broker":
        """Start (again, on the same data directory) and wait for the "ready" log line."""
        self.spawn()
        return self.wait_ready(timeout)

    def spawn(self) -> "Broker":
        """Start the process and return at once (`wait_ready` reads the ports back)."""
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self._log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        self.paused = False
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self._argv(), stdout=log, stderr=subprocess.STDOUT,
                                         env={**os.environ, **self.env})
        return self

    def wait_ready(self, timeout: float = 30.0) -> "Broker":
        """Wait for this run's "ready" log line; LaunchError (process killed) if it exits or
        the time runs out first."""
        deadline = time.monotonic() + timeout
        while True:
            data = self.log_path.read_bytes()[self._log_offset:]
            ready = _READY.search(data)
            if ready:
                break
            if self.proc.poll() is not None:
                raise LaunchError(f"amqp-broker exited with {self.proc.returncode} before it was "
                                  f"ready:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                self.kill()
                raise LaunchError(f"amqp-broker not ready within {timeout}s:\n{self.log_tail()}")
            time.sleep(0.05)
        self.port = int(ready.group(1))
        mgmt, metrics = _MGMT.search(data), _METRICS.search(data)
        self.mgmt_port = int(mgmt.group(1)) if mgmt else 0
        self.metrics_port = int(metrics.group(1)) if metrics else 0
        if self.management and not (mgmt and metrics):
            self.kill()
            raise LaunchError(f"amqp-broker started without its management API or metrics:\n"
                              f"{self.log_tail()}")
        return self

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM and wait (the clean shutdown path); the exit code, or None if it had to be
        killed."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        self.resume()  # a stopped process handles SIGTERM only once it runs again
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def kill(self) -> None:
        """kill -9: no chance to flush anything."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def pause(self) -> None:
        """SIGSTOP: the process freezes with its sockets open (a hung node, not a dead one)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGSTOP)
            self.paused = True

    def resume(self) -> None:
        """SIGCONT after `pause`."""
        if self.paused and self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
        self.paused = False

    def restart(self, timeout: float = 30.0) -> "Broker":
        """Clean stop, then start on the same data directory."""
        self.stop()
        return self.start(timeout)

    def __enter__(self) -> "Broker":
        return self.start() if self.proc is None else self

    def __exit__(self, *exc) -> None:
        self.stop()


def launch_our_broker(work_dir: Path, timeout: float = 30.0) -> Broker:
    """A started broker with the management API on (the compat and Spark sessions' broker).
    Message rates are sampled every second, as `.ci/rabbitmq.sh` configures the RabbitMQ oracle."""
    return Broker(work_dir, config="collect_statistics_interval = 1000\n").start(timeout)
