"""`amqp-broker-queues`: rabbitmq-queues' verbs for quorum queue membership, over the node's
management HTTP API.

Entry point `amqp_broker.cli.queues_cli:main`. `quorum_status` lists every replica of a queue
with the Raft indexes the node asked knows (its own; on the leader, every replica's match index
and whether it is in sync). add_member / delete_member change a queue's wanted members
(`POST /api/queues/V/Q/members`, `DELETE .../members/NODE`, our extension): a new member
catches up as a learner and votes once in sync; a removed one keeps a learner's copy. grow and
shrink do that for every matching queue and print RabbitMQ's result table; rebalance asks the
leaders to spread (`POST /api/rebalance/queues`) and prints leaders per node once they moved.
Cluster members come from `GET /api/nodes`, queues from `GET /api/queues`.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from typing import TextIO

from amqp_broker.mgmt.cli_common import (EX_SOFTWARE, EX_UNAVAILABLE, EX_USAGE,
                                         add_connection_flags,
                                         print_table, run_command)
from amqp_broker.mgmt.client import ApiClient, ApiError

__all__ = ["main", "build_parser"]

_RESULT_COLUMNS = ["vhost", "name", "size", "result"]
_LAST_NODE = "error: the last node cannot be removed"
# What RabbitMQ answers when a membership verb names a classic queue.
_CLASSIC_REFUSAL = {"add_member": "Cannot add members to a classic queue",
                    "delete_member": "Cannot remove members from a classic queue"}


def _err(msg: str) -> None:
    print(f"Error: {msg}", file=sys.stderr)


def _cluster_nodes(client: ApiClient) -> list[str]:
    return [n["name"] for n in client.get("nodes")]


def _not_running(node: str) -> int:
    # rabbit_quorum_queue answers {error, node_not_running} for a node outside the cluster.
    _err(f"node {node} is not running or not a member of this cluster (node_not_running)")
    return EX_SOFTWARE


def _quorum_queue(client: ApiClient, args) -> dict | None:
    """The queue (404 -> ApiError) if it is a quorum queue, else print RabbitMQ's refusal."""
    q = client.get("queues", args.vhost, args.queue)
    if q.get("type") == "classic":
        _err(_CLASSIC_REFUSAL[args.verb])
        return None
    if q.get("type") not in _REPLICATED:
        _err(f"queue '{args.queue}' in vhost '{args.vhost}' is not a quorum queue "
             f"(type {q.get('type')}) (not_quorum_queue)")
        return None
    return q


# queue types whose replicas these verbs manage (a partitioned queue is a quorum queue inside)
_REPLICATED = ("quorum", "partitioned")


def _quorum_queues(client: ApiClient) -> list[dict]:
    return [q for q in client.get("queues") if q.get("type") in _REPLICATED]


def _members(q: dict) -> list[str]:
    return list(q.get("members") or [q.get("node")])


_STATUS_COLUMNS = ["Node Name", "Raft State", "Membership", "Online", "Last Log Index",
                   "Commit Index", "Last Applied", "Snapshot Index", "Term", "Match Index",
                   "In Sync"]


def _quorum_status(client: ApiClient, args, out: TextIO) -> int:
    """Every replica of a quorum queue (voters, then learners) as the node asked sees them,
    from the queue's "raft" field (`mgmt.topology_ops.get_queue`). The node's own row has its
    log, commit and applied indexes; other replicas' cells are known only to the leader: ask
    the leader for every replica's match index and whether it is in sync (it holds every
    committed entry); elsewhere those cells stay empty."""
    try:
        q = client.get("queues", args.vhost, args.queue)
    except ApiError as e:
        if e.status != 404:
            raise
        # as rabbitmq-queues: the banner, then the error term, exit 69
        print(f"Status of quorum queue {args.queue} on node {client.get('overview')['node']} ...",
              file=out)
        print("Error:\nnot_found", file=sys.stderr)
        return EX_UNAVAILABLE
    if q.get("type") not in _REPLICATED:
        _err(f"queue '{args.queue}' in vhost '{args.vhost}' is not a quorum queue "
             f"(type {q.get('type')})")
        return EX_SOFTWARE
    raft = q.get("raft") or {}
    banner = f"Status of quorum queue {args.queue} on node {raft.get('node') or q.get('node')} ..."
    print_table(args, out, banner, _STATUS_COLUMNS, _status_rows(q, raft))
    return 0


def _status_rows(q: dict, raft: dict) -> list[dict]:
    online = set(q.get("online") or [])
    here = raft.get("node")
    voters = raft.get("voters") or _members(q)
    learners = raft.get("learners") or []
    replicas = raft.get("replicas")  # only when `here` leads
    commit = raft.get("commit_index")
    rows = []
    for node in [*voters, *learners]:
        learner = node in learners
        row = {"Node Name": node, "Membership": "learner" if learner else "voter",
               "Raft State": "leader" if node == q.get("leader") else "follower",
               "Online": None if learner else node in online}
        if node == here:
            row.update({"Raft State": raft["state"], "Online": True,
                        "Last Log Index": raft["last_index"], "Commit Index": raft["commit_index"],
                        "Last Applied": raft["applied_index"],
                        "Snapshot Index": raft["snapshot_index"], "Term": raft["term"]})
        if replicas is not None and node in replicas:
            match = replicas[node]["match_index"]
            row.update({"Match Index": match, "In Sync": match >= commit})
        rows.append(row)
    return rows


def _add_member(client: ApiClient, args, out: TextIO) -> int:
    q = _quorum_queue(client, args)
    if q is None:
        return EX_USAGE
    if not args.quiet:
        print(f"Adding a replica for queue {args.queue} on node {args.node_arg}...", file=out)
    try:
        client.post("queues", args.vhost, args.queue, "members", json={"node": args.node_arg})
    except ApiError as e:
        print(f"Error:\n{e.reason}", file=sys.stderr)  # rabbitmq-queues: the error's atom
        return EX_UNAVAILABLE
    return 0  # already a member: RabbitMQ treats this as success (idempotent by design)


def _delete_member(client: ApiClient, args, out: TextIO) -> int:
    q = _quorum_queue(client, args)
    if q is None:
        return EX_USAGE
    if not args.quiet:
        print(f"Removing a replica of queue {args.queue} on node {args.node_arg}...", file=out)
    try:
        client.delete("queues", args.vhost, args.queue, "members", args.node_arg)
    except ApiError as e:
        print(f"Error:\n{e.reason}", file=sys.stderr)
        return EX_UNAVAILABLE
    return 0


def _matching(client: ApiClient, args) -> list[dict]:
    vhost_re = re.compile(getattr(args, "vhost_pattern", ".*"))
    queue_re = re.compile(getattr(args, "queue_pattern", ".*"))
    return [q for q in _quorum_queues(client)
            if vhost_re.search(q["vhost"]) and queue_re.search(q["name"])]


def _result_rows(client: ApiClient, queues: list[dict], change) -> list[dict]:
    rows = []
    for q in queues:
        try:
            change(q)
            result = "ok"
        except ApiError as e:
            result = f"error: {e.reason}"
        rows.append({"vhost": q["vhost"], "name": q["name"], "size": len(_members(q)),
                     "result": result})
    return rows


def _grow(client: ApiClient, args, out: TextIO) -> int:
    if args.selector not in ("all", "even"):
        _err(f"strategy must be 'all' or 'even', got '{args.selector}'")
        return EX_USAGE
    banner = f"Growing {args.selector} quorum queues on {args.node_arg}..."
    if args.node_arg not in _cluster_nodes(client):
        return _not_running(args.node_arg)
    queues = [q for q in _matching(client, args) if args.node_arg not in _members(q)
              and (args.selector == "all" or len(_members(q)) % 2 == 0)]
    rows = _result_rows(client, queues, lambda q: client.post(
        "queues", q["vhost"], q["name"], "members", json={"node": args.node_arg}))
    for row in rows:
        row["size"] += row["result"] == "ok"
    if args.errors_only:
        rows = [r for r in rows if r["result"] != "ok"]
    print_table(args, out, banner, _RESULT_COLUMNS, rows)
    return 0


def _shrink(client: ApiClient, args, out: TextIO) -> int:
    queues = [q for q in _quorum_queues(client) if args.node_arg in _members(q)]
    rows = _result_rows(client, queues, lambda q: client.delete(
        "queues", q["vhost"], q["name"], "members", args.node_arg))
    for row in rows:
        row["size"] -= row["result"] == "ok"
        if row["result"] == "error: last_node":
            row["result"] = _LAST_NODE  # rabbitmq-queues' words in this table
    if args.errors_only:
        rows = [r for r in rows if r["result"] != "ok"]
    print_table(args, out, f"Shrinking quorum queues on {args.node_arg}...", _RESULT_COLUMNS,
                rows)
    return 0


def _rebalance(client: ApiClient, args, out: TextIO) -> int:
    if args.queue_type not in ("all", "quorum", "classic", "stream"):
        _err(f"queue type must be one of: all, classic, quorum, stream; got '{args.queue_type}'")
        return EX_USAGE
    moves = []
    if args.queue_type in ("all", "quorum"):
        moves = client.post("rebalance", "queues", json={
            "vhost_pattern": args.vhost_pattern, "queue_pattern": args.queue_pattern}) or []
    deadline = time.monotonic() + 10
    while moves and time.monotonic() < deadline and not _moved(client, moves):
        time.sleep(0.2)  # hand-overs take an election's time
    counts, mirrored = _leaders(client, args)
    columns = ["Node name", "Number of quorum queues", "Number of replicated classic queues"]
    rows = [dict(zip(columns, (n, c, mirrored.get(n, 0)))) for n, c in counts.items()]
    kind = "all" if args.queue_type == "all" else args.queue_type
    print_table(args, out, f"Re-balancing leaders of {kind} queues...", columns, rows)
    return 0


def _leaders(client: ApiClient, args) -> tuple[dict[str, int], dict[str, int]]:
    """Per node, from one listing: quorum queues it leads, and mirrored classic queues it is
    the master of (RabbitMQ's two count columns)."""
    vhost_re = re.compile(args.vhost_pattern)
    queue_re = re.compile(args.queue_pattern)
    leaders = {n: 0 for n in _cluster_nodes(client)}
    masters: dict[str, int] = {}
    quorum = args.queue_type in ("all", "quorum")
    for q in client.get("queues"):
        if not (vhost_re.search(q["vhost"]) and queue_re.search(q["name"])):
            continue
        if q.get("type") in _REPLICATED and quorum:
            leader = q.get("leader") or q.get("node")
            leaders[leader] = leaders.get(leader, 0) + 1
        elif q.get("type") == "classic" and "slave_nodes" in q:
            masters[q["node"]] = masters.get(q["node"], 0) + 1
    return leaders, masters


def _moved(client: ApiClient, moves: list[dict]) -> bool:
    leaders = {(q["vhost"], q["name"]): q.get("leader") for q in _quorum_queues(client)}
    return all(leaders.get((m["vhost"], m["name"])) == m["to"] for m in moves)


def _quorum_critical(client: ApiClient, args, out: TextIO) -> int:
    return _critical(client, args, out, "node-is-quorum-critical", "quorum queues")


def _mirror_sync_critical(client: ApiClient, args, out: TextIO) -> int:
    return _critical(client, args, out, "node-is-mirror-sync-critical",
                     "classic mirrored queues")


def _critical(client: ApiClient, args, out: TextIO, check: str, what: str) -> int:
    node = client.get("overview")["node"]
    nodes = _cluster_nodes(client)
    try:
        client.get("health", "checks", check)
    except ApiError as e:
        if e.status != 503:
            raise
        # one line per queue, as rabbitmq-queues prints them
        if not (args.quiet or args.silent):
            print(f"Checking if node {node} is critical for "
                  + ("quorum of any quorum queues ..." if what == "quorum queues" else
                     "data safety of any classic mirrored queues ..."), file=out)
        queues = (e.body or {}).get("queues", []) if isinstance(e.body, dict) else []
        loses = "lose quorum" if what == "quorum queues" else "lose data"
        for q in queues:
            print(f"queue '{q['name']}' in vhost '{q['virtual_host']}' would {loses} if node "
                  f"{node} is stopped", file=sys.stderr)
        if not queues:
            print(f"Error:\n{e.reason}", file=sys.stderr)
        return EX_UNAVAILABLE
    if nodes == [node]:
        # RabbitMQ skips the check in a single-node cluster, where it would only mislead.
        msg = (f"Node {node} seems to be the only one in a single node cluster, "
               "the check does not apply")
    else:
        msg = (f"Node {node} reported no quorum queues with minimum quorum"
               if what == "quorum queues" else
               f"Node {node} reported no classic mirrored queues without online synchronised "
               f"mirrors")
    if args.formatter == "json":
        json.dump({"result": "ok", "message": msg}, out)
        out.write("\n")
        return 0
    if not (args.quiet or args.silent):
        print(f"Checking if node {node} is critical for quorum of any quorum queues ..."
              if what == "quorum queues" else
              f"Checking if node {node} is critical for data safety of any classic mirrored "
              f"queues ...", file=out)
    if not args.silent:
        print(msg, file=out)
    return 0


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    add_connection_flags(common, suppress=True)
    common.add_argument("-p", "--vhost", default=argparse.SUPPRESS)
    p = argparse.ArgumentParser(prog="amqp-broker-queues",
                                description="Quorum queue membership (rabbitmq-queues verbs).")
    add_connection_flags(p)
    p.add_argument("-p", "--vhost", default="/")
    sub = p.add_subparsers(dest="verb", metavar="COMMAND", required=True)
    verbs = {"quorum_status": ("replica status of a quorum queue", ("queue",), _quorum_status),
             "add_member": ("add a replica on NODE", ("queue", "node_arg"), _add_member),
             "delete_member": ("remove the replica on NODE", ("queue", "node_arg"),
                               _delete_member),
             "grow": ("add replicas on NODE to queues", ("node_arg", "selector"), _grow),
             "shrink": ("remove replicas on NODE", ("node_arg",), _shrink),
             "rebalance": ("rebalance quorum queue leaders", ("queue_type",), _rebalance)}
    for name, (help_, positional, fn) in verbs.items():
        sp = sub.add_parser(name, help=help_, parents=[common])
        for arg in positional:
            sp.add_argument(arg, metavar=arg.removesuffix("_arg"))
        if name in ("grow", "rebalance"):
            sp.add_argument("--vhost-pattern", default=".*")
            sp.add_argument("--queue-pattern", default=".*")
        if name in ("grow", "shrink"):
            sp.add_argument("--errors-only", action="store_true")
        sp.set_defaults(fn=fn)
    sp = sub.add_parser("check_if_node_is_quorum_critical", parents=[common],
                        help="fail if stopping this node would make a quorum queue lose "
                             "its majority")
    sp.set_defaults(fn=_quorum_critical)
    sp = sub.add_parser("check_if_node_is_mirror_sync_critical", parents=[common],
                        help="fail if stopping this node would lose the only synchronised "
                             "copy of a mirrored classic queue")
    sp.set_defaults(fn=_mirror_sync_critical)
    return p


def main(argv: list[str] | None = None, *, out: TextIO | None = None,
         err: TextIO | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_command(args, args.fn, out, err)


if __name__ == "__main__":
    sys.exit(main())
