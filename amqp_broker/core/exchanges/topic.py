"""Topic exchange: binding patterns with ``*`` (one word) and ``#`` (zero or more words).

Words are separated by ``.``; empty words are allowed (``"a..b"`` has three words) and the
empty key has *no* words, as in RabbitMQ's ``split_topic_key``. Patterns are compiled once, at
bind time, into a trie whose nodes have literal-word children plus one ``*`` and one ``#``
child. Routing splits the key once (``str.split`` runs in C, which beats walking characters in
Python) and walks the trie. Two shortcuts keep the hot path cheap:

- when the only pattern is ``#``, every key matches the same targets;
- results are cached per routing key until the next bind/unbind (bounded; the cache is not
  the binding index, so routing still never inserts into the bindings).

Pure. Created by ``amqp_broker.core.exchanges.make_exchange``.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..bindings import Dest, Targets
from .base import Exchange

__all__ = ["TopicExchange", "split_words"]

_CACHE_MAX = 4096


def split_words(key: str) -> list[str]:
    """RabbitMQ's word split: ``""`` -> ``[]``, otherwise ``key.split(".")``."""
    return key.split(".") if key else []


class _Node:
    __slots__ = ("words", "star", "hash", "targets")

    def __init__(self) -> None:
        self.words: dict[str, _Node] = {}
        self.star: _Node | None = None
        self.hash: _Node | None = None
        self.targets: Targets | None = None

    def is_empty(self) -> bool:
        return not self.words and self.star is None and self.hash is None and not self.targets


def _walk(node: _Node, words: list[str], i: int, n: int, found: list[Targets]) -> None:
    """Append the targets of every pattern matching ``words[i:]`` below ``node``."""
    while True:
        h = node.hash
        if h is not None:
            # '#' eats zero or more words: try every split point.
            for j in range(i, n + 1):
                _walk(h, words, j, n, found)
        if i == n:
            if node.targets:
                found.append(node.targets)
            return
        if node.star is not None:
            _walk(node.star, words, i + 1, n, found)
        nxt = node.words.get(words[i])
        if nxt is None:
            return
        node = nxt
        i += 1


class TopicExchange(Exchange):
    type_name = "topic"
    __slots__ = ("_root", "_by_pattern", "_only_hash", "_cache")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._root = _Node()
        self._by_pattern: dict[str, Targets] = {}  # pattern -> terminal node's targets
        self._only_hash: Targets | None = None
        # routing key -> (queue_map, exchanges, queue names); cleared on every binding change
        self._cache: dict[str, tuple[dict[str, None], tuple[str, ...], tuple[str, ...]]] = {}

    def queues_for(self, routing_key, headers):
        t = self._only_hash
        if t is not None:
            return t.queues
        hit = self._cache.get(routing_key)
        if hit is None:
            hit = self._match(routing_key)
        return hit[2]

    def collect(self, routing_key, headers, queues, exchanges) -> bool:
        t = self._only_hash
        if t is not None:
            queues.update(t.queue_map)
            if t.exchanges:
                exchanges.extend(t.exchanges)
            return True
        hit = self._cache.get(routing_key)
        if hit is None:
            hit = self._match(routing_key)
        qmap, xs, _ = hit
        if not qmap and not xs:
            return False
        queues.update(qmap)
        if xs:
            exchanges.extend(xs)
        return True

    def _match(self, routing_key: str) -> tuple[dict[str, None], tuple[str, ...], tuple[str, ...]]:
        words = split_words(routing_key)
        found: list[Targets] = []
        _walk(self._root, words, 0, len(words), found)
        qmap: dict[str, None] = {}
        xs: dict[str, None] = {}
        for t in found:
            qmap.update(t.queue_map)
            for x in t.exchanges:
                xs[x] = None
        hit = (qmap, tuple(xs), tuple(qmap))
        if len(self._cache) >= _CACHE_MAX:
            self._cache.clear()
        self._cache[routing_key] = hit
        return hit

    def _add(self, dest: Dest, routing_key: str, arguments: Mapping[str, Any]) -> None:
        t = self._by_pattern.get(routing_key)
        if t is None:
            node = self._root
            for w in split_words(routing_key):
                node = self._child(node, w)
            if node.targets is None:
                node.targets = Targets()
            t = self._by_pattern[routing_key] = node.targets
        t.add(dest)
        self._changed()

    def _remove(self, dest: Dest, routing_key: str, arguments: Mapping[str, Any]) -> None:
        t = self._by_pattern[routing_key]
        t.remove(dest)
        if not t:
            del self._by_pattern[routing_key]
            self._prune(self._root, split_words(routing_key), 0)
        self._changed()

    def _changed(self) -> None:
        self._cache.clear()
        only = len(self._by_pattern) == 1 and "#" in self._by_pattern
        self._only_hash = self._by_pattern["#"] if only else None

    @staticmethod
    def _child(node: _Node, word: str) -> _Node:
        if word == "#":
            if node.hash is None:
                node.hash = _Node()
            return node.hash
        if word == "*":
            if node.star is None:
                node.star = _Node()
            return node.star
        nxt = node.words.get(word)
        if nxt is None:
            nxt = node.words[word] = _Node()
        return nxt

    def _prune(self, node: _Node, words: list[str], i: int) -> bool:
        """Drop empty nodes along a removed pattern's path; True if ``node`` became empty."""
        if i == len(words):
            if node.targets is not None and not node.targets:
                node.targets = None
            return node.is_empty()
        w = words[i]
        if w == "#":
            if node.hash is not None and self._prune(node.hash, words, i + 1):
                node.hash = None
        elif w == "*":
            if node.star is not None and self._prune(node.star, words, i + 1):
                node.star = None
        else:
            nxt = node.words.get(w)
            if nxt is not None and self._prune(nxt, words, i + 1):
                del node.words[w]
        return node.is_empty()
