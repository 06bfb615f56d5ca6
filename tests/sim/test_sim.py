"""Deterministic simulation of 3, 5 and 7 node Raft clusters under message loss, duplication,
reordering, partitions (also one-way), crashes that lose unsynced writes (or keep a torn
prefix of them), restarts, membership changes and ReadIndex reads; safety (election safety,
log matching, state-machine safety, leader completeness, read linearizability) is checked
after every step and liveness after the network heals (see cluster.py). Seeds vary the
options too: odd seeds read old entries back through a LogReader, every third seed runs
without pre-vote/check-quorum, most use early leader messages.

CI runs a fixed set of seeds. A failure prints its seed; replay it with
    SIM_SEED=<seed> SIM_SIZE=<n> SIM_STEPS=<steps> python -m pytest tests/sim -k replay
(add SIM_QUEUE=1 for a run of the quorum queue simulation, test_queue_sim.py) and sweep more
seeds with SIM_SWEEP=<count> (optionally SIM_STEPS) -k sweep.
"""

from __future__ import annotations

import os

import pytest

from .cluster import Faults, run_seed
from .queue_world import run_queue_seed

CI_SEEDS = 50
CI_STEPS = 3000


@pytest.mark.parametrize("size", [3, 5, 7])
@pytest.mark.parametrize("block", range(0, CI_SEEDS, 10))
def test_cluster_survives_chaos(size, block):
    for seed in range(block, min(block + 10, CI_SEEDS)):
        c = run_seed(seed * 1000 + size, size, CI_STEPS)
        c.settle()
        assert c.checker.max_committed > 0
        assert all(n.applied == c.checker.max_committed for n in c.nodes.values())


@pytest.mark.parametrize("size", [3, 5])
@pytest.mark.parametrize("block", range(0, 30, 10))
def test_cluster_survives_chaos_with_membership_changes(size, block):
    faults = Faults(membership=0.004)
    for seed in range(block, block + 10):
        c = run_seed(seed * 1000 + size + 7, size, CI_STEPS, faults)
        c.settle()
        members = c.members()
        assert all(c.nodes[i].applied == c.checker.max_committed for i in members)


@pytest.mark.skipif("SIM_SEED" not in os.environ, reason="set SIM_SEED to replay one seed")
def test_replay():
    seed = int(os.environ["SIM_SEED"])
    size = int(os.environ.get("SIM_SIZE", "3"))
    steps = int(os.environ.get("SIM_STEPS", str(CI_STEPS)))
    if os.environ.get("SIM_QUEUE"):
        c = run_queue_seed(seed, size, steps)
        print(dict(c.app.checker.stats))
    else:
        membership = float(os.environ.get("SIM_MEMBERSHIP", "0"))
        c = run_seed(seed, size, steps, Faults(membership=membership))
    print(c.status())
    print("\n".join(c.trace))
    assert c.checker.max_committed > 0


@pytest.mark.slow
@pytest.mark.skipif("SIM_SWEEP" not in os.environ, reason="set SIM_SWEEP=<seeds> for a long sweep")
def test_sweep():
    count = int(os.environ["SIM_SWEEP"])
    steps = int(os.environ.get("SIM_STEPS", "20000"))
    start = int(os.environ.get("SIM_START", "100000"))
    for seed in range(start, start + count):
        for size in (3, 5, 7):
            run_seed(seed, size, steps)
            run_seed(seed, size, steps, Faults(membership=0.004))


_FINGERPRINT = """
import hashlib
from tests.sim.cluster import Faults, run_seed
from tests.sim.queue_world import run_queue_seed
c = run_seed(4242, 5, 1500, Faults(membership=0.004))
print(c.steps, c.now, hashlib.sha256(repr(list(c.trace)).encode()).hexdigest(), c.status())
q = run_queue_seed(4242, 3, 1500)
print(q.steps, q.now, sorted(q.app.checker.stats.items()), sorted(q.app.checker.settled.items()))
"""


def test_a_seed_replays_identically_whatever_the_string_hash_seed():
    """The cluster (and the quorum queue on it) never iterates a set of str, so Python's
    per-process hash randomisation cannot change the run: two processes with different
    PYTHONHASHSEED agree exactly."""
    import pathlib
    import subprocess
    import sys

    root = pathlib.Path(__file__).resolve().parents[2]
    outs = []
    for hash_seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=hash_seed, PYTHONPATH=str(root))
        run = subprocess.run([sys.executable, "-c", _FINGERPRINT], env=env, cwd=root,
                             capture_output=True, text=True, timeout=120, check=True)
        outs.append(run.stdout)
    assert outs[0] == outs[1] and outs[0].strip()
