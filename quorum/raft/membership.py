"""Single-server membership changes (Raft thesis section 4.1) as pure functions on `ConfigState`,
and the history of config entries in a node's log so that a truncated config entry can be undone.

A config takes effect as soon as its entry is appended to a log, committed or not. Only one
change may be uncommitted at a time (checked by `RaftNode`). Used by `RaftNode`.
"""

from __future__ import annotations

from .errors import ConfigChangeInProgress
from .messages import ConfigState

__all__ = ["add_learner", "promote", "remove", "ConfigHistory", "make_config"]


def make_config(voters=(), learners=(), auto_promote=()) -> ConfigState:
    """A normalised config: sorted, learners never also voters, auto_promote within learners."""
    vs = tuple(sorted(set(voters)))
    ls = tuple(sorted(set(learners) - set(vs)))
    ap = tuple(sorted(set(auto_promote) & set(ls)))
    return ConfigState(vs, ls, ap)


def add_learner(config: ConfigState, node: str, auto_promote: bool) -> ConfigState:
    if node in config.voters or node in config.learners:
        raise ConfigChangeInProgress(f"{node} is already a member")
    ap = config.auto_promote + ((node,) if auto_promote else ())
    return make_config(config.voters, config.learners + (node,), ap)


def promote(config: ConfigState, node: str) -> ConfigState:
    if node not in config.learners:
        raise ConfigChangeInProgress(f"{node} is not a learner")
    learners = tuple(n for n in config.learners if n != node)
    return make_config(config.voters + (node,), learners, config.auto_promote)


def remove(config: ConfigState, node: str) -> ConfigState:
    if node not in config.voters and node not in config.learners:
        raise ConfigChangeInProgress(f"{node} is not a member")
    voters = tuple(n for n in config.voters if n != node)
    if not voters:
        raise ConfigChangeInProgress("cannot remove the last voter")
    learners = tuple(n for n in config.learners if n != node)
    return make_config(voters, learners, config.auto_promote)


class ConfigHistory:
    """(index, config) for the base config (snapshot or bootstrap) and each config entry."""

    __slots__ = ("_items",)

    def __init__(self, base_index: int, base: ConfigState) -> None:
        self._items: list[tuple[int, ConfigState]] = [(base_index, base)]

    @property
    def current(self) -> ConfigState:
        return self._items[-1][1]

    @property
    def last_index(self) -> int:
        """Index of the entry that set the current config."""
        return self._items[-1][0]

    def push(self, index: int, config: ConfigState) -> None:
        self._items.append((index, config))

    def truncate(self, from_index: int) -> None:
        """Entries from `from_index` on were replaced: forget the configs they carried."""
        while len(self._items) > 1 and self._items[-1][0] >= from_index:
            self._items.pop()

    def at(self, index: int) -> ConfigState:
        for i, config in reversed(self._items):
            if i <= index:
                return config
        return self._items[0][1]

    def upto(self, index: int) -> list[tuple[int, ConfigState]]:
        """The base and the config entries at or before `index`."""
        return [self._items[0]] + [item for item in self._items[1:] if item[0] <= index]

    def compact(self, index: int) -> None:
        """Forget configs superseded at or before `index` (the new snapshot point)."""
        keep = self.at(index)
        self._items = [(index, keep)] + [(i, c) for i, c in self._items if i > index]

    def reset(self, index: int, config: ConfigState) -> None:
        self._items = [(index, config)]
