"""Sorting, filtering and paging of the management API's list replies, as RabbitMQ's
management plugin does them (rabbit_mgmt_util's pagination): `?page=N&page_size=M&name=S&
use_regex=true&sort=KEY&sort_reverse=true`.

Called by `http.py` for the listings `routes.py` marks pageable (queues, exchanges,
connections, channels), after the rows a user may not see were dropped. Pure: rows and query
parameters in, a list or the paged object out, `PagingError` (a 400) for bad parameters.

The rules, from RabbitMQ 3.10: rows are sorted by `sort` (a dotted key) then vhost and name, and
reversed with `sort_reverse=true`. Without `page` the sorted list is the reply, unfiltered.
With it, `name` keeps the rows whose name contains it (case-insensitive) or, with
`use_regex=true`, matches it as a case-insensitive regular expression; `page_size` defaults to
100 and may be at most 500; a page may start at most one row past the end. `columns=a,b.c`
keeps only those keys of each row (a dotted name keeps its first part, whole, as RabbitMQ
3.10 does); unknown names are left out.
"""

from __future__ import annotations

import re
from typing import Any

from .errors import BadRequest

__all__ = ["PagingError", "paginate", "select_columns"]

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 500
_DEFAULT_SORT = ("vhost", "name")
_INTEGER = re.compile(r"[+-]?[0-9]+")


class PagingError(BadRequest):
    """400 with RabbitMQ's error names: invalid_pagination_parameters, page_out_of_range, or
    bad_request for parameters that are not numbers (or not a regular expression)."""

    def __init__(self, error: str, reason: str) -> None:
        super().__init__(reason)
        self.error = error


def paginate(rows: list[dict], query: dict[str, str]) -> list[dict] | dict:
    """The reply for a pageable listing: the sorted rows, or the paged object."""
    page, page_size = _page_params(query)
    rows = _sorted(rows, query.get("sort"), query.get("sort_reverse") == "true")
    if page is None:
        return rows
    matching = _filtered(rows, query.get("name") or "", query.get("use_regex") == "true")
    start = (page - 1) * page_size
    if start > len(matching):
        raise PagingError("page_out_of_range", f"Page out of range, page: {page} page size: "
                                               f"{page_size}, len: {len(matching)}")
    items = matching[start:start + page_size]
    return {"total_count": len(rows), "item_count": len(items), "filtered_count": len(matching),
            "page": page, "page_size": page_size,
            "page_count": (len(matching) + page_size - 1) // page_size, "items": items}


def _page_params(query: dict[str, str]) -> tuple[int | None, int]:
    page, size = _integer(query.get("page")), _integer(query.get("page_size"))
    if page is None:
        return None, 0
    if page > 0 and (size is None or 0 < size <= MAX_PAGE_SIZE):
        return page, DEFAULT_PAGE_SIZE if size is None else size
    raise PagingError("invalid_pagination_parameters",
                      f"Invalid pagination parameters: page number {page}, page size "
                      f"{'undefined' if size is None else size}")


def _integer(text: str | None) -> int | None:
    if text is None:
        return None
    if not _INTEGER.fullmatch(text):
        raise PagingError("bad_request", "Pagination parameters are invalid")
    return int(text)


def _filtered(rows: list[dict], name: str, use_regex: bool) -> list[dict]:
    if not name:
        return rows
    if use_regex:
        try:
            pattern = re.compile(name, re.IGNORECASE)
        except re.error:
            raise PagingError("bad_request", "Pagination parameters are invalid") from None
        return [r for r in rows if pattern.search(str(r.get("name", "")))]
    needle = name.lower()
    return [r for r in rows if needle in str(r.get("name", "")).lower()]


def _sorted(rows: list[dict], sort: str | None, reverse: bool) -> list[dict]:
    keys = ([sort] if sort else []) + [k for k in _DEFAULT_SORT if k != sort]
    out = sorted(rows, key=lambda row: tuple(_sort_value(row, k) for k in keys))
    return out[::-1] if reverse else out


def _sort_value(row: dict, dotted: str) -> tuple[int, Any]:
    """Erlang's term order, roughly: numbers (a missing value counts as 0) before atoms
    (null, true, false) before strings; anything else by its text."""
    value: Any = row
    for part in dotted.split("."):
        value = value.get(part, 0) if isinstance(value, dict) else 0
    if isinstance(value, bool) or value is None:
        return (1, str(value))
    if isinstance(value, (int, float)):
        return (0, value)
    if isinstance(value, str):
        return (2, value)
    return (3, str(value))


def select_columns(body: Any, columns: str) -> Any:
    """`body` (a row, a list of rows, or a page of them) with only the `columns` of each row."""
    keep = {name.strip().split(".", 1)[0] for name in columns.split(",")} - {""}
    if not keep:
        return body
    if isinstance(body, list):
        return [_select(row, keep) for row in body]
    if isinstance(body, dict) and isinstance(body.get("items"), list) and "page" in body:
        return {**body, "items": [_select(row, keep) for row in body["items"]]}
    return _select(body, keep)


def _select(row: Any, keep: set[str]) -> Any:
    return {k: v for k, v in row.items() if k in keep} if isinstance(row, dict) else row
