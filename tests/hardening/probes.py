"""What the hardening tests watch on a running `amqp-broker` process: its resident memory and
open file descriptors (from /proc), the peak RSS over a stretch of load, a canary connection
that publishes with confirms and consumes throughout, tracebacks in the broker's log; and the
numbered messages of the backlog tests (`numbered`, `consume_numbered`)."""

from __future__ import annotations

import os
import struct
import threading
import time
import uuid

import pika

MiB = 1024 * 1024
_SEQ = struct.Struct(">I")


def numbered(i: int, size: int) -> bytes:
    """Body number `i` of `size` bytes: the number, then a byte pattern that depends on it."""
    return _SEQ.pack(i) + bytes([i % 251]) * (size - _SEQ.size)


def consume_numbered(url: str, name: str, n: int, size: int, *, total: int | None = None,
                     durable: bool = True, ack: bool = True) -> list[tuple[int, bool]]:
    """Consume the first `n` of the `total` (default `n`) numbered messages in queue `name`:
    each body checked whole, (number, redelivered) returned in delivery order. Without `ack`
    exactly `n` are delivered (prefetch `n`) and left unacked."""
    conn = pika.BlockingConnection(pika.URLParameters(url))
    try:
        ch = conn.channel()
        count = ch.queue_declare(name, passive=True, durable=durable).method.message_count
        expected = n if total is None else total
        assert count == expected, f"{name} holds {count} messages, expected {expected}"
        ch.basic_qos(prefetch_count=200 if ack else n)
        seen: list[tuple[int, bool]] = []
        for method, _, body in ch.consume(name, inactivity_timeout=30):
            assert method is not None, f"only {len(seen)} of {n} came back"
            i = _SEQ.unpack_from(body)[0]
            assert body == numbered(i, size), f"message {i} came back damaged"
            seen.append((i, method.redelivered))
            if ack:
                ch.basic_ack(method.delivery_tag)
            if len(seen) == n:
                break
        ch.cancel()
        return seen
    finally:
        conn.close()


def rss_bytes(pid: int) -> int:
    """Resident set size of process `pid` (VmRSS)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


class PeakRss:
    """Samples the RSS of `pid` every `interval` seconds in a thread while in the `with`."""

    def __init__(self, pid: int, interval: float = 0.05) -> None:
        self.pid = pid
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, rss_bytes(self.pid))
            except (OSError, AssertionError):
                return
            self._stop.wait(self.interval)

    def __enter__(self) -> "PeakRss":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_bytes(self.pid))


def settle_rss(pid: int, target: int, timeout: float = 10.0) -> int:
    """Wait (up to `timeout`) for the RSS to come down to `target`; return the last sample."""
    deadline = time.monotonic() + timeout
    while True:
        now = rss_bytes(pid)
        if now <= target or time.monotonic() > deadline:
            return now
        time.sleep(0.2)


def tracebacks(log_path) -> list[str]:
    """Lines of the broker's log that start a Python traceback or log an exception."""
    text = open(log_path, errors="replace").read()
    return [line for line in text.splitlines() if "Traceback" in line or "internal error" in line]


class Canary:
    """A pika connection in a thread that publishes with confirms to its own queue and consumes
    it, one message every `period` seconds. `stop()` waits for every confirmed message to come
    back; `lost` holds the confirmed ones that never did, `errors` whatever went wrong."""

    def __init__(self, url: str, period: float = 0.05) -> None:
        self.url = url
        self.period = period
        self.queue = f"canary.{uuid.uuid4().hex[:8]}"
        self.confirmed: set[int] = set()
        self.received: set[int] = set()
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def lost(self) -> set[int]:
        return self.confirmed - self.received

    def start(self) -> "Canary":
        self._thread.start()
        return self

    def stop(self, drain: float = 20.0) -> None:
        self._drain = drain
        self._stop.set()
        self._thread.join(drain + 30)
        if self._thread.is_alive():
            self.errors.append("canary thread did not finish")

    def _run(self) -> None:
        try:
            params = pika.URLParameters(self.url)
            params.heartbeat = 0
            params.blocked_connection_timeout = 120
            conn = pika.BlockingConnection(params)
            ch = conn.channel()
            ch.queue_declare(self.queue, exclusive=True)
            ch.confirm_delivery()
            ch.basic_consume(self.queue, self._on_message, auto_ack=True)
            seq = 0
            while not self._stop.is_set():
                seq += 1
                ch.basic_publish("", self.queue, str(seq).encode())  # raises unless confirmed
                self.confirmed.add(seq)
                conn.process_data_events(time_limit=0)
                time.sleep(self.period)  # a steady trickle, not a load of its own
            deadline = time.monotonic() + self._drain
            while self.lost and time.monotonic() < deadline:
                conn.process_data_events(time_limit=0.1)
            conn.close()
        except Exception as exc:  # the test asserts errors == []
            self.errors.append(repr(exc))

    def _on_message(self, _ch, _method, _props, body) -> None:
        self.received.add(int(body))
