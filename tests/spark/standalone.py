"""A Spark standalone cluster for the tests: one master and one worker from pyspark's own jars.

    with StandaloneCluster(tmp_path) as cluster:
        cluster.submit([job.py, args...], py_files=zip)   # spark-submit --master spark://...
        cluster.applications()                            # the master's JSON view

Both daemons are `spark-class org.apache.spark.deploy.master.Master` / `...worker.Worker` on
loopback ports chosen at run time, in their own process groups (stopped by pid).  Their
environment has no PYTHONPATH, so executors import `amqp_broker` only from what the application
ships with `--py-files`, as the README tells users to do.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from compat_tests.support.launcher import free_ports

FAST_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def spark_home() -> Path:
    import pyspark
    return Path(pyspark.__file__).parent


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without PYTHONPATH (nothing of the test's own path leaks to executors)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_SUBMIT_ARGS")}
    env.update(SPARK_LOCAL_IP="127.0.0.1", SPARK_HOME=str(spark_home()),
               PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable, **extra)
    return env


class StandaloneCluster:
    def __init__(self, work_dir: Path, cores: int = 2, memory: str = "1g") -> None:
        self.work_dir = Path(work_dir)
        self.cores = cores
        self.memory = memory
        self.port, self.ui_port, self.worker_port, self.worker_ui_port = free_ports(4)
        self.procs: list[subprocess.Popen] = []

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _daemon(self, name: str, args: list[str]) -> subprocess.Popen:
        log_dir = self.work_dir / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        env = clean_env(SPARK_DAEMON_JAVA_OPTS=FAST_JVM, SPARK_DAEMON_MEMORY="256m",
                        SPARK_LOG_DIR=str(log_dir), SPARK_WORKER_DIR=str(self.work_dir / "worker"))
        with open(log_dir / f"{name}.log", "ab") as log:
            proc = subprocess.Popen([str(spark_home() / "bin" / "spark-class"), *args], env=env,
                                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append(proc)
        return proc

    def log_tail(self, chars: int = 3000) -> str:
        out = []
        for path in sorted((self.work_dir / "logs").glob("*.log")):
            out.append(f"--- {path.name}\n{path.read_text(errors='replace')[-chars:]}")
        return "\n".join(out)

    def start(self, timeout: float = 180.0) -> "StandaloneCluster":
        """Master first, then a worker joined to the master's bound address, then wait until
        the master's JSON view shows the worker ALIVE.

        The ports are read back from the daemons' logs: Spark moves a service to the next port
        when the one asked for is taken (the RabbitMQ-side run starts another cluster alongside),
        and in one CI run the UI port asked for answered with some other Spark page's HTML."""
        deadline = time.monotonic() + timeout
        self._daemon("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                "--port", str(self.port), "--webui-port", str(self.ui_port)])
        self.port = self._bound_port("master", "sparkMaster", deadline)
        self.ui_port = self._bound_port("master", "MasterUI", deadline)
        self._daemon("worker", ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                                "--port", str(self.worker_port), "--webui-port", str(self.worker_ui_port),
                                "--cores", str(self.cores), "--memory", self.memory,
                                "--work-dir", str(self.work_dir / "worker"), self.master_url])
        self.worker_port = self._bound_port("worker", "sparkWorker", deadline)
        last_error: Exception | None = None
        while time.monotonic() < deadline:
            self._check_running()
            try:
                state = self.state()
            except (OSError, ValueError) as exc:   # not listening yet, or not the JSON view
                last_error = exc
            else:
                if state.get("url") != self.master_url:
                    raise RuntimeError(f"the UI on port {self.ui_port} is another master's: "
                                       f"{state.get('url')} (ours: {self.master_url})")
                if any(w.get("state") == "ALIVE" for w in state.get("workers", [])):
                    return self
            time.sleep(1.0)
        raise RuntimeError(f"no ALIVE worker within {timeout}s (last: {last_error!r})\n"
                           f"{self.log_tail()}")

    def _check_running(self) -> None:
        for proc in self.procs:
            if proc.poll() is not None:
                raise RuntimeError(f"a Spark daemon exited with {proc.returncode}\n{self.log_tail()}")

    def _bound_port(self, daemon: str, service: str, deadline: float) -> int:
        """The port a daemon's log says `service` was started on."""
        found = re.compile(rf"Successfully started service '{service}' on port (\d+)")
        log = self.work_dir / "logs" / f"{daemon}.log"
        while time.monotonic() < deadline:
            self._check_running()
            match = found.search(log.read_text(errors="replace"))
            if match:
                return int(match.group(1))
            time.sleep(0.2)
        raise RuntimeError(f"{daemon} did not start {service} in time\n{self.log_tail()}")

    def state(self) -> dict:
        """The master's JSON view (url, workers, activeapps, completedapps)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as resp:
            return json.loads(resp.read())

    def _submit_command(self, argv: list[str], py_files: Path,
                        conf: dict[str, str] | None) -> tuple[list[str], dict[str, str]]:
        settings = {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
                    "spark.driver.memory": "512m", "spark.executor.memory": "512m",
                    "spark.executor.cores": str(self.cores), "spark.ui.enabled": "false",
                    "spark.sql.shuffle.partitions": "2", "spark.speculation": "false",
                    "spark.pyspark.python": sys.executable,
                    "spark.executor.extraJavaOptions": FAST_JVM, **(conf or {})}
        cmd = [str(spark_home() / "bin" / "spark-submit"), "--master", self.master_url,
               "--driver-java-options", FAST_JVM, "--py-files", str(py_files)]
        for key, value in settings.items():
            cmd += ["--conf", f"{key}={value}"]
        # Where spark-submit runs, the package is installed (the README's `python -c 'import
        # amqp_broker...'` needs it there too); Spark's driver-side data-source processes import it
        # from that environment, not from --py-files.  PYTHONPATH=<the zip> stands in for that
        # install here, so the driver runs this checkout's code; executors see only --py-files.
        return [*cmd, *argv], clean_env(PYTHONPATH=str(py_files))

    def submit(self, argv: list[str], *, py_files: Path, timeout: float = 400.0,
               conf: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """spark-submit an application to this cluster (client mode) and wait for it."""
        cmd, env = self._submit_command(argv, py_files, conf)
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout,
                              cwd=self.work_dir)

    def start_submit(self, argv: list[str], *, py_files: Path, output: Path,
                     conf: dict[str, str] | None = None) -> subprocess.Popen:
        """spark-submit in the background, stdout and stderr into `output`."""
        cmd, env = self._submit_command(argv, py_files, conf)
        with open(output, "wb") as out:
            return subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                    cwd=self.work_dir)

    def executor_pids(self) -> list[int]:
        """The executor JVMs this cluster's worker runs now (their command lines name it in
        `--worker-url`)."""
        found = subprocess.run(["pgrep", "-f", "CoarseGrainedExecutorBackend"],
                               capture_output=True, text=True).stdout.split()
        mine = []
        for pid in map(int, found):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if f"spark://Worker@127.0.0.1:{self.worker_port}".encode() in cmdline:
                mine.append(pid)
        return mine

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.procs.clear()

    def __enter__(self) -> "StandaloneCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
