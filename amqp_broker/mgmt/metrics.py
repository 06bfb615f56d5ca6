"""Prometheus metrics (text exposition format 0.0.4) on port 15692, with RabbitMQ's metric names
(rabbitmq_prometheus) where we have the number.

Node startup calls `await nursery.start(serve_metrics, admin, settings)`; `render_metrics(admin)`
builds the text (tests call it directly). As rabbitmq_prometheus: `/metrics` aggregates queue
metrics over the node (no labels), `/metrics/per-object` gives one series per queue labelled
{vhost, queue}.

Counters the broker does not keep are not exported (no constants pretending to be data). The
broker's `counter_totals()` gives a mapping of name -> int for any of `_GLOBAL_COUNTERS`
(and `dead_lettered_<reason>` keys); those are exported when present. Dead letters are labelled
{queue_type, dead_letter_strategy} from `broker.dead_lettered` ((reason, type, strategy) -> n)
when the broker keeps it.

Quorum queues add the ra_metrics family (rabbitmq_raft_*, per queue or aggregated: indexes and
terms summed, commit latency averaged as rabbitmq_prometheus does) from
`QuorumRuntime.raft_metrics(group)`, and the node's quorum log sizes (our own names:
rabbitmq_raft_wal_size_bytes, rabbitmq_raft_segment_size_bytes). Partitioned queues add
amqp_broker_partition_handoffs_{started,graceful,forced}_total.
"""

from __future__ import annotations

from typing import Any, Iterable

import logging

import trio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

__all__ = ["render_metrics", "serve_metrics", "build_metrics_app"]

_log = logging.getLogger(__name__)
_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# broker.counters key -> (metric name, help)
_GLOBAL_COUNTERS = {
    "messages_received": ("rabbitmq_global_messages_received_total",
                          "Total number of messages received from publishers"),
    "messages_routed": ("rabbitmq_global_messages_routed_total",
                        "Total number of messages routed to queues or streams"),
    "messages_unroutable_dropped": ("rabbitmq_global_messages_unroutable_dropped_total",
                                    "Total number of messages published as non-mandatory into an "
                                    "exchange and dropped as unroutable"),
    "messages_unroutable_returned": ("rabbitmq_global_messages_unroutable_returned_total",
                                     "Total number of messages published as mandatory into an "
                                     "exchange and returned to the publisher as unroutable"),
    "messages_confirmed": ("rabbitmq_global_messages_confirmed_total",
                           "Total number of messages confirmed to publishers"),
    "messages_delivered": ("rabbitmq_global_messages_delivered_total",
                           "Total number of messages delivered to consumers"),
    "messages_acknowledged": ("rabbitmq_global_messages_acknowledged_total",
                              "Total number of messages acknowledged by consumers"),
    "messages_redelivered": ("rabbitmq_global_messages_redelivered_total",
                             "Total number of messages redelivered to consumers"),
}
_DEAD_LETTER_REASONS = ("expired", "rejected", "maxlen", "delivery_limit")
# what Broker.count_dead_lettered is told (no "disabled": drops without a DLX are not counted)
_DEAD_LETTER_LABELS = (("rabbit_classic_queue", "at_most_once"),
                       ("rabbit_quorum_queue", "at_most_once"),
                       ("rabbit_quorum_queue", "at_least_once"))

# QuorumRuntime.raft_metrics key -> (metric name, type, help); RabbitMQ 3.x/4.0 names
_RAFT = {
    "term": ("rabbitmq_raft_term_total", "counter", "Current Raft term number"),
    "snapshot": ("rabbitmq_raft_log_snapshot_index", "gauge", "Raft log snapshot index"),
    "applied": ("rabbitmq_raft_log_last_applied_index", "gauge", "Raft log last applied index"),
    "commit": ("rabbitmq_raft_log_commit_index", "gauge", "Raft log commit index"),
    "last_written": ("rabbitmq_raft_log_last_written_index", "gauge",
                     "Raft log last written index"),
    "commit_latency": ("rabbitmq_raft_entry_commit_latency_seconds", "gauge",
                       "Time taken for a log entry to be committed"),
    "segment_bytes": ("rabbitmq_raft_segment_size_bytes", "gauge",
                      "Bytes in the Raft log segment files of quorum queues"),
}


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_esc(str(v))}"' for k, v in labels.items()) + "}"


class _Out:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_: str,
               samples: Iterable[tuple[dict[str, str], float]]) -> None:
        self.lines.append(f"# TYPE {name} {kind}")
        self.lines.append(f"# HELP {name} {help_}")
        for labels, value in samples:
            self.lines.append(f"{name}{_labels(labels)} {value}")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def render_metrics(admin: Any, *, per_object: bool = False) -> str:
    """All metrics as Prometheus text; queue metrics per queue or summed over the node."""
    out = _Out()
    broker = admin.broker
    queues = admin.list_queues()
    s = admin.settings
    out.family("rabbitmq_build_info", "untyped", "RabbitMQ & Erlang/OTP version info",
               [({"rabbitmq_version": s.version, "prometheus_plugin_version": s.version,
                  "prometheus_client_version": "", "erlang_version": ""}, 1)])
    out.family("rabbitmq_identity_info", "untyped", "RabbitMQ node & cluster identity info",
               [({"rabbitmq_node": admin.node, "rabbitmq_cluster": s.cluster_name,
                  "rabbitmq_cluster_permanent_id": s.cluster_name}, 1)])
    _queue_metrics(out, queues, per_object)
    _raft_metrics(out, broker, per_object)
    _handoff_metrics(out, broker, per_object)
    channels = sum(len(x.channels) for x in broker.sessions)
    out.family("rabbitmq_connections", "gauge", "Connections currently open",
               [({}, len(broker.sessions))])
    out.family("rabbitmq_channels", "gauge", "Channels currently open", [({}, channels)])
    out.family("rabbitmq_consumers", "gauge", "Consumers currently connected",
               [({}, sum(q["consumers"] for q in queues))])
    out.family("rabbitmq_queues", "gauge", "Queues available", [({}, len(queues))])
    alarms = set(admin.alarms())
    out.family("rabbitmq_alarms_memory_used_watermark", "untyped",
               "is set to 1 when memory alarm is in effect", [({}, int("memory" in alarms))])
    out.family("rabbitmq_alarms_free_disk_space_watermark", "untyped",
               "is set to 1 when disk alarm is in effect", [({}, int("disk" in alarms))])
    _counter_metrics(out, broker.counter_totals(), getattr(broker, "dead_lettered", None))
    return out.text()


def _queue_metrics(out: _Out, queues: list[dict], per_object: bool) -> None:
    def per_queue(key: str) -> list[tuple[dict[str, str], float]]:
        if not per_object:
            return [({}, sum(q[key] for q in queues))]
        return [({"vhost": q["vhost"], "queue": q["name"]}, q[key]) for q in queues]

    out.family("rabbitmq_queue_messages_ready", "gauge",
               "Messages ready to be delivered to consumers",
               per_queue("messages_ready"))
    out.family("rabbitmq_queue_messages_unacked", "gauge",
               "Messages delivered to consumers but not yet acknowledged",
               per_queue("messages_unacknowledged"))
    out.family("rabbitmq_queue_messages", "gauge", "Sum of ready and unacknowledged messages",
               per_queue("messages"))
    out.family("rabbitmq_queue_messages_bytes", "gauge",
               "Size in bytes of ready messages", per_queue("message_bytes_ready"))
    out.family("rabbitmq_queue_consumers", "gauge", "Consumers on a queue", per_queue("consumers"))


def _quorum_groups(broker: Any) -> list[tuple[dict[str, str], dict[str, Any]]]:
    """({vhost, queue}, raft metrics) of every quorum queue this node leads."""
    runtime = getattr(broker, "quorum", None)
    if runtime is None:
        return []
    out = []
    for vhost in list(broker.vhosts.values()):
        for rt in list(vhost.queues.values()):
            group = rt.queue.placement("").group  # the Raft group of a replicated queue
            if group is None or not runtime.driver.has_group(group):
                continue
            out.append(({"vhost": vhost.name, "queue": rt.name}, runtime.raft_metrics(group)))
    return out


# partitioned queues' handoff counters (ours): PartitionedQueue.handoff_counts key -> name, help
_HANDOFFS = {
    "started": ("amqp_broker_partition_handoffs_started_total",
                "Partition handoffs started (delivery from a moving partition paused)"),
    "graceful": ("amqp_broker_partition_handoffs_graceful_total",
                 "Partition handoffs completed with every message of the old owner settled"),
    "forced": ("amqp_broker_partition_handoffs_forced_total",
               "Partition handoffs forced at the handoff timeout (unacked messages returned)"),
}


def _handoff_metrics(out: _Out, broker: Any, per_object: bool) -> None:
    """Counts are replicated state, so every replica reports the same numbers; the
    aggregate sums the partitioned queues of the node's vhosts."""
    counts = [({"vhost": v.name, "queue": rt.name}, rt.queue.handoff_counts())
              for v in list(broker.vhosts.values()) for rt in list(v.queues.values())
              if rt.queue_type == "partitioned"]
    for key, (name, help_) in _HANDOFFS.items():
        if per_object:
            samples = [(labels, c[key]) for labels, c in counts]
        else:
            samples = [({}, sum(c[key] for _, c in counts))]
        out.family(name, "counter", help_, samples)


def _raft_metrics(out: _Out, broker: Any, per_object: bool) -> None:
    runtime = getattr(broker, "quorum", None)
    if runtime is None:
        return
    groups = _quorum_groups(broker)
    for key, (name, kind, help_) in _RAFT.items():
        if per_object:
            samples = [(labels, m[key]) for labels, m in groups]
        elif key == "commit_latency":  # a mean: a sum of latencies means nothing
            samples = [({}, sum(m[key] for _, m in groups) / len(groups) if groups else 0)]
        else:
            samples = [({}, sum(m[key] for _, m in groups))]
        out.family(name, kind, help_, samples)
    out.family("rabbitmq_raft_wal_size_bytes", "gauge",
               "Bytes in the node's current Raft write-ahead log file", [({}, runtime.wal_bytes())])


def _counter_metrics(out: _Out, counters: Any, dead_lettered: Any) -> None:
    if counters:
        for key, (name, help_) in _GLOBAL_COUNTERS.items():
            if key in counters:
                out.family(name, "counter", help_, [({}, counters[key])])
    for reason in _DEAD_LETTER_REASONS:
        if dead_lettered is not None:
            samples = [({"queue_type": kind, "dead_letter_strategy": strategy},
                        dead_lettered.get((reason, kind, strategy), 0))
                       for kind, strategy in _DEAD_LETTER_LABELS]
        elif counters and f"dead_lettered_{reason}" in counters:
            # a broker without labelled counts: what it counted is classic at-most-once
            samples = [({"queue_type": "rabbit_classic_queue",
                         "dead_letter_strategy": "at_most_once"},
                        counters[f"dead_lettered_{reason}"])]
        else:
            continue
        out.family(f"rabbitmq_global_messages_dead_lettered_{reason}_total", "counter",
                   f"Total number of messages dead-lettered due to {reason}", samples)


async def _metrics(request: Request) -> Response:
    return Response(render_metrics(request.app.state.admin), media_type=_CONTENT_TYPE)


async def _per_object(request: Request) -> Response:
    return Response(render_metrics(request.app.state.admin, per_object=True),
                    media_type=_CONTENT_TYPE)


def build_metrics_app(admin: Any) -> Starlette:
    app = Starlette(routes=[Route("/metrics", _metrics), Route("/metrics/per-object", _per_object)])
    app.state.admin = admin
    return app


async def serve_metrics(admin: Any, settings: Any, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Serve /metrics on `settings.prometheus` (default 0.0.0.0:15692; port 0 picks a free
    port) until cancelled; reports the bound port."""
    from .http import http_listener
    from .httpserver import serve_http

    host, port = http_listener(settings, "prometheus", 15692)
    async with trio.open_nursery() as nursery:
        bound = await nursery.start(serve_http, build_metrics_app(admin), host, port)
        admin.listeners.append({"node": admin.node, "protocol": "http/prometheus",
                                "ip_address": host, "port": bound, "socket_opts": {}})
        _log.info("Prometheus metrics on %s:%d/metrics", host, bound)
        task_status.started(bound)
