"""Option parsing for the `amqp` data source: source, sink and batch-read options.

Pure (no pyspark, no I/O).  Called by the reader and writer classes in `source.py`, `sink.py` and
`batch.py` on whatever options mapping Spark hands them.  Spark gives a case-insensitive mapping;
we never convert it with dict() (that lower-cases the keys), we look keys up case-insensitively
ourselves so a plain dict in tests behaves the same.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Mapping
from typing import Any

DEFAULT_MAX_MESSAGES = 10_000
DEFAULT_MAX_BYTES = 64 * 1024 * 1024


class OptionError(ValueError):
    """A missing or invalid option; the message names the option."""


def _lookup(options: Mapping[str, Any], key: str) -> Any:
    try:
        value = options.get(key)
    except AttributeError:
        value = None
    if value is not None:
        return value
    wanted = key.lower()
    for k in options:
        if str(k).lower() == wanted:
            return options[k]
    return None


def _text(options: Mapping[str, Any], key: str, default: str | None = None) -> str | None:
    value = _lookup(options, key)
    return default if value is None else str(value)


def _required(options: Mapping[str, Any], key: str) -> str:
    value = _text(options, key)
    if not value:
        raise OptionError(f"option '{key}' is required")
    return value


def _int(options: Mapping[str, Any], key: str, default: int | None, minimum: int = 0) -> int | None:
    value = _lookup(options, key)
    if value is None:
        return default
    try:
        number = int(str(value).strip())
    except ValueError:
        raise OptionError(f"option '{key}' must be an integer, got {value!r}") from None
    if number < minimum:
        raise OptionError(f"option '{key}' must be >= {minimum}, got {number}")
    return number


def _bool(options: Mapping[str, Any], key: str, default: bool) -> bool:
    value = _lookup(options, key)
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise OptionError(f"option '{key}' must be true or false, got {value!r}")


def _seconds(options: Mapping[str, Any], key: str, default: float) -> float:
    """Accept `30`, `30s`, `500ms`, `2m`."""
    value = _lookup(options, key)
    if value is None:
        return default
    text = str(value).strip().lower()
    scale = 1.0
    for suffix, factor in (("ms", 0.001), ("s", 1.0), ("m", 60.0)):
        if text.endswith(suffix):
            text, scale = text[: -len(suffix)], factor
            break
    try:
        seconds = float(text) * scale
    except ValueError:
        raise OptionError(f"option '{key}' must be a duration like 30s, got {value!r}") from None
    if seconds <= 0:
        raise OptionError(f"option '{key}' must be positive, got {value!r}")
    return seconds


def _json_object(options: Mapping[str, Any], key: str) -> dict:
    value = _lookup(options, key)
    if value is None or value == "":
        return {}
    try:
        parsed = json.loads(value) if isinstance(value, str) else dict(value)
    except (ValueError, TypeError):
        raise OptionError(f"option '{key}' must be a JSON object, got {value!r}") from None
    if not isinstance(parsed, dict):
        raise OptionError(f"option '{key}' must be a JSON object, got {value!r}")
    return parsed


def _urls(options: Mapping[str, Any]) -> tuple[str, ...]:
    urls = tuple(u.strip() for u in _required(options, "url").split(",") if u.strip())
    for url in urls:
        if not url.startswith(("amqp://", "amqps://")):
            raise OptionError(f"option 'url' must be amqp:// or amqps://, got {url!r}")
    return urls


def _default_partitions() -> int:
    # The reader cannot see the SparkContext (it runs in a Python worker); cores is a fair proxy
    # for spark.default.parallelism under local[*].
    return max(1, min(os.cpu_count() or 1, 8))


@dataclasses.dataclass(frozen=True)
class SourceOptions:
    urls: tuple[str, ...]
    queues: tuple[str, ...]
    max_messages_per_batch: int = DEFAULT_MAX_MESSAGES
    max_bytes_per_batch: int = DEFAULT_MAX_BYTES
    prefetch: int = 2 * DEFAULT_MAX_MESSAGES
    num_partitions: int = 1
    exclusive: bool = True
    consumer_arguments: dict = dataclasses.field(default_factory=dict)
    heartbeat: int = 30
    auto_ack: bool = False
    fail_on_missing_queue: bool = True
    include_body: bool = True
    idle_wait: float = 2.0
    queue_pattern: str | None = None  # a regex over queue names, resolved at query start
    management_url: str | None = None  # where queue_pattern lists the vhost's queues
    row_transfer: str = "fetch"  # how rows reach the executors: "fetch" or "inline" (handoff.py)
    row_server_host: str | None = None  # the address executors fetch rows from (fetch only)

    @property
    def queue(self) -> str:
        """A name for messages and logs: the queue, the list, or the pattern."""
        return self.queue_pattern or ",".join(self.queues)


def parse_source_options(options: Mapping[str, Any]) -> SourceOptions:
    """Validate the streaming-source options of SPARK.md 5.2."""
    urls = _urls(options)
    pattern = _text(options, "queuePattern")
    listed = _text(options, "queue")
    if bool(pattern) == bool(listed):
        raise OptionError("give exactly one of option 'queue' (a name or a comma-separated list) "
                          "and option 'queuePattern' (a regex over queue names)")
    queues = tuple(dict.fromkeys(q.strip() for q in (listed or "").split(",") if q.strip()))
    if listed and not queues:
        raise OptionError("option 'queue' names no queue")
    management_url = _text(options, "managementUrl")
    if pattern:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise OptionError(f"option 'queuePattern' is not a valid regex: {exc}") from None
        if not management_url:
            raise OptionError("option 'queuePattern' needs option 'managementUrl' "
                              "(http://host:15672, to list the vhost's queues)")
    max_messages = _int(options, "maxMessagesPerBatch", DEFAULT_MAX_MESSAGES, minimum=1)
    max_bytes = _int(options, "maxBytesPerBatch", DEFAULT_MAX_BYTES, minimum=1)
    prefetch = _int(options, "prefetch", min(2 * max_messages, 65535), minimum=1)
    if prefetch < max_messages:
        raise OptionError(f"option 'prefetch' ({prefetch}) must be >= maxMessagesPerBatch "
                          f"({max_messages}), otherwise a batch can never fill and acks stall")
    if prefetch > 65535:
        raise OptionError("option 'prefetch' must be <= 65535 (basic.qos prefetch-count is a short)")
    ack_mode = (_text(options, "ackMode", "afterCommit") or "").strip()
    if ack_mode.lower() not in ("aftercommit", "autoack"):
        raise OptionError(f"option 'ackMode' must be afterCommit or autoAck, got {ack_mode!r}")
    row_transfer = (_text(options, "rowTransfer", "fetch") or "").strip().lower()
    if row_transfer not in ("fetch", "inline"):
        raise OptionError(f"option 'rowTransfer' must be fetch or inline, got {row_transfer!r}")
    if _text(options, "walPath"):
        raise OptionError("option 'walPath' (deterministic replay) is not implemented yet")
    return SourceOptions(
        urls=urls,
        queues=queues,
        max_messages_per_batch=max_messages,
        max_bytes_per_batch=max_bytes,
        prefetch=prefetch,
        num_partitions=_int(options, "numPartitions", _default_partitions(), minimum=1),
        exclusive=_bool(options, "exclusive", True),
        consumer_arguments=_json_object(options, "consumerArguments"),
        heartbeat=_int(options, "heartbeat", 30, minimum=0),
        auto_ack=ack_mode.lower() == "autoack",
        fail_on_missing_queue=_bool(options, "failOnMissingQueue", True),
        include_body=_bool(options, "includeBody", True),
        idle_wait=_seconds(options, "availableNowIdleWait", 2.0),
        queue_pattern=pattern or None,
        management_url=management_url,
        row_transfer=row_transfer,
        row_server_host=_text(options, "rowServerHost") or None,
    )


SINK_COLUMNS = ("body", "routing_key", "exchange", "headers", "properties", "message_id")


@dataclasses.dataclass(frozen=True)
class SinkOptions:
    urls: tuple[str, ...]
    exchange: str = ""
    routing_key: str = ""
    mandatory: bool = True
    count_unroutable: bool = False
    confirm_timeout: float = 30.0
    max_in_flight: int = 1000
    delivery_mode: int = 2
    deterministic_ids: bool = True
    ignore_unknown_columns: bool = False
    heartbeat: int = 30


def parse_sink_options(options: Mapping[str, Any]) -> SinkOptions:
    """Validate the sink options of SPARK.md 5.4."""
    on_unroutable = (_text(options, "onUnroutable", "fail") or "").lower()
    if on_unroutable not in ("fail", "count"):
        raise OptionError(f"option 'onUnroutable' must be fail or count, got {on_unroutable!r}")
    message_id = (_text(options, "messageId", "deterministic") or "").lower()
    if message_id not in ("deterministic", "none"):
        raise OptionError(f"option 'messageId' must be deterministic or none, got {message_id!r}")
    delivery_mode = _int(options, "deliveryMode", 2, minimum=1)
    if delivery_mode not in (1, 2):
        raise OptionError(f"option 'deliveryMode' must be 1 or 2, got {delivery_mode}")
    return SinkOptions(
        urls=_urls(options),
        exchange=_text(options, "exchange", "") or "",
        routing_key=_text(options, "routingKey", "") or "",
        mandatory=_bool(options, "mandatory", True),
        count_unroutable=on_unroutable == "count",
        confirm_timeout=_seconds(options, "confirmTimeout", 30.0),
        max_in_flight=_int(options, "maxInFlight", 1000, minimum=1),
        delivery_mode=delivery_mode,
        deterministic_ids=message_id == "deterministic",
        ignore_unknown_columns=_bool(options, "ignoreUnknownColumns", False),
        heartbeat=_int(options, "heartbeat", 30, minimum=0),
    )


def check_sink_columns(columns: list[str], opts: SinkOptions) -> None:
    """Refuse input columns the sink does not know (SPARK.md 5.4), and a missing `body`."""
    if "body" not in columns:
        raise OptionError(f"the amqp sink needs a 'body' column; got {columns}")
    unknown = [c for c in columns if c not in SINK_COLUMNS]
    if unknown and not opts.ignore_unknown_columns:
        raise OptionError(f"unknown columns for the amqp sink: {unknown} (known: {list(SINK_COLUMNS)}); "
                          "drop them or set ignoreUnknownColumns=true")


@dataclasses.dataclass(frozen=True)
class BatchReadOptions:
    urls: tuple[str, ...]
    queue: str
    mode: str
    max_messages: int
    force: bool
    queue_type: str
    include_body: bool
    heartbeat: int


def parse_batch_read_options(options: Mapping[str, Any]) -> BatchReadOptions:
    """Batch `spark.read.format("amqp")`: refuse by default (no commit hook), see SPARK.md 5.5."""
    mode = (_text(options, "mode", "drain") or "").lower()
    if mode not in ("drain", "consume", "peek"):
        raise OptionError(f"option 'mode' must be drain, consume or peek, got {mode!r}")
    return BatchReadOptions(
        urls=_urls(options),
        queue=_required(options, "queue"),
        mode=mode,
        max_messages=_int(options, "maxMessages", 1000, minimum=1),
        force=_bool(options, "force", False),
        queue_type=(_text(options, "queueType", "") or "").lower(),
        include_body=_bool(options, "includeBody", True),
        heartbeat=_int(options, "heartbeat", 30, minimum=0),
    )
