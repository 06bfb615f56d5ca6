"""Publish a stream of messages with publisher confirms, on one pika `SelectConnection`.

Called by the sink's `write()` in executor tasks (`sink.py`).  The task thread runs the pika I/O loop
itself until every message is confirmed: up to `maxInFlight` unconfirmed messages, a nack, a
`basic.return` (with mandatory, unless returns are only counted), a channel error or a confirm older
than `confirmTimeout` raises `PublishError`, so Spark fails and retries the task (at-least-once).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import time
from collections.abc import Iterator

import pika

from .consumer import connection_parameters
from .messages import Outgoing

log = logging.getLogger(__name__)


class PublishError(RuntimeError):
    """The broker did not take every message; the Spark task must fail."""


@dataclasses.dataclass
class PublishResult:
    published: int = 0
    returned: int = 0


class _ConfirmingPublisher:
    def __init__(self, messages: Iterator[Outgoing], *, mandatory: bool, count_unroutable: bool,
                 max_in_flight: int, confirm_timeout: float) -> None:
        self._messages = messages
        self._mandatory = mandatory
        self._count_unroutable = count_unroutable
        self._max_in_flight = max_in_flight
        self._timeout = confirm_timeout
        self._outstanding: collections.OrderedDict[int, float] = collections.OrderedDict()
        self._next_tag = 0
        self._exhausted = False
        self._channel = None
        self._conn = None
        self.error: BaseException | None = None
        self.opened = False
        self.result = PublishResult()

    def run(self, url: str, heartbeat: int) -> None:
        self._conn = pika.SelectConnection(
            connection_parameters(url, heartbeat),
            on_open_callback=self._on_open,
            on_open_error_callback=self._on_open_error,
            on_close_callback=lambda c, r: c.ioloop.stop())
        self._conn.ioloop.start()

    def _fail(self, error: BaseException) -> None:
        if self.error is None:
            self.error = error
        if self._conn is not None and self._conn.is_open:
            self._conn.close()
        elif self._conn is not None:
            self._conn.ioloop.stop()

    def _on_open_error(self, conn, error) -> None:
        self.error = PublishError(f"cannot connect: {error}")
        conn.ioloop.stop()

    def _on_open(self, conn) -> None:
        self.opened = True
        conn.channel(on_open_callback=self._on_channel)

    def _on_channel(self, ch) -> None:
        self._channel = ch
        ch.add_on_close_callback(self._on_channel_closed)
        ch.add_on_return_callback(self._on_return)
        ch.confirm_delivery(ack_nack_callback=self._on_confirm, callback=lambda _f: self._start())

    def _start(self) -> None:
        self._conn.ioloop.call_later(1.0, self._watchdog)
        self._pump()

    def _on_channel_closed(self, ch, reason) -> None:
        if self.error is None and not self._done():
            self._fail(PublishError(f"channel closed by broker: {reason}"))

    def _on_return(self, ch, method, props, body) -> None:
        self.result.returned += 1
        if not self._count_unroutable:
            self._fail(PublishError(
                f"unroutable message returned: {method.reply_code} {method.reply_text} "
                f"(exchange={method.exchange!r}, routing_key={method.routing_key!r}); "
                "set onUnroutable=count to only count these"))

    def _on_confirm(self, frame) -> None:
        method = frame.method
        if isinstance(method, pika.spec.Basic.Nack):
            self._fail(PublishError(f"broker nacked publish up to tag {method.delivery_tag}"))
            return
        if method.multiple:
            while self._outstanding and next(iter(self._outstanding)) <= method.delivery_tag:
                self._outstanding.popitem(last=False)
        else:
            self._outstanding.pop(method.delivery_tag, None)
        self._pump()

    def _watchdog(self) -> None:
        if self.error is not None or self._done():
            return
        if self._outstanding:
            oldest = next(iter(self._outstanding.values()))
            if time.monotonic() - oldest > self._timeout:
                self._fail(PublishError(f"no publisher confirm within {self._timeout}s "
                                        f"({len(self._outstanding)} unconfirmed)"))
                return
        self._conn.ioloop.call_later(1.0, self._watchdog)

    def _done(self) -> bool:
        return self._exhausted and not self._outstanding

    def _pump(self) -> None:
        if self.error is not None:
            return
        try:
            while not self._exhausted and len(self._outstanding) < self._max_in_flight:
                msg = next(self._messages, None)
                if msg is None:
                    self._exhausted = True
                    break
                self._channel.basic_publish(msg.exchange, msg.routing_key, msg.body,
                                            pika.BasicProperties(**msg.properties),
                                            mandatory=self._mandatory)
                self._next_tag += 1
                self._outstanding[self._next_tag] = time.monotonic()
                self.result.published += 1
        except BaseException as exc:  # a bad row: fail the task with its own error
            self._fail(exc)
            return
        if self._done():
            self._conn.close()


def publish_all(urls: tuple[str, ...], messages: Iterator[Outgoing], *, mandatory: bool = True,
                count_unroutable: bool = False, max_in_flight: int = 1000,
                confirm_timeout: float = 30.0, heartbeat: int = 30) -> PublishResult:
    """Publish everything and wait for every confirm; raise PublishError otherwise.
    With several URLs, the next one is tried only if the connection could not be opened."""
    last: BaseException | None = None
    for url in urls:
        pub = _ConfirmingPublisher(messages, mandatory=mandatory, count_unroutable=count_unroutable,
                                   max_in_flight=max_in_flight, confirm_timeout=confirm_timeout)
        pub.run(url, heartbeat)
        if pub.error is None:
            return pub.result
        if pub.opened:  # some messages may be out: retrying here would hide the failure
            raise pub.error if isinstance(pub.error, Exception) else PublishError(str(pub.error))
        last = pub.error
    raise PublishError(f"could not publish to any of {len(urls)} broker URL(s): {last}")
