"""Rows for the management API's list endpoints, with RabbitMQ's field names.

Called by `admin.Admin`, which hands in the broker's live objects (vhosts, queue runtimes,
sessions, channels). This module and `admin.py` are the only ones in `mgmt/` that read broker
internals; a queue is read only through the facts of `queues.base.QueueType`. Rate fields
(`message_stats`, `*_details`) are added by `admin.Admin` from the sampler (`rates.py`); Erlang
GC stats and similar are left out: we do not keep them, and a constant would be a lie.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

from amqp_broker.core.bindings import Binding
from amqp_broker.tls import connection_facts

from .messages import jsonable

__all__ = ["queue_row", "exchange_row", "binding_row", "connection_row", "channel_row",
           "consumer_rows", "properties_key", "same_properties_key", "connection_name",
           "channel_name", "TLS_KEYS"]


def queue_row(rt: Any, node: str, policy: Any, effective: dict, operator_policy: Any = None) -> dict:
    where = rt.queue.placement(node)
    row = _queue_row(rt, where.leader, policy, effective)
    if operator_policy is not None:
        row["operator_policy"] = operator_policy.name
    if where.replicated and rt.queue_type == "classic":
        # a mirrored classic queue: its master is "node", as RabbitMQ 3.x lists mirrors
        row.update(slave_nodes=[m for m in where.members if m != where.leader],
                   synchronised_slave_nodes=[m for m in where.online if m != where.leader])
    elif where.replicated:  # RabbitMQ lists "leader", "members" and "online" for quorum queues
        row.update(leader=where.leader, members=list(where.members), online=list(where.online))
    return row


def _queue_row(rt: Any, node: str, policy: Any, effective: dict) -> dict:
    q = rt.queue
    ready = q.message_count
    unacked = q.unacked_count
    active = q.active_consumer
    bytes_ = q.message_bytes
    sac = bool(rt.arguments.get("x-single-active-consumer"))
    row = {
        "name": rt.name,
        "vhost": rt.vhost.name,
        "durable": rt.durable,
        "auto_delete": rt.auto_delete,
        "exclusive": rt.exclusive,
        "arguments": jsonable(rt.arguments),
        "node": node,
        "type": rt.queue_type,
        "state": "running",
        "consumers": rt.consumer_count,
        "messages": ready + unacked,
        "messages_ready": ready,
        "messages_unacknowledged": unacked,
        "message_bytes": bytes_,
        "message_bytes_ready": bytes_,
        "policy": policy.name if policy is not None else None,
        "operator_policy": None,
        "effective_policy_definition": effective,
        "exclusive_consumer_tag": None,
        "single_active_consumer_tag": active.tag if sac and active is not None else None,
    }
    paged = getattr(q, "paged_out_count", None)   # classic queues on this node
    if paged is not None:
        row.update(messages_paged_out=paged, message_bytes_paged_out=q.paged_out_bytes,
                   messages_ready_ram=ready - paged, messages_unacknowledged_ram=unacked,
                   messages_ram=ready - paged + unacked, message_bytes_ram=q.ram_bytes)
    return row


def partition_rows(queue: Any) -> list[dict]:
    """A partitioned queue's partitions: {partition, state (active | handing-off |
    unassigned), messages_ready, messages_unacknowledged, owner, next_owner}; an owner is
    {consumer_tag, channel (this node's channel name, else the channel's process id), node}."""
    rows = queue.partition_rows()
    for row in rows:
        for key in ("owner", "next_owner"):
            who = row[key]
            if who is not None:
                ch = who.pop("channel")
                pid = who.pop("channel_pid")
                who["channel"] = channel_name(ch.session, ch.number) if ch is not None else pid
    return rows


def exchange_row(vhost: str, x: Any, policy: Any) -> dict:
    row = {
        "name": x.name,
        "vhost": vhost,
        "type": x.type,
        "durable": x.durable,
        "auto_delete": x.auto_delete,
        "internal": x.internal,
        "arguments": jsonable(x.arguments),
        "user_who_performed_action": "rmq-internal" if x.name == "" or x.name.startswith("amq.")
        else "",
    }
    if policy is not None:
        row["policy"] = policy.name
    return row


def properties_key(routing_key: str, arguments: dict) -> str:
    """RabbitMQ's binding id within (source, destination): the quoted key, "~" when empty,
    plus a digest of the arguments when there are any."""
    key = urllib.parse.quote(routing_key, safe="") if routing_key else ""
    if not arguments:
        return key or "~"
    import hashlib

    digest = hashlib.sha1(repr(sorted(jsonable(arguments).items())).encode()).hexdigest()[:12]
    return f"{key}~{digest}"


def same_properties_key(segment: str, key: str) -> bool:
    """Does a path segment name the binding with properties key `key`? RabbitMQ decodes the
    segment once more, so both "a.%23" and "a.%2523" name the key "a.%23" (routing key "a.#")."""
    return urllib.parse.unquote(segment) == urllib.parse.unquote(key)


def binding_row(vhost: str, b: Binding) -> dict:
    args = dict(b.arguments)
    return {
        "source": b.source,
        "vhost": vhost,
        "destination": b.dest.name,
        "destination_type": b.dest.kind,
        "routing_key": b.routing_key,
        "arguments": jsonable(args),
        "properties_key": properties_key(b.routing_key, args),
    }


def _socket(session: Any) -> Any:
    """The TCP socket under the session's stream (a TLS stream wraps it)."""
    stream = session.stream
    return getattr(stream, "transport_stream", stream).socket


def _tls_details(session: Any) -> dict:
    """RabbitMQ's ssl_* and peer_cert_* keys of a connection over TLS; null for a plain one."""
    stream = session.stream
    if not hasattr(stream, "transport_stream"):
        return {"ssl": False, **dict.fromkeys(TLS_KEYS)}
    try:
        return {"ssl": True, **connection_facts(stream)}
    except Exception:  # the handshake's results are gone once the stream is closed
        return {"ssl": True, **dict.fromkeys(TLS_KEYS)}


def connection_name(session: Any) -> str:
    peer = session.peer
    try:
        local = _socket(session).getsockname()
    except (OSError, AttributeError):
        local = ("?", 0)
    return f"{peer[0]}:{peer[1]} -> {local[0]}:{local[1]}"


def _local(session: Any) -> tuple[str, int]:
    try:
        host, port = _socket(session).getsockname()[:2]
        return host, port
    except (OSError, AttributeError, ValueError):
        return "", 0


# Connection keys about TLS: null in listings, "" in /api/connections/NAME (as RabbitMQ 3.10).
TLS_KEYS = ("ssl_protocol", "ssl_key_exchange", "ssl_cipher", "ssl_hash", "peer_cert_subject",
            "peer_cert_issuer", "peer_cert_validity")


def connection_row(session: Any, node: str, connected_at: int) -> dict:
    host, port = _local(session)
    conn = session.conn  # negotiated values after tune-ok
    return {
        "name": connection_name(session),
        "node": node,
        "user": session.user,
        "user_who_performed_action": session.user,
        "vhost": session.vhost.name if session.vhost is not None else None,
        "state": session.info()["state"],  # "running", or "blocked" by a resource alarm
        "type": "network",
        "protocol": "AMQP 0-9-1",
        "auth_mechanism": session.auth_mechanism,
        "host": host,
        "port": port,
        "peer_host": session.peer[0],
        "peer_port": session.peer[1] if len(session.peer) > 1 else 0,
        **_tls_details(session),  # plain connections: RabbitMQ lists these as null
        "channels": len(session.channels),
        "client_properties": jsonable(session.client_properties),
        "connected_at": connected_at,
        "frame_max": conn.frame_max,
        "channel_max": conn.channel_max,
        "timeout": conn.heartbeat,
        "recv_oct": session.recv_oct,
        "recv_cnt": session.recv_cnt,
        "send_oct": session.send_oct,
        "send_cnt": session.send_cnt,
        "send_pend": 0,  # each flush is one send_all that completes before the next
    }


def channel_name(session: Any, number: int) -> str:
    return f"{connection_name(session)} ({number})"


def channel_row(session: Any, ch: Any, node: str) -> dict:
    cname = connection_name(session)
    return {
        "name": f"{cname} ({ch.number})",
        "number": ch.number,
        "node": node,
        "user": session.user,
        "user_who_performed_action": session.user,
        "vhost": session.vhost.name if session.vhost is not None else None,
        "connection_details": {"name": cname, "peer_host": session.peer[0],
                               "peer_port": session.peer[1] if len(session.peer) > 1 else 0},
        "state": "running",
        "messages_unconfirmed": 0,
        "acks_uncommitted": 0,
        **{k: v for k, v in ch.statistics().items() if k != "number"},
    }


def consumer_rows(session: Any, ch: Any, node: str) -> list[dict]:
    cname = connection_name(session)
    details = {"connection_name": cname, "name": f"{cname} ({ch.number})", "node": node,
               "number": ch.number, "peer_host": session.peer[0],
               "peer_port": session.peer[1] if len(session.peer) > 1 else 0, "user": session.user}
    rows = []
    for tag, st in ch.consumers.items():
        rt = st.runtime
        if rt is None:  # direct reply-to pseudo consumer
            continue
        c = st.consumer
        active = rt.queue.active_consumer
        sac = bool(rt.arguments.get("x-single-active-consumer"))
        is_active = (not sac) or active is c
        rows.append({
            "consumer_tag": tag,
            "queue": {"name": rt.name, "vhost": rt.vhost.name},
            "channel_details": details,
            "ack_required": not st.no_ack,
            "exclusive": bool(getattr(c, "exclusive", False)),
            "prefetch_count": st.prefetch,
            "arguments": jsonable(getattr(c, "arguments", {}) or {}),
            "active": is_active,
            "activity_status": ("single_active" if sac else "up") if is_active else "waiting",
        })
    return rows
