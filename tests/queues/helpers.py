"""Shared builders for the queue tests: messages with real property sections, counting consumers."""

from __future__ import annotations

from pamqp import commands, header

from amqp_broker.queues import Consumer, Message


def props(**kw) -> bytes:
    """The raw property section pamqp would put on the wire for these basic.properties."""
    raw = header.ContentHeader(0, 0, commands.Basic.Properties(**kw)).marshal()
    return raw[12:]  # drop class id, weight, body size


def msg(body: bytes = b"x", *, persistent=False, priority=None, expiration=None, headers=None) -> Message:
    kw = {}
    if persistent:
        kw["delivery_mode"] = 2
    if priority is not None:
        kw["priority"] = priority
    if expiration is not None:
        kw["expiration"] = str(expiration)
    if headers is not None:
        kw["headers"] = headers
    return Message.from_publish("ex", "rk", props(**kw), body)


class Credit:
    """A prefetch window the test controls, like the channel's per-consumer limiter."""

    def __init__(self, n: int | None = None) -> None:
        self.n = n

    def __call__(self) -> bool:
        if self.n is None:
            return True
        if self.n <= 0:
            return False
        self.n -= 1
        return True


def consumer(tag: str, channel=None, *, prefetch=None, priority=0, no_ack=False, exclusive=False,
             arguments=None) -> Consumer:
    return Consumer(tag, channel if channel is not None else tag, no_ack=no_ack, exclusive=exclusive,
                    priority=priority, take_credit=Credit(prefetch), arguments=arguments or {})


def bodies(deliveries) -> list[bytes]:
    return [d.entry.message.body for d in deliveries]
