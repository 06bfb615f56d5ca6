"""Property tests over random command logs: invariants after every step (model.py),
snapshot + tail replay equal to full replay, codec replay, and determinism across
processes with different string hash seeds."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from quorum.fifo import (QueueConfig, apply, decode_command, digest, encode_command, init,
                         restore, snapshot)

from .model import run
from .settings import EXAMPLES

_ttl = st.none() | st.sampled_from([0, 5, 30, 200])


@st.composite
def configs(draw, sac=None):
    overflow = draw(st.sampled_from(["drop-head", "reject-publish", "reject-publish-dlx"]))
    return QueueConfig(
        name="q",
        max_length=draw(st.none() | st.integers(1, 6)),
        max_bytes=draw(st.none() | st.integers(20, 120)),
        overflow=overflow,
        delivery_limit=draw(st.sampled_from([None, -1, 0, 1, 2, 20])),
        msg_ttl=draw(st.none() | st.sampled_from([10, 100])),
        expires=draw(st.none() | st.sampled_from([50, 500])),
        # always a DLX, so every message that leaves is visible to the ledger
        dead_letter_exchange="dlx",
        dead_letter_strategy=draw(st.sampled_from(["at-most-once", "at-least-once"])),
        single_active_consumer=draw(st.booleans()) if sac is None else sac,
    )


_c = st.integers(0, 2)
ops = st.one_of(
    st.tuples(st.just("enq"), st.integers(0, 1), st.integers(1, 30),
              st.none() | st.integers(0, 9), _ttl,
              st.sampled_from([0, 0, 0, 0, 1, 2, 3])),
    st.tuples(st.just("checkout"), _c, st.integers(0, 4), st.integers(0, 2),
              st.sampled_from([False, False, False, True])),
    st.tuples(st.sampled_from(["settle", "settle", "return", "discard"]), _c,
              st.integers(-3, 3)),
    st.tuples(st.just("requeue"), _c),
    st.tuples(st.just("unsent"), _c, st.integers(1, 3)),
    st.tuples(st.just("credit"), _c, st.integers(0, 4), st.booleans()),
    st.tuples(st.just("cancel"), _c, st.booleans()),
    st.tuples(st.just("dequeue"), st.booleans()),
    st.tuples(st.just("settle"), st.just(3), st.integers(1, 2)),
    st.tuples(st.just("down"), st.integers(0, 4)),
    st.tuples(st.sampled_from(["nodedown", "nodeup"]), st.integers(0, 1)),
    st.tuples(st.sampled_from(["purge", "tick"])),
    st.tuples(st.just("dlxsettle"), st.integers(1, 3)),
    st.tuples(st.just("config"), configs(sac=False)),
)
logs = st.lists(st.tuples(st.integers(0, 40), ops), max_size=60)
_settings = settings(max_examples=EXAMPLES, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow])




@_settings
@given(configs(), logs)
def test_invariants_hold_after_every_step(cfg, log):
    run(cfg, log)


@settings(max_examples=max(5, EXAMPLES // 4), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(configs(), st.lists(st.tuples(st.integers(0, 40), ops), min_size=60, max_size=150))
def test_invariants_hold_over_long_logs(cfg, log):
    run(cfg, log)


@_settings
@given(configs(), logs, st.integers(0, 60))
def test_snapshot_then_tail_equals_full_replay(cfg, log, cut):
    h, applied = run(cfg, log)
    entries = h.log
    cut = min(cut, len(entries))
    head = init(h.config, h.created)
    for meta, cmd in entries[:cut]:
        apply(meta, cmd, head)
    resumed = restore(snapshot(head))
    assert digest(resumed) == digest(head)
    tail_effects = [apply(meta, cmd, resumed) for meta, cmd in entries[cut:]]
    assert digest(resumed) == digest(h.q)
    # the replayed tail decides exactly what the original run decided
    assert tail_effects == applied[cut:]


@_settings
@given(configs(), logs)
def test_replay_of_encoded_log_gives_the_same_state(cfg, log):
    h, _ = run(cfg, log)
    q = init(h.config, h.created)
    for meta, cmd in h.log:
        apply(meta, decode_command(encode_command(cmd)), q)
    assert digest(q) == digest(h.q)


_SCRIPT = """
import json, sys
from tests.fifo.model import run
from tests.fifo.test_properties import scenario_log
from quorum.fifo import digest
h, _ = run(*scenario_log())
print(json.dumps(digest(h.q)))
"""


def scenario_log():
    cfg = QueueConfig(name="q", single_active_consumer=False, delivery_limit=2,
                      dead_letter_exchange="dlx", max_length=4, msg_ttl=100)
    log = []
    for i in range(40):
        log.append((7, ("enq", i % 2, 10 + i, (i * 3) % 10, None, 0)))
        log.append((1, ("checkout", i % 3, i % 4, i % 2, False)))
        log.append((3, (["settle", "return", "discard"][i % 3], i % 3, 1)))
        if i % 7 == 0:
            log.append((50, ("down", i % 4)))
        if i % 11 == 0:
            log.append((5, ("nodedown", i % 2)))
            log.append((5, ("nodeup", i % 2)))
    return cfg, log


def test_same_digest_under_different_hash_seeds():
    """Replicas are separate processes with different str hashing: same log, same state."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    digests = set()
    for seed in ("1", "2"):
        out = subprocess.run([sys.executable, "-c", _SCRIPT], cwd=root, capture_output=True,
                             text=True, env={**os.environ, "PYTHONHASHSEED": seed},
                             timeout=60)
        assert out.returncode == 0, out.stderr
        digests.add(json.loads(out.stdout))
    h, _ = run(*scenario_log())
    from quorum.fifo import digest
    digests.add(digest(h.q))
    assert len(digests) == 1


# Found by the long-log property (session 21): a single-active consumer re-subscribed under its
# key while its cancelled self held unacked messages and a suspected incarnation of it waited.
# The re-subscription left the waiting one behind, and at node-up that waiting consumer was put
# in the service queue as if it were active.
_SAC_CONFIG = QueueConfig(name="q", max_length=None, max_bytes=None, overflow="drop-head",
                          delivery_limit=None, msg_ttl=None, expires=None,
                          dead_letter_exchange="dlx", dead_letter_routing_key=None,
                          dead_letter_strategy="at-most-once", single_active_consumer=True,
                          partitions=0, handoff_timeout=5000, rebalance_delay=1000,
                          max_priority=None)
_ENQ = (0, ("enq", 0, 1, None, None, 0))
_CHECKOUT = (0, ("checkout", 0, 0, 0, False))
_SETTLE = (0, ("settle", 0, 0))
_REQUEUE = (0, ("requeue", 0))


def _sac_opening(requeue: tuple) -> list:
    """The two logs' common start; they differ in who requeues once there."""
    return [*[_ENQ] * 18, _CHECKOUT, *[_ENQ] * 10, *[_CHECKOUT] * 2, _ENQ, _SETTLE,
            (0, ("checkout", 1, 0, 0, False)), requeue, (0, ("cancel", 0, False)), _CHECKOUT,
            *[_ENQ] * 2, _CHECKOUT, _SETTLE, *[_ENQ] * 3, _CHECKOUT]


_SAC_RESUBSCRIBED = [
    [*_sac_opening((1, ("requeue", 0))), *[_REQUEUE] * 4, (0, ("nodedown", 0)),
     (0, ("nodedown", 1)), _SETTLE, _CHECKOUT, *[_ENQ] * 2, _REQUEUE,
     *[(0, ("unsent", 0, 1))] * 2, (0, ("dequeue", False)), (0, ("requeue", 2))],
    [*_sac_opening(_REQUEUE), *[_REQUEUE] * 7, *[(0, ("unsent", 0, 1))] * 2,
     (0, ("nodedown", 0)), (0, ("nodeup", 0)), _SETTLE, _CHECKOUT, *[_ENQ] * 2],
]


@pytest.mark.parametrize("log", _SAC_RESUBSCRIBED)
def test_a_sac_consumer_resubscribed_under_its_key_is_not_also_left_waiting(log):
    run(_SAC_CONFIG, log)
