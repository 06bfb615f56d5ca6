"""Property test: random appends, truncations, snapshots, syncs, crashes and fsync failures
against an in-memory model. After every crash the recovered log must equal the model as it
was after some write since the last successful sync (what was written but not synced may
survive in part, as a prefix; nothing else may change)."""

from __future__ import annotations

import copy
import os
import random
import shutil
import tempfile

from hypothesis import HealthCheck, settings, strategies as st, given

from quorum.log import CrashDisk, LogConfig, LogFailed, StoredSnapshot, open_store

# modest by default (shared CI machine); QLOG_EXAMPLES=2000 for a deep run
EXAMPLES = int(os.environ.get("QLOG_EXAMPLES", "40"))

CFG = LogConfig(wal_max_size_bytes=500, segment_max_entries=4)
GROUPS = ["a", "b", "c"]

small_op = st.one_of(
    st.tuples(st.just("append"), st.sampled_from(GROUPS), st.integers(0, 4), st.integers(1, 6), st.integers(1, 4)),
    st.tuples(st.just("trunc"), st.sampled_from(GROUPS), st.integers(1, 5)),
    st.tuples(st.just("hard"), st.sampled_from(GROUPS), st.integers(0, 5), st.sampled_from([None, "n1", "n2"])),
)

op = st.one_of(
    st.tuples(st.just("interleave"), st.lists(small_op, max_size=4), st.booleans(),
              st.sampled_from([None, "keep", "discard"]), st.integers(0, 3)),
    st.tuples(st.just("append"), st.sampled_from(GROUPS), st.integers(0, 4), st.integers(1, 6), st.integers(1, 4)),
    st.tuples(st.just("trunc"), st.sampled_from(GROUPS), st.integers(1, 5)),
    st.tuples(st.just("hard"), st.sampled_from(GROUPS), st.integers(0, 5), st.sampled_from([None, "n1", "n2"])),
    st.tuples(st.just("snap"), st.sampled_from(GROUPS), st.integers(-2, 6), st.booleans()),
    st.tuples(st.just("sync")),
    st.tuples(st.just("roll")),
    st.tuples(st.just("split_roll"), st.lists(small_op, max_size=4), st.integers(0, 2), st.booleans()),
    st.tuples(st.just("write_nosync")),
    st.tuples(st.just("crash"), st.booleans()),
    st.tuples(st.just("failsync"), st.integers(0, 6)),
)


def empty_group() -> dict:
    return {"snap": (0, 0), "last": 0, "hard": (0, None, 0), "ents": {}}


class Harness:
    def __init__(self, d: str, seed: int) -> None:
        self.d = d
        self.disk = CrashDisk(rng=random.Random(seed))
        self.store = open_store(d, CFG, self.disk)
        self.model = {g: empty_group() for g in GROUPS}
        self.hist = [copy.deepcopy(self.model)]  # candidates for what a crash leaves
        self.payload = 0

    def record(self) -> None:
        self.hist.append(copy.deepcopy(self.model))

    def durable_now(self) -> None:
        self.hist = [copy.deepcopy(self.model)]

    def do(self, o: tuple) -> None:
        getattr(self, "op_" + o[0])(*o[1:])

    def op_append(self, g: str, back: int, n: int, term: int) -> None:
        m = self.model[g]
        start = max(m["snap"][0] + 1, m["last"] + 1 - back)
        for i in range(start, start + n):
            self.payload += 1
            p = b"p%d" % self.payload
            self.store.append(g, [(i, term, p)])
            m["ents"] = {k: v for k, v in m["ents"].items() if k < i}
            m["ents"][i] = (term, p)
            m["last"] = i
            self.record()

    def op_trunc(self, g: str, back: int) -> None:
        m = self.model[g]
        at = max(m["snap"][0] + 1, m["last"] + 1 - back)
        self.store.truncate(g, at)
        m["ents"] = {k: v for k, v in m["ents"].items() if k < at}
        m["last"] = min(m["last"], at - 1)
        self.record()

    def op_hard(self, g: str, term: int, vote) -> None:
        m = self.model[g]
        commit = min(m["last"], m["snap"][0] + 1)
        self.store.set_hard_state(g, term, vote, commit)
        m["hard"] = (term, vote, commit)
        self.record()

    def op_snap(self, g: str, back: int, discard: bool) -> None:
        # the snapshot file is durable at once and its record is synced right after, so the
        # whole step is one durable unit (a crash in between is covered by failsync on sync)
        self.op_sync()
        if self._snap(g, back, discard):
            self.store.sync()
            self.durable_now()

    def _snap(self, g: str, back: int, discard: bool) -> bool:
        m = self.model[g]
        index = m["last"] - back
        if index <= m["snap"][0]:
            return False
        term = m["ents"].get(index, (9, b""))[0]
        self.store.save_snapshot(g, StoredSnapshot(index, term, b"", b"s%d" % index), discard)
        m["snap"] = (index, term)
        if discard or m["last"] < index:
            m["ents"] = {}
            m["last"] = index
        else:
            m["ents"] = {k: v for k, v in m["ents"].items() if k > index}
        self.record()
        return True

    def op_roll(self) -> None:
        """Enough big entries in group c to push the WAL over its size, then sync."""
        m = self.model["c"]
        for _ in range(8):
            i = m["last"] + 1
            p = b"r" * 64
            self.store.append("c", [(i, 1, p)])
            m["ents"][i] = (1, p)
            m["last"] = i
            self.record()
        self.op_sync()

    def op_interleave(self, ops: list, snap_first: bool, snap_during, pos: int) -> None:
        """What the async writer allows: writes (and snapshots) land while a rollover runs in
        its thread; they reach the new WAL at the next batch."""
        self.op_sync()
        if snap_first:
            self.op_snap("a", 1, False)
        plan = self.store.begin_rollover()
        for i, o in enumerate(ops):
            if snap_during and i == min(pos, len(ops) - 1):
                self._snap(o[1], 1, snap_during == "discard")
            self.do(o)
        self.store.run_rollover(plan)
        self.store.finish_rollover(plan)
        if snap_during:  # the snapshot's record must be durable before a crash (see op_snap)
            self.op_sync()

    def op_split_roll(self, ops: list, stage: int, torn: bool) -> None:
        """The async writer's rollover: the next WAL at once, batches written to it while the
        segments are written beside them; a crash before the segments are durable (stage 0),
        before the old WAL is deleted (1), or none (2)."""
        self.op_sync()
        plan = self.store.begin_rollover()
        self.store.switch_wal(plan)
        for o in ops:
            self.do(o)
        batch, upto = self.store.take_batch()  # a batch into the new WAL, beside the segments
        self.store.write_batch(batch)
        self.store.mark_durable(upto)
        self.durable_now()
        if stage >= 1:
            self.store.write_segments(plan)
        if stage < 2:
            self.op_crash(torn)
            return
        self.store.finish_rollover(plan)
        self.store.drop_old_wal(plan)

    def op_sync(self) -> None:
        self.store.sync()
        self.durable_now()

    def op_write_nosync(self) -> None:
        batch, _ = self.store.take_batch()
        self.store.write_batch(batch, fsync=False)

    def op_crash(self, torn: bool) -> None:
        self.store.close()
        self.disk.simulate_crash(torn=torn)
        self.disk.fail_fsync = False
        self.disk.fail_after = None
        self.store = open_store(self.d, CFG, self.disk)
        got = view(self.store)
        candidates = [norm(h) for h in self.hist]
        assert got in candidates, (got, candidates[-1])
        self.model = copy.deepcopy(self.hist[candidates.index(got)])
        self.durable_now()

    def op_failsync(self, k: int) -> None:
        self.disk.fail_after = k
        try:
            self.op_sync()
        except LogFailed:
            self.op_crash(True)
        self.disk.fail_after = None


def norm(model: dict) -> dict:
    out = {}
    for g, m in model.items():
        snap = m["snap"]
        term, vote, commit = m["hard"]
        ents = tuple((i, *m["ents"][i]) for i in range(snap[0] + 1, m["last"] + 1))
        out[g] = (snap, m["last"], (term, vote, max(commit, snap[0])), ents)
    return out


def view(store) -> dict:
    out = {}
    for g in GROUPS:
        s = store.state(g)
        ents = tuple(store.entries(g, s.first_index, s.last_index)) if s.last_index >= s.first_index else ()
        out[g] = ((s.snapshot_index, s.snapshot_term), s.last_index, (s.term, s.vote, s.commit), ents)
    return out


def strip_commit(v: dict) -> dict:
    """The live log keeps the commit index as written; only recovery raises it to the
    snapshot index. Compare the rest."""
    return {g: (snap, last, hard[:2], ents) for g, (snap, last, hard, ents) in v.items()}


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(op, min_size=8, max_size=80), st.integers(0, 1000))
def test_log_matches_model_through_crashes(ops, seed):
    d = tempfile.mkdtemp(prefix="qlog-")
    try:
        h = Harness(d, seed)
        for o in ops:
            h.do(o)
            assert strip_commit(view(h.store)) == strip_commit(norm(h.model)), o
        h.op_crash(False)
    finally:
        h.store.close()
        shutil.rmtree(d, ignore_errors=True)
