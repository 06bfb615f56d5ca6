"""Start, stop and kill-9 `python -m amqp_broker` processes for integration tests.

The broker binds port 0 and the port is read back from its "listening on HOST:PORT" log line, so
tests never race for a free port. Used by conftest.py fixtures and restart/kill tests.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

_LISTEN = re.compile(rb"AMQP 0-9-1 listening on \S+:(\d+)")


class BrokerProcess:
    def __init__(self, data_dir: Path, log_path: Path, extra_args: tuple[str, ...] = (),
                 port: int = 0) -> None:
        self.data_dir = data_dir
        self.log_path = log_path
        self.extra_args = extra_args
        self.proc: subprocess.Popen | None = None
        self.fixed_port = port  # 0: a new free port on every start
        self.port = 0

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"

    def start(self, timeout: float = 30.0) -> "BrokerProcess":
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "amqp_broker", "--port", str(self.fixed_port), "--host", "127.0.0.1",
             "--management-port", "-1", "--data-dir", str(self.data_dir), *self.extra_args],
            stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            data = self.log_path.read_bytes()[offset:]
            m = _LISTEN.search(data)
            if m:
                self.port = int(m.group(1))
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited early:\n{self.log_tail()}")
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"broker did not start:\n{self.log_tail()}")

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM and wait: the clean shutdown path."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def kill(self) -> None:
        """kill -9: no chance to flush anything."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
