"""Bounds and nesting check of an encoded field table, before anything decodes it.

pamqp decodes tables recursively and, for a string whose declared length runs past the end of
its table, returns the shorter slice without complaint; a table nested a few hundred levels deep
makes it (and our own code that walks decoded values) hit Python's recursion limit. So every
table a client sends (method arguments in `methods.py`, the `headers` property in
`properties.py`) is walked here first, iteratively: each declared length must fit inside the
table or array that holds it, every type tag must be one pamqp knows, field names must be UTF-8
(pamqp's decoder insists, and the headers are decoded long after the publish was accepted), and
tables and arrays may nest at most `MAX_DEPTH` levels. Nothing is allocated; cost is one step per field.

RabbitMQ 3.10 accepts any depth (Erlang has no recursion limit) and treats a string running past
its table as a crash (541, or a dropped socket): here the first is refused with 502 and the
second is a clean 501, both intentional deviations (compat_tests/test_bad_input_table.py).
"""

from __future__ import annotations

import struct

__all__ = ["check_table", "TableError", "TableTooDeep", "MAX_DEPTH"]

#: Tables and arrays inside one another, the outermost counting as 1. Real clients use 2 or 3
#: (x-death: an array of tables of arrays); pamqp's recursion gives out above about 300.
MAX_DEPTH = 64

_I = struct.Struct(">I")

# Octets after the type tag for the fixed-size types pamqp decodes ("\x00" is pamqp's void).
_FIXED = {ord(t): n for t, n in (("t", 1), ("b", 1), ("B", 1), ("s", 2), ("u", 2), ("I", 4),
                                  ("i", 4), ("l", 8), ("L", 8), ("f", 4), ("d", 8), ("D", 5),
                                  ("T", 8), ("V", 0), ("\x00", 0))}
_STRINGS = frozenset(map(ord, "Sx"))  # a 32-bit length, then that many octets
_TABLE = ord("F")
_ARRAY = ord("A")


class TableError(ValueError):
    """A field table whose lengths do not add up or that holds an unknown type."""


class TableTooDeep(TableError):
    """Tables and arrays nested more than MAX_DEPTH levels."""


def check_table(data: bytes, pos: int, limit: int | None = None) -> int:
    """Check the table whose 32-bit length is at `data[pos]` and return where it ends.

    `limit` is where the enclosing structure ends (default: the end of `data`). Raises
    TableError (a ValueError) if anything runs past its container or a type is unknown, and
    TableTooDeep if the nesting exceeds MAX_DEPTH.
    """
    if limit is None:
        limit = len(data)
    end = _container_end(data, pos, limit)
    # One entry per open container: (where it ends, whether its entries have keys).
    stack = [(end, True)]
    pos += 4
    while stack:
        end, keyed = stack[-1]
        if pos == end:
            stack.pop()
            continue
        if keyed:
            key_end = pos + 1 + data[pos]
            if key_end > end:
                raise TableError("field name runs past its table")
            try:  # pamqp decodes names as UTF-8 and raises later, in whoever reads them
                data[pos + 1:key_end].decode("utf-8")
            except UnicodeDecodeError:
                raise TableError("field name is not UTF-8") from None
            pos = key_end
        if pos >= end:
            raise TableError("field value missing")
        tag = data[pos]
        pos += 1
        size = _FIXED.get(tag)
        if size is not None:
            pos += size
            if pos > end:
                raise TableError("field value runs past its table")
        elif tag in _STRINGS:
            pos = _container_end(data, pos, end)
        elif tag == _TABLE or tag == _ARRAY:
            if len(stack) >= MAX_DEPTH:
                raise TableTooDeep(f"field tables nested deeper than {MAX_DEPTH} levels")
            inner_end = _container_end(data, pos, end)
            stack.append((inner_end, tag == _TABLE))
            pos += 4
        else:
            raise TableError(f"unknown field type {tag}")
    return pos


def _container_end(data: bytes, pos: int, limit: int) -> int:
    """Where a length-prefixed value starting at `pos` ends; TableError past `limit`."""
    if pos + 4 > limit:
        raise TableError("length runs past its container")
    end = pos + 4 + _I.unpack_from(data, pos)[0]
    if end > limit:
        raise TableError("length runs past its container")
    return end
