"""What `amqp-brokerctl` (cli/ctl.py) and `amqp-broker-queues` (cli/queues_cli.py) share:
connection flags, the node-down message, exit codes and rabbitmqctl-style table output.

Both tools talk to a running node only through its management HTTP API (`client.ApiClient`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Callable, Iterable, TextIO

from .client import ApiClient, ApiError, NodeDown

__all__ = ["add_connection_flags", "run_command", "print_table", "cell", "node_url",
           "EX_USAGE", "EX_DATAERR", "EX_UNAVAILABLE", "EX_SOFTWARE"]

# sysexits, as rabbitmqctl uses them
EX_USAGE = 64
EX_DATAERR = 65
EX_UNAVAILABLE = 69
EX_SOFTWARE = 70

_DEFAULT_PORT = 15672


def add_connection_flags(p: argparse.ArgumentParser, *, suppress: bool = False) -> None:
    """The flags every verb takes. Added to the main parser (real defaults) and to each verb's
    parser with `suppress=True`, so a flag works before or after the verb and a verb's parser
    does not reset what was given before it."""
    def d(value):
        return argparse.SUPPRESS if suppress else value

    p.add_argument("-n", "--node", default=d(None),
                   help="node name NAME@HOST (its management API is http://HOST:15672)")
    p.add_argument("--url", default=d(None),
                   help="management API URL (default $AMQP_BROKER_MGMT_URL or http://localhost:15672)")
    p.add_argument("--username", default=d(os.environ.get("AMQP_BROKER_USER", "guest")))
    p.add_argument("--password", default=d(os.environ.get("AMQP_BROKER_PASSWORD", "guest")))
    p.add_argument("-q", "--quiet", action="store_true", default=d(False), help="print only the data")
    p.add_argument("-s", "--silent", action="store_true", default=d(False),
                   help="like --quiet, no table headers")
    p.add_argument("--formatter", choices=("table", "json"), default=d("table"))
    p.add_argument("--no-table-headers", action="store_true", default=d(False))
    p.add_argument("-t", "--timeout", type=float, default=d(60.0))


def node_url(args: argparse.Namespace) -> tuple[str, str]:
    """(node name for messages, management API URL)."""
    if args.url:
        return (args.node or args.url), args.url
    env = os.environ.get("AMQP_BROKER_MGMT_URL")
    if args.node:
        host = args.node.split("@", 1)[1] if "@" in args.node else args.node
        return args.node, f"http://{host}:{_DEFAULT_PORT}"
    if env:
        return env, env
    return "amqp-broker@localhost", f"http://localhost:{_DEFAULT_PORT}"


def run_command(args: argparse.Namespace, fn: Callable[[ApiClient, argparse.Namespace, TextIO], int],
                out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run one verb with a client; turn node-down and API errors into rabbitmqctl-like text."""
    out = out or sys.stdout
    err = err or sys.stderr
    node, url = node_url(args)
    try:
        with ApiClient(url, args.username, args.password, timeout=args.timeout) as client:
            return fn(client, args, out)
    except NodeDown as e:
        print(f"Error: unable to perform an operation on node '{node}': {e}\n"
              f"Is the node running, with its management API on {url}?", file=err)
        return EX_UNAVAILABLE
    except ApiError as e:
        print(f"Error: {e.reason}", file=err)
        if e.status == 503 and "start_app" in e.reason:  # the application is stopped
            return EX_USAGE
        if e.status == 404:
            return EX_DATAERR
        return EX_DATAERR if e.status == 400 else EX_SOFTWARE
    except OSError as e:  # files of import/export_definitions
        print(f"Error: {e}", file=err)
        return EX_SOFTWARE


def cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"), sort_keys=True)
    return str(value)


def print_table(args: argparse.Namespace, out: TextIO, banner: str, columns: list[str],
                rows: Iterable[dict]) -> None:
    """rabbitmqctl's output: a banner (unless -q), a header line (unless --no-table-headers or
    -s), tab-separated rows; or a JSON list of objects with --formatter json."""
    rows = list(rows)
    if args.formatter == "json":
        json.dump([{c: r.get(c) for c in columns} for r in rows], out)
        out.write("\n")
        return
    if not (args.quiet or args.silent):
        print(banner, file=out)
    if not (args.no_table_headers or args.silent):
        print("\t".join(columns), file=out)
    for r in rows:
        print("\t".join(cell(r.get(c)) for c in columns), file=out)
