"""The nemesis schedule (`nemesis.schedule`) is a pure function of its seed, and the runner
resolves targets and heals what it broke (against recording fakes of cluster and proxy: the
real ones are exercised by test_jepsen.py)."""

from __future__ import annotations

from .nemesis import KINDS, LEADER, MODES, Nemesis, Step, schedule


def test_same_seed_same_schedule_other_seed_other_schedule():
    assert schedule(7, 3, 30) == schedule(7, 3, 30)
    assert schedule(7, 3, 30) != schedule(8, 3, 30)


def test_schedule_fills_the_time_with_valid_steps():
    for seed in range(50):
        for nodes in (3, 5):
            steps = schedule(seed, nodes, 25)
            assert sum(s.gap + s.hold for s in steps) >= 25
            for s in steps:
                assert s.kind in KINDS and s.mode in MODES
                if s.kind == "split":  # a minority side, never empty, never everyone
                    assert 1 <= len(s.nodes) <= (nodes - 1) // 2
                    assert all(0 <= n < nodes for n in s.nodes)
                else:
                    assert len(s.nodes) == 1 and -1 <= s.nodes[0] < nodes


def test_every_kind_and_the_leader_show_up_over_seeds():
    steps = [s for seed in range(20) for s in schedule(seed, 5, 30)]
    assert {s.kind for s in steps} == set(KINDS)
    assert {s.mode for s in steps if s.kind in ("isolate", "split")} == set(MODES)
    assert any(s.nodes == (LEADER,) for s in steps)


class _Cluster:
    names = ["a", "b", "c"]

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def kill(self, n):
        self.calls.append(("kill", n))

    def restart(self, n):
        self.calls.append(("restart", n))

    def pause(self, n):
        self.calls.append(("pause", n))

    def resume(self, n):
        self.calls.append(("resume", n))


class _Proxy:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def cut(self, name, blackhole=False):
        self.calls.append(("blackhole" if blackhole else "cut", name))

    def stall(self, name):
        self.calls.append(("stall", name))

    def heal(self, name):
        self.calls.append(("heal", name))

    def heal_all(self):
        self.calls.append(("heal_all", "*"))


LINKS = {(0, 1): "a-b", (0, 2): "a-c", (1, 2): "b-c"}


def _nemesis(leader=None):
    log: list[str] = []
    c, p = _Cluster(), _Proxy()
    return Nemesis(c, p, LINKS, lambda: leader, log.append, seed=1), c, p, log


def test_kill_of_the_leader_restarts_it():
    nem, c, _p, log = _nemesis(leader=2)
    nem.run([Step("kill", (LEADER,), 0, 0)])
    assert c.calls == [("kill", 2), ("restart", 2)]
    assert "kill c" in log[0]


def test_isolate_cuts_only_the_nodes_links_and_heals_them():
    nem, _c, p, _log = _nemesis()
    nem.run([Step("isolate", (1,), 0, 0, "blackhole")])
    assert p.calls == [("blackhole", "a-b"), ("blackhole", "b-c"),
                       ("heal", "a-b"), ("heal", "b-c")]


def test_split_and_stall():
    nem, _c, p, _log = _nemesis()
    nem.run([Step("split", (0,), 0, 0, "stall")])
    assert p.calls[:2] == [("stall", "a-b"), ("stall", "a-c")]


def test_pause_resumes_and_unknown_leader_is_picked_by_the_seed():
    nem, c, _p, _log = _nemesis(leader=None)
    nem.run([Step("pause", (LEADER,), 0, 0)])
    assert c.calls[0][0] == "pause" and c.calls[1] == ("resume", c.calls[0][1])


def test_heal_all_undoes_what_failed_steps_left_broken():
    nem, c, p, _log = _nemesis()
    nem._apply(Step("kill", (0,), 0, 0))  # the steps' heals never ran
    nem._apply(Step("pause", (2,), 0, 0))
    nem.heal_all()
    assert c.calls == [("kill", 0), ("pause", 2), ("resume", 2), ("restart", 0)]
    assert ("heal_all", "*") in p.calls
    nem.heal_all()  # nothing left to undo
    assert c.calls[-1] == ("restart", 0) and len(c.calls) == 4
