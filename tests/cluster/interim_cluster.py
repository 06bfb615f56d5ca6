"""A stand-in for `compat_tests/support/cluster.py` (`LocalCluster`, being written on another
branch): N `amqp-broker` processes on loopback forming one cluster, with kill -9, SIGSTOP /
SIGCONT and restart per node, and per-link dial overrides so a test can route inter-node links
through `proxy.py`. Used by this package's fixtures (`conftest.py`) until that module lands;
then the fixtures switch to it and this file goes.

Each node is a `compat_tests.support.launcher.Broker` (its log, data dir, ready line) with a
fixed AMQP port (kept across restarts so clients reconnect to the same address), a fixed
distribution port, and management and metrics on free ports.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Callable

from compat_tests.support.launcher import Broker

__all__ = ["LocalCluster"]

_COOKIE = "JEPSENCOOKIEFORTESTS"


class LocalCluster:
    """`dial(i, j)`: the port node i dials to reach node j (None: j's distribution port);
    nodes are numbered from 0, named rabbit1@localhost, rabbit2@localhost, ..."""

    def __init__(self, work_dir: Path, size: int, *, amqp_base: int, dist_base: int,
                 dial: Callable[[int, int], int | None] | None = None,
                 extra_config: str = "") -> None:
        self.size = size
        self.names = [f"rabbit{i + 1}@localhost" for i in range(size)]
        self.dist_ports = [dist_base + i for i in range(size)]
        self.amqp_ports = [amqp_base + i for i in range(size)]
        self._dial = dial or (lambda i, j: None)
        self.brokers = [Broker(Path(work_dir) / f"n{i + 1}", config=self._config(i, extra_config),
                               env={"RABBITMQ_ERLANG_COOKIE": _COOKIE}, port=self.amqp_ports[i])
                        for i in range(size)]
        self.paused: set[int] = set()

    def _config(self, i: int, extra: str) -> str:
        lines = [f"node_name = {self.names[i]}",
                 f"distribution.listener.port_range.min = {self.dist_ports[i]}",
                 "cluster_formation.peer_discovery_backend = classic_config"]
        for j, name in enumerate(self.names):
            port = self.dist_ports[j] if j == i else (self._dial(i, j) or self.dist_ports[j])
            lines.append(f"cluster_formation.classic_config.nodes.{j + 1} = {name}:{port}")
        return "\n".join(lines) + "\n" + extra

    # -- addresses ----------------------------------------------------------------------------
    def url(self, i: int) -> str:
        return self.brokers[i].url

    def mgmt_url(self, i: int) -> str:
        return self.brokers[i].mgmt_url

    def pid(self, i: int) -> int | None:
        proc = self.brokers[i].proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def is_running(self, i: int) -> bool:
        return self.pid(i) is not None

    # -- life cycle ---------------------------------------------------------------------------
    def start(self, timeout: float = 30.0) -> "LocalCluster":
        """Start every node; each is ready once its own listeners are up (the others join as
        they come)."""
        import threading
        errors: list[BaseException] = []

        def one(b: Broker) -> None:
            try:
                b.start(timeout)
            except BaseException as e:
                errors.append(e)

        threads = [threading.Thread(target=one, args=(b,)) for b in self.brokers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            self.stop()
            raise errors[0]
        return self

    def stop(self) -> None:
        for i in range(self.size):
            self.resume(i)
        for b in self.brokers:
            b.stop()

    def kill(self, i: int) -> None:
        self.paused.discard(i)
        self.brokers[i].kill()

    def restart(self, i: int, timeout: float = 30.0) -> None:
        """Start node i again on its data directory (after `kill`, or a clean stop)."""
        if self.is_running(i):
            self.brokers[i].stop()
        self.brokers[i].start(timeout)

    def pause(self, i: int) -> None:
        pid = self.pid(i)
        if pid is not None:
            os.kill(pid, signal.SIGSTOP)
            self.paused.add(i)

    def resume(self, i: int) -> None:
        pid = self.pid(i)
        if pid is not None and i in self.paused:
            os.kill(pid, signal.SIGCONT)
        self.paused.discard(i)

    def log_tail(self, i: int, n: int = 40) -> str:
        return self.brokers[i].log_tail(n)
