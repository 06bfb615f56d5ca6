"""Start this project's broker (`amqp-broker`) as a subprocess for a compat-test session.

Called by conftest.py when neither --broker-url nor BROKER_URL is given.  The broker gets a free
port and a temporary data directory; its output goes to a log file whose tail is shown if it dies.
"""

from __future__ import annotations

import dataclasses
import shutil
import socket
import subprocess
import time
from pathlib import Path


class LaunchError(RuntimeError):
    pass


@dataclasses.dataclass
class LaunchedBroker:
    url: str
    process: subprocess.Popen
    log_path: Path
    mgmt_url: str = ""  # the management HTTP API (for tests that set policies)

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


def launch_our_broker(work_dir: Path, timeout: float = 30.0) -> LaunchedBroker:
    """Start `amqp-broker --port P --management-port M --data-dir D`; raise LaunchError with the
    log tail on failure."""
    exe = shutil.which("amqp-broker")
    if exe is None:
        raise LaunchError("the `amqp-broker` command is not installed (pip install -e .); "
                          "or pass --broker-url / BROKER_URL")
    port = _free_port()
    mgmt_port = _free_port()
    data_dir = work_dir / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    log_path = work_dir / "broker.log"
    log = open(log_path, "wb")
    proc = subprocess.Popen([exe, "--port", str(port), "--management-port", str(mgmt_port),
                             "--data-dir", str(data_dir)],
                            stdout=log, stderr=subprocess.STDOUT)
    log.close()
    broker = LaunchedBroker(f"amqp://guest:guest@127.0.0.1:{port}/", proc, log_path,
                            f"http://127.0.0.1:{mgmt_port}")
    deadline = time.monotonic() + timeout
    while not (_accepts(port) and _accepts(mgmt_port)):
        if proc.poll() is not None:
            raise LaunchError(f"amqp-broker exited with {proc.returncode} before listening:\n"
                              + broker.log_tail())
        if time.monotonic() > deadline:
            broker.stop()
            raise LaunchError(f"amqp-broker did not accept on port {port} within {timeout}s:\n"
                              + broker.log_tail())
        time.sleep(0.1)
    return broker
