"""The nemesis of the fault-injection test: a seeded schedule of faults, and the runner that
applies and heals them on a live cluster.

`schedule(seed, nodes, seconds)` is pure: the same seed gives the same list of `Step`s (print
it, replay it with JEPSEN_SEED). `Nemesis.run(steps)` applies them one at a time, each after
a calm `gap` and lasting `hold` seconds, then heals it:

- ``kill``: kill -9 the node, restart it on its data directory when the hold ends;
- ``pause``: SIGSTOP, then SIGCONT;
- ``isolate``: cut every link of the node (a partition of one against the rest);
- ``split``: cut the links between two sides (e.g. 2|3 of five, 1|2 of three);
- a ``leader`` target (node -1 in the step) is resolved when the step runs: the queue's leader
  as the nodes report it (else a node picked by the seeded RNG), which is where faults hurt.
Partitions cut links in one of the proxy's modes (`proxy.py`): ``reset`` (connections reset,
new ones refused), ``blackhole`` (new ones hang), ``stall`` (open connections go silent).

Called by `test_jepsen.py`; `test_nemesis.py` tests the schedule.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Any, Callable

__all__ = ["Step", "schedule", "Nemesis", "KINDS", "MODES", "LEADER"]

KINDS = ("kill", "pause", "isolate", "split")
MODES = ("reset", "blackhole", "stall")
LEADER = -1  # a step's target "the queue's leader", resolved when it runs


@dataclass(frozen=True)
class Step:
    kind: str                  # one of KINDS
    nodes: tuple[int, ...]     # kill/pause/isolate: (node,); split: one side
    gap: float                 # calm seconds before the fault
    hold: float                # seconds the fault lasts
    mode: str = "reset"        # partitions only: how links are cut

    def describe(self, names: list[str] | None = None) -> str:
        who = ",".join("leader" if n == LEADER else (names[n] if names else f"n{n + 1}")
                       for n in self.nodes)
        mode = f" ({self.mode})" if self.kind in ("isolate", "split") else ""
        return f"after {self.gap:.1f}s {self.kind} {who}{mode} for {self.hold:.1f}s"


def schedule(seed: int, nodes: int, seconds: float, *, gap: tuple[float, float] = (1.0, 3.0),
             hold: tuple[float, float] = (2.0, 6.0), kinds: tuple[str, ...] = KINDS,
             leader_share: float = 0.5) -> list[Step]:
    """Steps whose gaps and holds add up to at least `seconds`. Single-node faults go to the
    leader with probability `leader_share`; a split puts a minority (at least one node) on
    one side."""
    rng = random.Random(seed)
    steps: list[Step] = []
    total = 0.0
    while total < seconds:
        kind = rng.choice(kinds)
        g = round(rng.uniform(*gap), 1)
        h = round(rng.uniform(*hold), 1)
        mode = rng.choice(MODES) if kind in ("isolate", "split") else "reset"
        if kind == "split":
            side = tuple(sorted(rng.sample(range(nodes), rng.randint(1, (nodes - 1) // 2))))
        elif rng.random() < leader_share:
            side = (LEADER,)
        else:
            side = (rng.randrange(nodes),)
        steps.append(Step(kind, side, g, h, mode))
        total += g + h
    return steps


class Nemesis:
    """Applies steps to `cluster` (a `LocalCluster`: `names`, and kill / restart / pause /
    resume by index) and `proxy` (links by name). `links[(i, j)]` names the proxy link carrying
    the pair i<j; `leader()` returns the queue's leader index or None; `log(text)` records what
    happened (the history)."""

    def __init__(self, cluster: Any, proxy: Any, links: dict[tuple[int, int], str],
                 leader: Callable[[], int | None], log: Callable[[str], None], seed: int) -> None:
        self.cluster = cluster
        self.proxy = proxy
        self.links = links
        self.leader = leader
        self.log = log
        self.rng = random.Random(seed ^ 0x5EED)  # resolves "leader" when nobody knows one
        self._killed: set[int] = set()  # what `heal_all` must undo if a step's heal never ran
        self._paused: set[int] = set()

    def run(self, steps: list[Step], stop: Callable[[], bool] = lambda: False) -> None:
        for step in steps:
            if stop():
                break
            time.sleep(step.gap)
            heal = self._apply(step)
            time.sleep(step.hold)
            heal()

    def _resolve(self, step: Step) -> tuple[int, ...]:
        if step.nodes != (LEADER,):
            return step.nodes
        leader = self.leader()
        return (leader if leader is not None else self.rng.randrange(len(self.cluster.names)),)

    def _apply(self, step: Step) -> Callable[[], None]:
        nodes = self._resolve(step)
        names = ",".join(self.cluster.names[n] for n in nodes)
        self.log(f"nemesis: {step.kind} {names}" +
                 (f" ({step.mode})" if step.kind in ("isolate", "split") else "") +
                 f" for {step.hold:.1f}s")
        match step.kind:
            case "kill":
                return self._kill(nodes[0])
            case "pause":
                return self._pause(nodes[0])
            case "isolate":
                return self._cut(self._links_across({nodes[0]}), step.mode)
            case "split":
                return self._cut(self._links_across(set(nodes)), step.mode)
        raise ValueError(f"unknown fault {step.kind!r}")

    def _kill(self, n: int) -> Callable[[], None]:
        self.cluster.kill(n)
        self._killed.add(n)

        def heal() -> None:
            self.cluster.restart(n)
            self._killed.discard(n)
            self.log(f"nemesis: restarted {self.cluster.names[n]}")
        return heal

    def _pause(self, n: int) -> Callable[[], None]:
        self.cluster.pause(n)
        self._paused.add(n)

        def heal() -> None:
            self.cluster.resume(n)
            self._paused.discard(n)
            self.log(f"nemesis: resumed {self.cluster.names[n]}")
        return heal

    def _links_across(self, side: set[int]) -> list[str]:
        return [name for (i, j), name in self.links.items() if (i in side) != (j in side)]

    def _cut(self, names: list[str], mode: str) -> Callable[[], None]:
        for name in names:
            if mode == "stall":
                self.proxy.stall(name)
            else:
                self.proxy.cut(name, blackhole=mode == "blackhole")

        def heal() -> None:
            for name in names:
                self.proxy.heal(name)
            self.log(f"nemesis: healed {len(names)} link(s)")
        return heal

    def heal_all(self) -> None:
        """Whatever is still broken (a step interrupted by a failure): links, stopped and
        killed nodes."""
        self.proxy.heal_all()
        for n in sorted(self._paused):
            self.cluster.resume(n)
        for n in sorted(self._killed):
            self.cluster.restart(n)
        self._paused.clear()
        self._killed.clear()
