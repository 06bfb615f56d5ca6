"""Split rabbitmq.conf text into (line number, dotted key, raw value) entries.

The "new style" format is cuttlefish's sysctl-like syntax, which RabbitMQ reads with
``conf_parse``: one ``key = value`` per line; a key is dot-separated words of
``[A-Za-z0-9_-]`` (``\\.`` puts a literal dot inside a word, e.g. a user name); a ``#`` starts a
comment anywhere outside a single-quoted value, so ``heartbeat = 30 # seconds`` is 30;
``'...'`` quotes a value that contains ``#``; surrounding whitespace is dropped.
Called by ``amqp_broker.config.schema`` (``parse_text``). Pure: text in, entries out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Entry", "ConfigProblem", "ConfigError", "tokenize"]

# One word of a key: letters, digits, '_' and '-', or an escaped dot.
_WORD = r"(?:\\\.|[A-Za-z0-9_-])+"
_KEY_RE = re.compile(rf"[ \t]*({_WORD}(?:\.{_WORD})*)[ \t]*=[ \t]*")
_INCLUDE_RE = re.compile(r"[ \t]*include[ \t]+\S")


@dataclass(frozen=True, slots=True)
class Entry:
    """One setting as written: ``key`` keeps its dots; escaped dots are unescaped in ``parts``."""

    line: int
    key: str
    parts: tuple[str, ...]
    value: str


@dataclass(frozen=True, slots=True)
class ConfigProblem:
    """One thing wrong with the file, with where it is."""

    file: str
    line: int
    key: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.key}: {self.message}" if self.key else f"{where}: {self.message}"


class ConfigError(ValueError):
    """The configuration cannot be used; ``problems`` lists every error found, in file order."""

    def __init__(self, problems: list[ConfigProblem]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


def _split_key(key: str) -> tuple[str, ...]:
    # Split on dots that are not escaped, then unescape.
    return tuple(p.replace("\\.", ".") for p in re.split(r"(?<!\\)\.", key))


def _value_after(rest: str) -> str | None:
    """The value part of a setting line; None if it is malformed (empty, unterminated quote)."""
    if rest.startswith("'"):
        end = rest.find("'", 1)
        if end < 0:
            return None
        tail = rest[end + 1:].strip()
        if tail and not tail.startswith("#"):
            return None
        return rest[1:end]
    value = rest.split("#", 1)[0].rstrip(" \t")
    return value or None


def tokenize(text: str, file: str) -> tuple[list[Entry], list[ConfigProblem]]:
    """Return the settings in file order and the syntax problems (never raises)."""
    entries: list[Entry] = []
    problems: list[ConfigProblem] = []
    # Only LF (optionally after CR) ends a line, as in cuttlefish; str.splitlines would also
    # split on U+0085, U+2028 and friends inside values.
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw[:-1] if raw.endswith("\r") else raw
        stripped = line.strip(" \t")
        if not stripped or stripped.startswith("#"):
            continue
        if _INCLUDE_RE.match(line):
            problems.append(ConfigProblem(file, number, "", "'include' is not supported; put every setting in this file"))
            continue
        m = _KEY_RE.match(line)
        if m is None:
            problems.append(ConfigProblem(file, number, "", f"expected 'key = value', got {stripped!r}"))
            continue
        key = m.group(1)
        value = _value_after(line[m.end():])
        if value is None:
            problems.append(ConfigProblem(file, number, key, "expected a value after '=' (quote a value containing '#' with '...')"))
            continue
        entries.append(Entry(number, key, _split_key(key), value))
    return entries, problems
