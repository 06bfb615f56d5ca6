"""Transcript tests: each tests/raft/testdata/*.txt is a story of commands and the expected
cluster state after them, in blocks:

    command arg ...        (one or more lines)
    ----
    expected output        (empty for commands that print nothing)

Blocks are separated by a blank line; lines starting with # are comments. Run with
RAFT_REWRITE=1 to write the actual outputs back into the files (then review the diff).
Commands drive the hand-driven `harness.Cluster`; see `_run` for the list.
"""

from __future__ import annotations

import os
import pathlib

import pytest

from quorum.raft import RaftError, RaftOptions

from .harness import Cluster

DATA = pathlib.Path(__file__).parent / "testdata"


def _parse(text: str) -> list[tuple[list[str], list[str], list[str]]]:
    """Blocks of (comment lines, command lines, expected output lines)."""
    blocks, notes, cmds, out, in_out = [], [], [], [], False
    for line in text.splitlines() + [""]:
        if not in_out and line.startswith("#"):
            notes.append(line)
        elif line == "----":
            in_out = True
        elif line == "" and (cmds or in_out):
            blocks.append((notes, cmds, out))
            notes, cmds, out, in_out = [], [], [], False
        elif in_out:
            out.append(line)
        elif line:
            cmds.append(line)
    return blocks


def _status(c: Cluster) -> list[str]:
    lines = []
    for i in c.ids:
        n = c.nodes.get(i)
        if n is None:
            lines.append(f"{i}: down")
            continue
        extra = f" leader={n.leader}" if n.leader and not n.is_leader else ""
        lines.append(f"{i}: {n.role.value} term={n.term} commit={n.commit_index}"
                     f" last={n.last_index}{extra} kv={dict(sorted(c.values(i).items()))}")
    return lines


def _run(c: Cluster | None, line: str) -> tuple[Cluster | None, list[str]]:
    cmd, *args = line.split()
    kw = dict(a.split("=", 1) for a in args if "=" in a)
    pos = [a for a in args if "=" not in a]
    if cmd == "cluster":
        opts = RaftOptions(pre_vote=kw.get("pre_vote", "true") == "true",
                           check_quorum=kw.get("check_quorum", "true") == "true")
        return Cluster(pos, options=opts), []
    try:
        match cmd:
            case "campaign":
                c[pos[0]].campaign(transfer=kw.get("force") == "true")
            case "tick":
                c.tick(pos or None, times=int(kw.get("times", "1")))
            case "stabilize":
                c.stabilize()
            case "put":
                c.put(pos[0], kw["key"], kw["value"])
            case "isolate":
                c.isolate(pos[0])
            case "heal":
                c.heal()
            case "crash":
                c.crash(pos[0])
            case "restart":
                c.start(pos[0])
            case "transfer":
                c[pos[0]].transfer_leadership(pos[1])
            case "add-learner":
                c.add_node(pos[1])
                c[pos[0]].add_learner(pos[1], 0, auto_promote=kw.get("auto", "true") == "true")
            case "remove":
                c[pos[0]].remove(pos[1], 0)
            case "status":
                return c, _status(c)
            case "members":
                return c, [f"{i}: voters={list(c[i].config.voters)} learners="
                           f"{list(c[i].config.learners)}" for i in pos]
            case "log":
                return c, [f"{i}: terms={c.log_terms(i)}" for i in pos]
            case _:
                raise ValueError(f"unknown command {cmd!r}")
    except RaftError as e:
        return c, [f"error: {type(e).__name__}: {e}"]
    return c, []


def _files():
    return sorted(DATA.glob("*.txt"))


@pytest.mark.parametrize("path", _files(), ids=lambda p: p.stem)
def test_transcript(path: pathlib.Path):
    blocks = _parse(path.read_text())
    assert blocks, f"{path} has no blocks"
    c, actual = None, []
    for notes, cmds, _ in blocks:
        out = []
        for line in cmds:
            c, lines = _run(c, line)
            out += lines
        actual.append((notes, cmds, out))
    if os.environ.get("RAFT_REWRITE"):
        text = "\n\n".join("\n".join(n + cmds + ["----"] + out) for n, cmds, out in actual)
        path.write_text(text + "\n")
        return
    for (_, cmds, want), (_, _, got) in zip(blocks, actual):
        assert got == want, f"{path.name}: after {cmds}"
