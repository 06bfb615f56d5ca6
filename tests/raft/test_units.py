"""Small pure pieces: majority arithmetic, membership functions, the in-memory log."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quorum.raft import ConfigChangeInProgress, Entry, EntryKind, make_config
from quorum.raft.log import RaftLog
from quorum.raft.majority import committed_index, vote_result
from quorum.raft.membership import ConfigHistory, add_learner, promote, remove

voters = st.lists(st.sampled_from("abcdefg"), min_size=1, max_size=7, unique=True).map(tuple)


@settings(max_examples=200, deadline=None)
@given(voters, st.lists(st.integers(0, 20), min_size=7, max_size=7))
def test_committed_index_is_the_largest_index_a_majority_has(vs, matches):
    match = dict(zip("abcdefg", matches))
    got = committed_index(vs, match)
    need = len(vs) // 2 + 1
    assert sum(1 for v in vs if match[v] >= got) >= need
    assert sum(1 for v in vs if match[v] >= got + 1) < need


@settings(max_examples=200, deadline=None)
@given(voters, st.dictionaries(st.sampled_from("abcdefg"), st.booleans()))
def test_vote_result_is_decided_only_when_the_remaining_votes_cannot_change_it(vs, votes):
    result = vote_result(vs, votes)
    yes = sum(1 for v in vs if votes.get(v) is True)
    undecided = sum(1 for v in vs if v not in votes)
    need = len(vs) // 2 + 1
    assert result is (True if yes >= need else False if yes + undecided < need else None)


def test_membership_changes_keep_configs_sorted_and_reject_nonsense():
    c = make_config(["c", "a", "b"])
    c = add_learner(c, "d", auto_promote=True)
    assert c.learners == ("d",) and c.auto_promote == ("d",)
    c = promote(c, "d")
    assert c.voters == ("a", "b", "c", "d") and c.learners == () and c.auto_promote == ()
    c = remove(c, "a")
    assert c.voters == ("b", "c", "d")
    for bad in (lambda: add_learner(c, "b", True), lambda: promote(c, "b"),
                lambda: remove(c, "zz"), lambda: remove(make_config(["x"]), "x")):
        with pytest.raises(ConfigChangeInProgress):
            bad()


def test_config_history_undoes_truncated_changes_and_answers_at_any_index():
    h = ConfigHistory(0, make_config(["a"]))
    h.push(5, make_config(["a", "b"]))
    h.push(9, make_config(["a", "b", "c"]))
    assert h.at(4).voters == ("a",) and h.at(7).voters == ("a", "b") and h.current.voters[-1] == "c"
    h.truncate(9)
    assert h.current.voters == ("a", "b") and h.last_index == 5
    h.compact(6)
    assert h.at(6).voters == ("a", "b") and h.last_index == 6


def _e(index, term):
    return Entry(index, term, EntryKind.NORMAL, b"%d" % index, 0)


def test_log_append_truncates_conflicts_and_tracks_what_is_unstable():
    log = RaftLog(None, [_e(1, 1), _e(2, 1), _e(3, 1)])
    assert (log.last_index, log.stable) == (3, 3)
    log.append([_e(3, 2), _e(4, 2)])
    assert [log.term(i) for i in range(1, 5)] == [1, 1, 2, 2]
    assert [e.index for e in log.unstable_entries()] == [3, 4]
    log.stable_to(4, 1)  # a stale acknowledgement (wrong term) changes nothing
    assert log.stable == 2
    log.stable_to(4, 2)
    assert log.unstable_entries() == []
    log.commit, log.applied = 4, 3
    log.compact(3)
    assert (log.snap_index, log.snap_term, log.term(2), log.term(4)) == (3, 2, None, 2)
    with pytest.raises(AssertionError):
        log.append([_e(4, 3)])  # entry 4 is committed


def test_log_hints_find_term_boundaries():
    log = RaftLog(None, [_e(1, 1), _e(2, 1), _e(3, 2), _e(4, 2), _e(5, 2), _e(6, 4)])
    assert log.first_index_of_term(5) == 3
    assert log.last_index_of_term(2, at_most=6) == 5
    assert log.last_index_of_term(3, at_most=6) is None
    assert log.is_up_to_date(6, 4) and log.is_up_to_date(1, 5) and not log.is_up_to_date(9, 3)
