"""`bench/backlog.py` at a small size, as CI runs it (this broker only; by hand it runs beside
RabbitMQ): the script publishes a quorum and a classic backlog, kills the broker with both in
place, restarts it, waits for both queues to come back whole and consumes everything, checking
that each queue gives its messages back in publish order."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_backlog_script_runs_at_a_small_size():
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "backlog.py"), "--count", "2000", "--size", "1024",
         "--no-rabbit"], capture_output=True, text=True, timeout=600, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(ROOT), os.environ.get("PYTHONPATH", "")])})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    text = out.stdout
    assert "both queues back with 2000" in text
    for qtype in ("quorum", "classic"):
        assert re.search(rf"{qtype} +all 2000 consumed back in publish order", text), qtype
    for figure in ("quorum RSS B/msg", "classic RSS B/msg", "recovery s", "RSS MiB drained"):
        assert f"| {figure} |" in text
