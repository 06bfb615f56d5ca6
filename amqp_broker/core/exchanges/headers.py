"""Headers exchange: match message headers against binding arguments.

Rules (RabbitMQ ``rabbit_exchange_type_headers``):

- ``x-match`` is ``all`` (default when absent), ``any``, ``all-with-x`` or ``any-with-x``;
  any other string, or a non-string, is refused at bind time with 406.
- Binding keys starting with ``x-`` are ignored for matching, except with the ``-with-x``
  variants (``x-match`` itself is always ignored).
- A binding value of void (``None``) matches on presence of the header alone; otherwise the
  values must be equal by Erlang ``==`` (see ``fieldtypes.values_equal``).
- ``all`` with no keys left matches every message; ``any`` with no keys matches none.

Each binding is compiled to a ``_Matcher`` at bind time; routing tests every binding (the
spec allows no index), without allocating per binding.

Pure. Created by ``amqp_broker.core.exchanges.make_exchange``.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..bindings import QUEUE, Dest
from ..errors import PreconditionFailed
from ..fieldtypes import type_name, values_equal
from .base import Exchange

__all__ = ["HeadersExchange", "headers_match"]

_MODES = {"all": (True, False), "any": (False, False), "all-with-x": (True, True), "any-with-x": (False, True)}
_EMPTY: Mapping[str, Any] = {}


class _Matcher:
    __slots__ = ("match_all", "items")

    def __init__(self, arguments: Mapping[str, Any]) -> None:
        mode = arguments.get("x-match", "all")
        self.match_all, with_x = _MODES.get(mode, (True, False)) if isinstance(mode, str) else (True, False)
        # (key, value, presence_only) for every key that takes part in matching
        self.items: tuple[tuple[str, Any, bool], ...] = tuple(
            (k, v, v is None)
            for k, v in arguments.items()
            if k != "x-match" and (with_x or not k.startswith("x-"))
        )

    def matches(self, headers: Mapping[str, Any]) -> bool:
        if self.match_all:
            for k, v, presence in self.items:
                if k not in headers:
                    return False
                if not presence and not values_equal(v, headers[k]):
                    return False
            return True
        for k, v, presence in self.items:
            if k in headers and (presence or values_equal(v, headers[k])):
                return True
        return False


def headers_match(arguments: Mapping[str, Any], headers: Mapping[str, Any] | None) -> bool:
    """Would a binding with ``arguments`` match a message with ``headers``?"""
    return _Matcher(arguments).matches(headers or _EMPTY)


def _fmt_erlang(value: Any) -> str:
    # How ``~tp`` prints a value in RabbitMQ's error texts (close enough for strings).
    if isinstance(value, str):
        return f'<<"{value}">>'
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class HeadersExchange(Exchange):
    type_name = "headers"
    __slots__ = ("_entries",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # (matcher, is_queue, name) per binding, in bind order; rebuilt on change
        self._entries: tuple[tuple[_Matcher, bool, str], ...] = ()

    def validate_binding(self, routing_key: str, arguments: Mapping[str, Any]) -> None:
        if "x-match" not in arguments:
            return
        mode = arguments["x-match"]
        if isinstance(mode, str):
            if mode not in _MODES:
                raise PreconditionFailed(
                    f"Invalid x-match field value {_fmt_erlang(mode)}; "
                    "expected all, any, all-with-x, or any-with-x"
                )
            return
        raise PreconditionFailed(
            f"Invalid x-match field type {type_name(mode)} (value {_fmt_erlang(mode)}); "
            "expected longstr"
        )

    def collect(self, routing_key, headers, queues, exchanges) -> bool:
        h = headers if headers is not None else _EMPTY
        matched = False
        for m, is_queue, name in self._entries:
            if m.matches(h):
                matched = True
                if is_queue:
                    queues[name] = None
                else:
                    exchanges.append(name)
        return matched

    def _add(self, dest: Dest, routing_key: str, arguments: Mapping[str, Any]) -> None:
        self._rebuild()

    def _remove(self, dest: Dest, routing_key: str, arguments: Mapping[str, Any]) -> None:
        self._rebuild()

    def _rebuild(self) -> None:
        self._entries = tuple(
            (_Matcher(b.arguments), b.dest.kind == QUEUE, b.dest.name) for b in self._bindings.values()
        )
