"""`amqp-brokerctl`: rabbitmqctl's verbs for a running node, over its management HTTP API.

Entry point `amqp_broker.cli.ctl:main`. Each verb is a small function `(client, args, out) ->
exit code`; flags follow rabbitmqctl where they apply (-p vhost, -q, --formatter json,
--priority, --apply-to, -n node). Output of list_* verbs is rabbitmqctl's: banner, tab-separated
header and rows. When the node is not running: "Error: unable to perform an operation on node
...: connection refused" and exit code 69. `cluster_status` reads GET /api/nodes; stop_app,
start_app, reset, force_reset, join_cluster and forget_cluster_node are POST /api/ctl/<verb>,
served by the node's process while its application is stopped too (`server/lifecycle.py`).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Callable, TextIO

from amqp_broker.mgmt.cli_common import (
    EX_DATAERR,
    EX_SOFTWARE,
    EX_UNAVAILABLE,
    EX_USAGE,
    add_connection_flags,
    node_url,
    print_table,
    run_command,
)
from amqp_broker.mgmt.client import ApiClient, ApiError

__all__ = ["main", "build_parser"]

_Verb = Callable[[ApiClient, argparse.Namespace, TextIO], int]
_VERBS: dict[str, _Verb] = {}


def _verb(fn: _Verb) -> _Verb:
    _VERBS[fn.__name__.lstrip("_")] = fn
    return fn


# -- listing ---------------------------------------------------------------------------------

def _row_flatten(kind: str, row: dict) -> dict:
    """Add rabbitmqctl's column names that the API spells differently."""
    r = dict(row)
    if kind == "bindings":
        r.update(source_name=row["source"], source_kind="exchange",
                 destination_name=row["destination"], destination_kind=row["destination_type"])
    elif kind == "consumers":
        r.update(queue_name=row["queue"]["name"], channel_pid=row["channel_details"]["name"])
    elif kind == "users":
        r.update(user=row["name"])
    return r


_DEFAULT_COLUMNS = {
    "queues": ["name", "messages"],
    "exchanges": ["name", "type"],
    "bindings": ["source_name", "source_kind", "destination_name", "destination_kind",
                 "routing_key", "arguments"],
    "connections": ["user", "peer_host", "peer_port", "state"],
    "channels": ["name", "user", "consumer_count", "messages_unacknowledged"],
    "consumers": ["queue_name", "channel_pid", "consumer_tag", "ack_required", "prefetch_count",
                  "active", "arguments"],
    "users": ["user", "tags"],
    "vhosts": ["name"],
    "permissions": ["user", "configure", "write", "read"],
    "policies": ["vhost", "name", "pattern", "apply-to", "definition", "priority"],
}
_BANNERS = {
    "queues": "Listing queues for vhost {vhost} ...",
    "exchanges": "Listing exchanges for vhost {vhost} ...",
    "bindings": "Listing bindings for vhost {vhost}...",
    "connections": "Listing connections ...",
    "channels": "Listing channels ...",
    "consumers": "Listing consumers in vhost {vhost} ...",
    "users": "Listing users ...",
    "vhosts": "Listing vhosts ...",
    "permissions": "Listing permissions for vhost \"{vhost}\" ...",
    "policies": "Listing policies for vhost \"{vhost}\" ...",
}
_PER_VHOST = ("queues", "exchanges", "bindings", "consumers", "permissions", "policies")


def _lister(kind: str) -> _Verb:
    def run(client: ApiClient, args: argparse.Namespace, out: TextIO) -> int:
        if kind == "permissions":
            rows = client.get("vhosts", args.vhost, "permissions")
        elif kind in _PER_VHOST:
            rows = client.get(kind, args.vhost)
        else:
            rows = client.get(kind)
        rows = [_row_flatten(kind, r) for r in rows]
        columns = list(getattr(args, "columns", None) or _DEFAULT_COLUMNS[kind])
        known = set(_DEFAULT_COLUMNS[kind]).union(*(r.keys() for r in rows)) if rows else None
        bad = [c for c in columns if known is not None and c not in known]
        if bad:
            print(f"Error: Invalid column(s): {', '.join(bad)}", file=sys.stderr)
            return EX_USAGE
        if kind == "users":
            for r in rows:
                r["tags"] = "[" + ", ".join(r["tags"]) + "]"
        print_table(args, out, _BANNERS[kind].format(vhost=args.vhost), columns, rows)
        return 0

    run.__name__ = f"list_{kind}"
    return run


for _kind in _DEFAULT_COLUMNS:
    _VERBS[f"list_{_kind}"] = _lister(_kind)


# -- node ------------------------------------------------------------------------------------

@_verb
def _status(client: ApiClient, args, out: TextIO) -> int:
    ov = client.get("overview")
    node = client.get("nodes", ov["node"])
    if args.formatter == "json":
        json.dump({"node": ov["node"], "product_name": ov["product_name"],
                   "product_version": ov["product_version"], "cluster_name": ov["cluster_name"],
                   "uptime": node.get("uptime"), "alarms": _alarms(node),
                   "listeners": ov["listeners"], "totals": ov["object_totals"],
                   "queue_totals": ov["queue_totals"]}, out)
        out.write("\n")
        return 0
    if not args.quiet:
        print(f"Status of node {ov['node']} ...", file=out)
    print(f"Runtime\n\nOS PID: {node.get('os_pid')}\nProduct name: {ov['product_name']}\n"
          f"Product version: {ov['product_version']}\nCluster name: {ov['cluster_name']}\n"
          f"Uptime (seconds): {int(node.get('uptime', 0)) // 1000}\n", file=out)
    print("Alarms\n\n" + ("\n".join(_alarms(node)) or "(none)") + "\n", file=out)
    print("Listeners\n", file=out)
    for ln in ov["listeners"]:
        print(f"Interface: {ln['ip_address']}, port: {ln['port']}, protocol: {ln['protocol']}", file=out)
    t = ov["object_totals"]
    print(f"\nTotals\n\nConnection count: {t['connections']}\nQueue count: {t['queues']}\n"
          f"Virtual host count: {len(client.get('vhosts'))}", file=out)
    return 0


def _alarms(node: dict) -> list[str]:
    return [name for key, name in (("mem_alarm", "memory"), ("disk_free_alarm", "disk"))
            if node.get(key)]


# -- cluster -----------------------------------------------------------------------------------

@_verb
def _cluster_status(client: ApiClient, args, out: TextIO) -> int:
    """rabbitmqctl's sections as this node sees the cluster: a node is running when its link to
    this node is up; versions, alarms and listeners are known for this node only."""
    ov = client.get("overview")
    nodes = client.get("nodes")
    me = ov["node"]
    local = next((n for n in nodes if n["name"] == me), {})
    disk = [n["name"] for n in nodes if n.get("type", "disc") == "disc"]
    running = [n["name"] for n in nodes if n.get("running")]
    listeners = [{"node": ln.get("node", me), "interface": ln["ip_address"], "port": ln["port"],
                  "protocol": ln["protocol"]} for ln in ov["listeners"]]
    if args.formatter == "json":
        json.dump({"cluster_name": ov["cluster_name"], "disk_nodes": disk, "ram_nodes": [],
                   "running_nodes": running,
                   "versions": {me: {"product_name": ov["product_name"],
                                     "product_version": ov["product_version"]}},
                   "alarms": [{"node": me, "alarm": a} for a in _alarms(local)],
                   "partitions": {}, "listeners": {me: listeners}}, out)
        out.write("\n")
        return 0
    if not args.quiet:
        print(f"Cluster status of node {me} ...", file=out)
    sections = [
        ("Basics", [f"Cluster name: {ov['cluster_name']}"]),
        ("Disk Nodes", disk),
        ("Running Nodes", running),
        ("Versions", [f"{me}: {ov['product_name']} {ov['product_version']}"]),
        ("Alarms", [f"Node: {me}, alarm: {a}" for a in _alarms(local)] or ["(none)"]),
        ("Network Partitions", ["(none)"]),
        ("Listeners", [f"Node: {ln['node']}, interface: {ln['interface']}, port: {ln['port']}, "
                       f"protocol: {ln['protocol']}" for ln in listeners]),
    ]
    print("\n\n".join(f"{title}\n\n" + "\n".join(lines) for title, lines in sections), file=out)
    return 0


# Membership and the application: the node's process serves these on POST /api/ctl/<verb>
# (server/lifecycle.py); its management API stays up while the application is stopped.
_BANNERS_CONTROL = {
    "stop_app": "Stopping rabbit application on node {node} ...",
    "start_app": "Starting node {node} ...",
    "reset": "Resetting node {node} ...",
    "force_reset": "Forcefully resetting node {node} ...",
    "join_cluster": "Clustering node {node} with {target}",
    "forget_cluster_node": "Removing node {target} from the cluster",
}
# HTTP status of a refusal -> rabbitmqctl's exit code
_CONTROL_EXIT = {409: EX_USAGE, 404: EX_USAGE, 400: EX_UNAVAILABLE, 503: EX_UNAVAILABLE}


def _control(verb: str) -> _Verb:
    def run(client: ApiClient, args, out: TextIO) -> int:
        target = getattr(args, "target", None)
        try:
            node = client.post("ctl", "status")["node"]
        except ApiError as e:
            print(f"Error: {e.reason}", file=sys.stderr)
            return EX_USAGE
        if not args.quiet:
            print(_BANNERS_CONTROL[verb].format(node=node, target=target), file=out)
        try:
            client.post("ctl", verb, json={"node": target} if target else {})
        except ApiError as e:
            sep = "\n" if verb == "forget_cluster_node" else " "
            print(f"Error:{sep}{e.reason}", file=sys.stderr)
            return _CONTROL_EXIT.get(e.status, EX_SOFTWARE)
        return 0

    run.__name__ = verb
    return run


for _name in _BANNERS_CONTROL:
    _VERBS[_name] = _control(_name)


# -- policies ----------------------------------------------------------------------------------

@_verb
def _set_policy(client: ApiClient, args, out: TextIO) -> int:
    try:
        definition = json.loads(args.definition)
    except ValueError:
        print(f"Error: could not parse JSON document: {args.definition}", file=sys.stderr)
        return EX_DATAERR
    _say(args, out, f'Setting policy "{args.name}" for pattern "{args.pattern}" to '
                    f'"{args.definition}" with priority "{args.priority}" for vhost "{args.vhost}" ...')
    client.put("policies", args.vhost, args.name,
               json={"pattern": args.pattern, "definition": definition,
                     "priority": args.priority, "apply-to": args.apply_to})
    return 0


@_verb
def _clear_policy(client: ApiClient, args, out: TextIO) -> int:
    _say(args, out, f'Clearing policy "{args.name}" on vhost "{args.vhost}" ...')
    client.delete("policies", args.vhost, args.name)
    return 0


# -- users, vhosts, permissions ---------------------------------------------------------------

@_verb
def _add_user(client: ApiClient, args, out: TextIO) -> int:
    _say(args, out, f'Adding user "{args.username_arg}" ...')
    try:
        client.get("users", args.username_arg)
    except ApiError as e:
        if e.status != 404:
            raise
    else:
        print(f"Error: user '{args.username_arg}' already exists", file=sys.stderr)
        return EX_DATAERR
    client.put("users", args.username_arg, json={"password": args.password_arg, "tags": ""})
    return 0


@_verb
def _delete_user(client: ApiClient, args, out: TextIO) -> int:
    _say(args, out, f'Deleting user "{args.username_arg}" ...')
    client.delete("users", args.username_arg)
    return 0


@_verb
def _change_password(client: ApiClient, args, out: TextIO) -> int:
    _say(args, out, f'Changing password for user "{args.username_arg}" ...')
    user = client.get("users", args.username_arg)
    client.put("users", args.username_arg, json={"password": args.password_arg,
                                                 "tags": ",".join(user["tags"])})
    return 0


@_verb
def _set_user_tags(client: ApiClient, args, out: TextIO) -> int:
    _say(args, out, f'Setting tags for user "{args.username_arg}" to [{", ".join(args.tags)}] ...')
    client.get("users", args.username_arg)
    client.put("users", args.username_arg, json={"tags": ",".join(args.tags)})
    return 0


@_verb
def _set_permissions(client: ApiClient, args, out: TextIO) -> int:
    _say(args, out, f'Setting permissions for user "{args.username_arg}" in vhost "{args.vhost}" ...')
    client.put("permissions", args.vhost, args.username_arg,
               json={"configure": args.conf, "write": args.write, "read": args.read})
    return 0


@_verb
def _clear_permissions(client: ApiClient, args, out: TextIO) -> int:
    _say(args, out, f'Clearing permissions for user "{args.username_arg}" in vhost "{args.vhost}" ...')
    client.delete("permissions", args.vhost, args.username_arg)
    return 0


@_verb
def _add_vhost(client: ApiClient, args, out: TextIO) -> int:
    _say(args, out, f'Adding vhost "{args.name}" ...')
    client.put("vhosts", args.name, json={"description": args.description} if args.description else {})
    return 0


@_verb
def _delete_vhost(client: ApiClient, args, out: TextIO) -> int:
    _say(args, out, f'Deleting vhost "{args.name}" ...')
    client.delete("vhosts", args.name)
    return 0


# -- queues, connections, definitions ---------------------------------------------------------

@_verb
def _purge_queue(client: ApiClient, args, out: TextIO) -> int:
    _say(args, out, f'Purging queue \'{args.name}\' in vhost \'{args.vhost}\' ...')
    client.delete("queues", args.vhost, args.name, "contents")
    return 0


@_verb
def _list_partitions(client: ApiClient, args, out: TextIO) -> int:
    """A partitioned queue's partitions: number, state, ready, unacked, owner (consumer tag,
    channel, node). Ours: RabbitMQ has no partitioned queues."""
    q = client.get("queues", args.vhost, args.name)
    rows = q.get("partitions")
    if rows is None:
        print(f"Error: queue '{args.name}' in vhost '{args.vhost}' is not a partitioned queue",
              file=sys.stderr)
        return EX_DATAERR
    if args.formatter == "json":
        json.dump(rows, out)
        print(file=out)
        return 0
    _say(args, out, f"Listing partitions of queue '{args.name}' in vhost '{args.vhost}' ...")
    print("partition\tstate\tmessages_ready\tmessages_unacknowledged\towner_tag\t"
          "owner_channel\towner_node", file=out)
    for r in rows:
        o = r["owner"] or {}
        print(f"{r['partition']}\t{r['state']}\t{r['messages_ready']}\t"
              f"{r['messages_unacknowledged']}\t{o.get('consumer_tag', '')}\t"
              f"{o.get('channel', '')}\t{o.get('node', '')}", file=out)
    return 0


@_verb
def _sync_queue(client: ApiClient, args, out: TextIO) -> int:
    """Under ha-sync-mode manual, new mirrors vote (may become master) only once asked; under
    automatic they are promoted as soon as they have caught up."""
    client.get("queues", args.vhost, args.name)  # 404 for a queue that does not exist
    _say(args, out, f"Synchronising queue '{args.name}' in vhost '{args.vhost}' ...")
    client.post("queues", args.vhost, args.name, "actions", json={"action": "sync"})
    return 0


@_verb
def _cancel_sync_queue(client: ApiClient, args, out: TextIO) -> int:
    client.get("queues", args.vhost, args.name)
    _say(args, out, f"Stopping synchronising queue '{args.name}' in vhost '{args.vhost}' ...")
    client.post("queues", args.vhost, args.name, "actions", json={"action": "cancel_sync"})
    return 0


@_verb
def _delete_queue(client: ApiClient, args, out: TextIO) -> int:
    q = client.get("queues", args.vhost, args.name)
    _say(args, out, f"Deleting queue '{args.name}' on vhost '{args.vhost}' ...")
    params = {k: "true" for k, on in (("if-empty", args.if_empty), ("if-unused", args.if_unused)) if on}
    client.delete("queues", args.vhost, args.name, params=params)
    print(f"Queue was successfully deleted with {q.get('messages', 0)} messages", file=out)
    return 0


@_verb
def _close_connection(client: ApiClient, args, out: TextIO) -> int:
    _say(args, out, f'Closing connection {args.connection} , reason: {args.explanation}...')
    client.delete("connections", args.connection, headers={"X-Reason": args.explanation})
    return 0


@_verb
def _export_definitions(client: ApiClient, args, out: TextIO) -> int:
    defs = client.get("definitions")
    text = json.dumps(defs, indent=2)
    if args.file == "-":
        print(text, file=out)
        return 0
    _say(args, out, f"Exporting definitions in JSON to a file at \"{args.file}\" ...")
    with open(args.file, "w", encoding="utf-8") as f:
        f.write(text + "\n")
    return 0


@_verb
def _import_definitions(client: ApiClient, args, out: TextIO) -> int:
    if args.file == "-":
        raw = sys.stdin.read()
    else:
        with open(args.file, encoding="utf-8") as f:
            raw = f.read()
    try:
        defs = json.loads(raw)
    except ValueError as e:
        print(f"Error: {args.file} is not a JSON document: {e}", file=sys.stderr)
        return EX_DATAERR
    _say(args, out, f"Importing definitions in JSON from a file at \"{args.file}\" ...")
    client.post("definitions", json=defs)
    if not args.quiet:
        print("Successfully started definition import. This process is asynchronous and can take "
              "some time.", file=out)
    return 0


# -- limits -----------------------------------------------------------------------------------

def _limits_json(args, text: str) -> dict | None:
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        print(f"Error: {text!r} is not a JSON object such as '{{\"max-connections\": 10}}'",
              file=sys.stderr)
        return None
    return value


@_verb
def _set_vhost_limits(client: ApiClient, args, out: TextIO) -> int:
    """Replaces the vhost's limits with the given ones (as rabbitmqctl)."""
    limits = _limits_json(args, args.definition)
    if limits is None:
        return EX_DATAERR
    _say(args, out, f"Applying limits to vhost \"{args.vhost}\" ...")
    current = client.get("vhost-limits", args.vhost)
    for name, value in limits.items():
        client.put("vhost-limits", args.vhost, name, json={"value": value})
    for name in (current[0]["value"] if current else {}):
        if name not in limits:
            client.delete("vhost-limits", args.vhost, name)
    return 0


@_verb
def _clear_vhost_limits(client: ApiClient, args, out: TextIO) -> int:
    _say(args, out, f"Clearing limits for vhost \"{args.vhost}\" ...")
    for row in client.get("vhost-limits", args.vhost):
        for name in row["value"]:
            client.delete("vhost-limits", args.vhost, name)
    return 0


@_verb
def _list_vhost_limits(client: ApiClient, args, out: TextIO) -> int:
    rows = client.get("vhost-limits") if args.global_ else client.get("vhost-limits", args.vhost)
    if args.global_:
        _say(args, out, "Getting limits for all vhosts ...")
        for row in rows:
            print(f"{row['vhost']}\t{json.dumps(row['value'])}", file=out)
    else:
        _say(args, out, f"Getting limits for vhost \"{args.vhost}\" ...")
        print(json.dumps(rows[0]["value"] if rows else {}), file=out)
    return 0


@_verb
def _set_user_limits(client: ApiClient, args, out: TextIO) -> int:
    """Adds the given limits to the user's (as rabbitmqctl)."""
    limits = _limits_json(args, args.definition)
    if limits is None:
        return EX_DATAERR
    _say(args, out, f"Setting user limits to \"{args.definition}\" for user "
                    f"\"{args.username_arg}\" ...")
    for name, value in limits.items():
        client.put("user-limits", args.username_arg, name, json={"value": value})
    return 0


@_verb
def _clear_user_limits(client: ApiClient, args, out: TextIO) -> int:
    _say(args, out, f"Clearing \"{args.limit}\" limit for user \"{args.username_arg}\" ...")
    rows = client.get("user-limits", args.username_arg)
    names = list(rows[0]["value"]) if rows else []
    for name in names if args.limit == "all" else [args.limit]:
        client.delete("user-limits", args.username_arg, name)
    return 0


@_verb
def _list_user_limits(client: ApiClient, args, out: TextIO) -> int:
    rows = client.get("user-limits", args.user) if args.user else client.get("user-limits")
    for row in rows:
        print(f"{row['user']}\t{json.dumps(row['value'])}", file=out)
    return 0


# -- health checks (rabbitmq-diagnostics' verbs) ------------------------------------------------

@_verb
def _check_certificate_expiration(client: ApiClient, args, out: TextIO) -> int:
    """rabbitmq-diagnostics check_certificate_expiration: exit 69 when a TLS listener's
    certificate (or CA certificate) expires within --within --unit, or cannot be read."""
    _say(args, out, f"Checking certificate expiration on node {node_url(args)[0]} ...")
    ok, body = client.health_check("certificate-expiration", str(args.within), args.unit)
    if args.formatter == "json":
        json.dump(body, out)
        print(file=out)
    elif ok:
        print(f"No certificates are expiring within {args.within} {args.unit}.", file=out)
    else:
        print("Certificates expiring:", file=out)
        for ln in body.get("expired", []):
            print(f"{ln['protocol']} listener on {ln['interface']}:{ln['port']}", file=out)
            for key in ("certfile", "cacertfile"):
                dates = ln.get(f"{key}_expires_on") or []
                if isinstance(dates, dict):
                    print(f"  {key} {ln[key]}: {dates.get('error')}", file=out)
                elif dates:
                    print(f"  {key} {ln[key]} expires on {', '.join(dates)}", file=out)
    return 0 if ok else EX_UNAVAILABLE


def _say(args, out: TextIO, text: str) -> None:
    if not (args.quiet or args.silent) and args.formatter != "json":
        print(text, file=out)


# -- parser ------------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    add_connection_flags(common, suppress=True)
    common.add_argument("-p", "--vhost", default=argparse.SUPPRESS)
    p = argparse.ArgumentParser(prog="amqp-brokerctl",
                                description="Manage a running amqp-broker node (rabbitmqctl verbs).")
    add_connection_flags(p)
    p.add_argument("-p", "--vhost", default="/")
    sub = p.add_subparsers(dest="verb", metavar="COMMAND", required=True)

    def cmd(name: str, help_: str, *arg_specs) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help_, parents=[common])
        for spec in arg_specs:
            sp.add_argument(*spec[0][0], **spec[1])
        return sp

    cols = ((["columns"],), {"nargs": "*", "help": "columns to show"})
    for kind in _DEFAULT_COLUMNS:
        cmd(f"list_{kind}", f"list {kind}", *([cols] if kind not in ("permissions",) else []))
    cmd("status", "node status")
    cmd("cluster_status", "the cluster's nodes as this node sees them")
    target = ((["target"],), {"metavar": "node"})
    cmd("join_cluster", "make this (stopped, reset) node a member of node's cluster", target,
        ((["--ram"],), {"action": "store_true"}), ((["--disc"],), {"action": "store_true"}))
    cmd("forget_cluster_node", "remove a node that is down from the cluster", target,
        ((["--offline"],), {"action": "store_true"}))
    cmd("stop_app", "stop the broker application (the node's process keeps running)")
    cmd("start_app", "start the broker application again")
    cmd("reset", "leave the cluster and wipe the node's data (application stopped)")
    cmd("force_reset", "wipe the node's data without telling the cluster (application stopped)")
    cmd("set_policy", "set a policy",
        ((["--priority"],), {"type": int, "default": 0}),
        ((["--apply-to"],), {"dest": "apply_to", "default": "all"}),
        ((["name"],), {}), ((["pattern"],), {}), ((["definition"],), {"help": "JSON object"}))
    cmd("clear_policy", "clear a policy", ((["name"],), {}))
    user = ((["username_arg"],), {"metavar": "username"})
    pw = ((["password_arg"],), {"metavar": "password"})
    cmd("add_user", "add a user", user, pw)
    cmd("delete_user", "delete a user", user)
    cmd("change_password", "change a user's password", user, pw)
    cmd("set_user_tags", "set a user's tags", user, ((["tags"],), {"nargs": "*"}))
    cmd("set_permissions", "set a user's permissions in a vhost", user,
        ((["conf"],), {}), ((["write"],), {}), ((["read"],), {}))
    cmd("clear_permissions", "clear a user's permissions in a vhost", user)
    cmd("add_vhost", "add a vhost", ((["name"],), {}),
        ((["--description"],), {"default": None}))
    cmd("delete_vhost", "delete a vhost", ((["name"],), {}))
    cmd("purge_queue", "purge a queue", ((["name"],), {}))
    cmd("list_partitions", "a partitioned queue's partitions, their state and owners",
        ((["name"],), {}))
    cmd("sync_queue", "synchronise a mirrored queue's mirrors (they catch up by themselves)",
        ((["name"],), {}))
    cmd("cancel_sync_queue", "stop synchronising a mirrored queue", ((["name"],), {}))
    cmd("delete_queue", "delete a queue", ((["name"],), {}),
        ((["--if-empty", "-e"],), {"action": "store_true"}),
        ((["--if-unused", "-u"],), {"action": "store_true", "dest": "if_unused"}))
    cmd("close_connection", "close a connection", ((["connection"],), {}),
        ((["explanation"],), {"nargs": "?", "default": "Closed via amqp-brokerctl"}))
    limits = ((["definition"],), {"help": "a JSON object, e.g. '{\"max-connections\": 10}'"})
    cmd("set_vhost_limits", "set the vhost's limits (max-connections, max-queues)", limits)
    cmd("clear_vhost_limits", "clear the vhost's limits")
    cmd("list_vhost_limits", "the vhost's limits",
        ((["--global"],), {"action": "store_true", "dest": "global_"}))
    cmd("set_user_limits", "add to a user's limits (max-connections, max-channels)", user,
        limits)
    cmd("clear_user_limits", "clear one of a user's limits, or all", user,
        ((["limit"],), {"metavar": "limit_name|all"}))
    cmd("list_user_limits", "users' limits", ((["--user"],), {"default": None}))
    cmd("check_certificate_expiration",
        "fail (exit 69) if a TLS listener's certificate expires within --within --unit",
        ((["--within"],), {"type": int, "default": 4}),
        ((["--unit"],), {"default": "weeks", "choices": ("days", "weeks", "months", "years")}))
    cmd("export_definitions", "export definitions to FILE ('-' for stdout)", ((["file"],), {}))
    cmd("import_definitions", "import definitions from FILE ('-' for stdin)", ((["file"],), {}))
    return p


def main(argv: list[str] | None = None, *, out: TextIO | None = None,
         err: TextIO | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_command(args, _VERBS[args.verb], out, err)


if __name__ == "__main__":
    sys.exit(main())
