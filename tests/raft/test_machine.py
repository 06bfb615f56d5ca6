"""The state machine interface through the example KvMachine: determinism from the entry
timestamp, local effects, and snapshot + tail == full replay."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from quorum.raft import KvChanged, KvDelete, KvMachine, KvSet, LocalEffect, Meta

commands = st.lists(
    st.one_of(st.builds(KvSet, st.sampled_from("abcd"), st.text(max_size=3)),
              st.builds(KvDelete, st.sampled_from("abcd"))),
    max_size=30)


def _replay(kv, cmds, state, start=1):
    for i, cmd in enumerate(cmds, start):
        state, _, _ = kv.apply(Meta(i, 1, 1000 + i), kv.decode(kv.encode(cmd)), state)
    return state


@settings(max_examples=100, deadline=None)
@given(commands, st.integers(min_value=0, max_value=30))
def test_restoring_a_snapshot_and_replaying_the_tail_equals_replaying_everything(cmds, cut):
    kv = KvMachine()
    cut = min(cut, len(cmds))
    whole = _replay(kv, cmds, kv.init())
    head = _replay(kv, cmds[:cut], kv.init())
    resumed = _replay(kv, cmds[cut:], kv.restore(kv.snapshot(head)), start=cut + 1)
    assert resumed == whole


def test_apply_uses_the_entry_timestamp_and_reports_local_effects():
    kv = KvMachine()
    state, reply, effects = kv.apply(Meta(5, 2, 1234), KvSet("k", "v"), kv.init())
    assert state == {"k": ("v", 1234)} and reply is None
    assert effects == [KvChanged("k", 5)] and isinstance(effects[0], LocalEffect)
    state, reply, _ = kv.apply(Meta(6, 2, 1300), KvDelete("k"), state)
    assert state == {} and reply == "v"
