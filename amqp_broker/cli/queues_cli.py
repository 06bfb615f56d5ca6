"""`amqp-broker-queues`: rabbitmq-queues' verbs for quorum queue membership, over the node's
management HTTP API.

Entry point `amqp_broker.cli.queues_cli:main`. Quorum queue replication is not wired into the
node yet, so the membership verbs contact the node (so a stopped node is still reported as
such), check the queue, and then say clearly that the operation is not supported yet, with exit
code 69. `check_if_node_is_quorum_critical` asks the node's health check and succeeds when no
quorum queue would lose its majority, which is trivially so today.
"""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from amqp_broker.mgmt.cli_common import EX_UNAVAILABLE, add_connection_flags, run_command
from amqp_broker.mgmt.client import ApiClient

__all__ = ["main", "build_parser"]

_NOT_YET = "not supported: no quorum queues on this node yet"


def _quorum_status(client: ApiClient, args, out: TextIO) -> int:
    """Members of a quorum queue, from the queue's "members"/"leader"/"online" fields."""
    q = client.get("queues", args.vhost, args.queue)
    if q.get("type") != "quorum" or "members" not in q:
        return _membership(client, args, out)
    if not args.quiet:
        print(f"Status of quorum queue {args.queue} on node {q.get('node')} ...", file=out)
    print("Node Name\tRaft State\tOnline", file=out)
    online = set(q.get("online") or [])
    for member in q["members"]:
        state = "leader" if member == q.get("leader") else "follower"
        print(f"{member}\t{state}\t{'true' if member in online else 'false'}", file=out)
    return 0


def _membership(client: ApiClient, args, out: TextIO) -> int:
    if getattr(args, "queue", None):
        q = client.get("queues", args.vhost, args.queue)  # 404 if missing
        if q.get("type") != "quorum":
            print(f"Error: queue '{args.queue}' in vhost '{args.vhost}' is not a quorum queue "
                  f"(type {q.get('type')})", file=sys.stderr)
            return EX_UNAVAILABLE
    else:
        client.get("overview")  # is the node there at all?
    print(f"Error: {args.verb}: {_NOT_YET}", file=sys.stderr)
    return EX_UNAVAILABLE


def _quorum_critical(client: ApiClient, args, out: TextIO) -> int:
    node = client.get("overview")["node"]
    client.get("health", "checks", "node-is-quorum-critical")
    if not args.quiet:
        print(f"Node {node} reported no quorum critical queues", file=out)
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
    for name, help_, positional in (
        ("quorum_status", "replica status of a quorum queue", ("queue",)),
        ("add_member", "add a replica on NODE", ("queue", "node_arg")),
        ("delete_member", "remove the replica on NODE", ("queue", "node_arg")),
        ("grow", "add replicas on NODE to queues", ("node_arg", "selector")),
        ("shrink", "remove replicas on NODE", ("node_arg",)),
        ("rebalance", "rebalance quorum queue leaders", ("queue_type",)),
    ):
        sp = sub.add_parser(name, help=help_, parents=[common])
        for arg in positional:
            sp.add_argument(arg, metavar=arg.removesuffix("_arg"))
        sp.set_defaults(fn=_quorum_status if name == "quorum_status" else _membership)
    sp = sub.add_parser("check_if_node_is_quorum_critical", parents=[common],
                        help="fail if stopping this node would make a quorum queue lose its majority")
    sp.set_defaults(fn=_quorum_critical)
    return p


def main(argv: list[str] | None = None, *, out: TextIO | None = None,
         err: TextIO | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_command(args, args.fn, out, err)


if __name__ == "__main__":
    sys.exit(main())
