"""A token bucket for the per-connection rate limits (channel opens, queue declares).

Pure: the caller passes the clock. An operation is never refused: taking from an empty bucket
puts it in debt, and the caller pays the debt by waiting `wait_time(now)` before it reads more
of the client's input. So a client that opens channels or declares queues faster than the limit
is slowed down, as a publisher is by flow control, and its requests are still all answered.
"""

from __future__ import annotations

__all__ = ["TokenBucket"]


class TokenBucket:
    """On average `rate` operations a second, up to `burst` at once (default: one second's)."""

    __slots__ = ("rate", "burst", "_tokens", "_at")

    def __init__(self, rate: float, burst: float | None = None, now: float = 0.0) -> None:
        if rate <= 0:
            raise ValueError("rate must be positive")
        self.rate = rate
        self.burst = max(1.0, burst if burst is not None else rate)
        self._tokens = self.burst
        self._at = now

    def _refill(self, now: float) -> None:
        if now > self._at:
            self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
            self._at = now

    def take(self, now: float, n: int = 1) -> None:
        """Count `n` operations at `now` (the bucket may go into debt)."""
        self._refill(now)
        self._tokens -= n

    @property
    def in_debt(self) -> bool:
        """Taken from while empty and not yet known to be paid back: only then can
        `wait_time` be above 0 (a check per read of a client's input, without a clock read)."""
        return self._tokens < 0

    def wait_time(self, now: float) -> float:
        """Seconds until the bucket is out of debt (0.0 when it is not in debt)."""
        if self._tokens >= 0:
            return 0.0  # refilling only adds
        self._refill(now)
        return 0.0 if self._tokens >= 0 else -self._tokens / self.rate
