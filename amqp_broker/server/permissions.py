"""Per-resource access checks (RabbitMQ's configure / write / read permission regexes).

Built by `Session` at connection.open from `broker.admin.permissions[(vhost, user)]`; channels
call `check(...)` before each operation, as rabbit_channel does:

    configure: queue.declare (non-passive), queue.delete, exchange.declare, exchange.delete
    write:     basic.publish (exchange), queue.bind / exchange.bind (destination)
    read:      basic.consume / basic.get / queue.purge (queue), bindings (source exchange)

The default exchange is checked under the name "amq.default". A regex is searched (not
anchored), as Erlang's re:run; an empty regex grants nothing. Results are cached per name, so
the publish path pays one dict lookup.
"""

from __future__ import annotations

import re

from amqp_broker.core.errors import AccessRefused

__all__ = ["Permissions", "CONFIGURE", "WRITE", "READ"]

CONFIGURE, WRITE, READ = 0, 1, 2


class Permissions:
    __slots__ = ("_res", "_cache", "user", "vhost")

    def __init__(self, user: str, vhost: str, patterns: tuple[str, str, str]) -> None:
        self.user = user
        self.vhost = vhost
        self._res = tuple(re.compile(p) if p else None for p in patterns)
        self._cache: dict[tuple[int, str], bool] = {}

    def allowed(self, perm: int, name: str) -> bool:
        key = (perm, name)
        ok = self._cache.get(key)
        if ok is None:
            rx = self._res[perm]
            ok = self._cache[key] = rx is not None and rx.search(name) is not None
        return ok

    def check(self, perm: int, kind: str, name: str) -> None:
        """Raise 403 ACCESS_REFUSED unless `perm` is granted on the resource."""
        shown = "amq.default" if kind == "exchange" and not name else name
        if not self.allowed(perm, shown):
            raise AccessRefused(f"access to {kind} '{shown}' in vhost '{self.vhost}' refused "
                                f"for user '{self.user}'")

    def any_on(self, name: str) -> bool:
        """At least one permission on `name` (a passive declare needs that, RabbitMQ 4.3.1+)."""
        return any(self.allowed(p, name) for p in (CONFIGURE, WRITE, READ))
