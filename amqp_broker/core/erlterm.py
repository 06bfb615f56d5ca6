"""Erlang's ``io_lib:format("~p")`` for the few terms RabbitMQ puts in reply texts.

RabbitMQ builds some error texts with ``~p`` (pretty print, 80 columns), for example
``FRAME_ERROR - type 1, all octets = <<0,20,0,10,1,48>>: {invalid_frame_end_marker,0}`` or
``invalid expiration '-1': {value_negative,-1}``; ``~p`` breaks a term that does not fit in
the rest of the line, so long ones contain newlines and indentation. Clients and log scrapers
see those texts; this module reproduces them for: ints, atoms (`Atom`), strings (a Python
``str`` is an Erlang string, printed flat), binaries (``bytes``) and tuples of those.

Used by the protocol layer (frame error texts) and the server's publish checks (expiration).
Pure; no imports beyond the standard library.

Deviation: a binary holding Latin-1 letters (bytes 0xA0-0xFF) is printable to Erlang, which then
writes those raw bytes into the reply text, making it invalid UTF-8 (pamqp cannot decode it);
here any byte >= 0x80 makes the binary print as a list of integers.
"""

from __future__ import annotations

__all__ = ["Atom", "format_after", "pretty"]

LINE_LENGTH = 80
# io_lib's escapes for control characters in a printable string.
_ESCAPES = {0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0B: "\\v", 0x0C: "\\f", 0x0D: "\\r",
            0x1B: "\\e", 0x22: '\\"', 0x5C: "\\\\"}


class Atom(str):
    """An Erlang atom (printed bare: ``frame_too_large``)."""

    __slots__ = ()


def format_after(prefix: str, term: object) -> str:
    """``prefix`` followed by ``term`` pretty-printed from the column where ``prefix`` ends, as
    ``io_lib:format(Prefix ++ "~p", [Term])`` does."""
    col = len(prefix) - (prefix.rfind("\n") + 1)
    return prefix + pretty(term, col)


def pretty(term: object, col: int = 0) -> str:
    """``term`` as ``~p`` prints it when it starts at (0-based) column ``col``.

    A port of the layout rules of OTP's io_lib_pretty (print/pp/cind) for the term kinds
    listed in the module docstring; Erlang counts columns from 1."""
    node = _node(term)
    col += 1
    most = node.length  # io_lib_pretty's M: the flat length of the whole term
    if node.length < LINE_LENGTH - col:
        return _write(node)
    for tind in (-1, 4):
        try:
            _cind(node, col, most, tind, 0, 0)
            break
        except _NoGood:
            pass
    else:
        tind = 1
    return _pp(node, col, most, tind, " " * (col - 1), 0, 0)


class _Node:
    """io_lib_pretty's intermediate format: a flat leaf, a tuple, or a binary of integers."""

    __slots__ = ("kind", "text", "items", "length")

    def __init__(self, kind: str, text: str = "", items: list | None = None,
                 length: int = 0) -> None:
        self.kind = kind  # "leaf", "tag_tuple", "tuple" or "bin"
        self.text = text  # leaf: the text; bin: unused
        self.items = items or []  # tuple: child nodes; bin: element texts
        self.length = length or len(text)


class _NoGood(Exception):
    pass


def _node(term: object) -> _Node:
    if isinstance(term, tuple) and term:
        items = [_node(e) for e in term]
        kind = "tag_tuple" if isinstance(term[0], Atom) else "tuple"
        return _Node(kind, items=items, length=len(items) + 1 + sum(i.length for i in items))
    if isinstance(term, (bytes, bytearray)) and term and not _printable(term):
        items = [str(b) for b in term]
        return _Node("bin", items=items, length=3 + sum(len(i) + 1 for i in items))
    return _Node("leaf", _flat(term))


def _write(node: _Node) -> str:
    if node.kind == "leaf":
        return node.text
    if node.kind == "bin":
        return "<<" + ",".join(node.items) + ">>"
    return "{" + ",".join(_write(i) for i in node.items) + "}"


def _fits(node: _Node, col: int, most: int, ld: int, w: int) -> bool:
    return node.length < LINE_LENGTH - col - ld and node.length + w + ld <= most


def _last_depth(rest: list, ld: int) -> int:
    return 0 if rest else ld + 1


def _inline(node: _Node, col: int, most: int, ld1: int, w: int) -> bool:
    # pp_tail's test: does ",Elem" still fit on the current line?
    if node.kind != "leaf":
        return False
    elen = node.length + 1
    if ld1 == 0:
        return elen + 1 < LINE_LENGTH - col and w + elen + 1 <= most
    return elen < LINE_LENGTH - col - ld1 and w + elen + ld1 <= most


def _pp(node: _Node, col: int, most: int, tind: int, ind: str, ld: int, w: int) -> str:
    if _fits(node, col, most, ld, w):
        return _write(node)
    if node.kind == "tag_tuple":
        return "{" + _pp_tag_tuple(node.items, col, most, tind, ind, ld, w + 1) + "}"
    if node.kind == "tuple":
        return "{" + _pp_list(node.items, col + 1, most, tind, ind + " ", ld, w + 1) + "}"
    if node.kind == "bin":
        return "<<" + _pp_binary(node.items, col + 2, most, ind + "  ", ld, w) + ">>"
    return node.text


def _pp_tag_tuple(items: list, col: int, most: int, tind: int, ind: str, ld: int,
                  w: int) -> str:
    tag, rest = items[0], items[1:]
    tag_ind = tag.length + 2
    if tind > 0 and tag_ind > tind:
        return tag.text + _pp_tail(rest, col + tind, col + tag_ind, most, tind,
                                   ind + " " * tind, ld, w + tag.length)
    return tag.text + "," + _pp_list(rest, col + tag_ind, most, tind, ind + " " * tag_ind,
                                     ld, w + tag.length + 1)


def _pp_list(items: list, col0: int, most: int, tind: int, ind: str, ld: int, w: int) -> str:
    text, width = _pp_element(items[0], col0, most, tind, ind, _last_depth(items[1:], ld), w)
    return text + _pp_tail(items[1:], col0, col0 + width, most, tind, ind, ld, w + width)


def _pp_tail(items: list, col0: int, col: int, most: int, tind: int, ind: str, ld: int,
             w: int) -> str:
    out = []
    for i, node in enumerate(items):
        ld1 = _last_depth(items[i + 1:], ld)
        if _inline(node, col, most, ld1, w):
            out.append("," + node.text)
            col += node.length + 1
            w += node.length + 1
        else:
            text, width = _pp_element(node, col0, most, tind, ind, ld1, 0)
            out.append(",\n" + ind + text)
            col, w = col0 + width, width
    return "".join(out)


def _pp_element(node: _Node, col: int, most: int, tind: int, ind: str, ld: int,
                w: int) -> tuple[str, int]:
    if node.kind == "leaf" and _fits(node, col, most, ld, w):
        return node.text, node.length
    return _pp(node, col, most, tind, ind, ld, w), LINE_LENGTH


def _pp_binary(items: list, col: int, most: int, ind: str, ld: int, w: int) -> str:
    n0 = n = max(8, min(LINE_LENGTH - col, most - 4 - w) - ld)
    out = []
    for item in items[:-1]:
        size = len(item) + 1
        if n - size < 0:
            out.append("\n" + ind + item + ",")
            n = n0 - size
        else:
            out.append(item + ",")
            n -= size
    last = items[-1]
    out.append("\n" + ind + last if len(last) > n else last)
    return "".join(out)


def _cind(node: _Node, col: int, most: int, tind: int, ld: int, w: int) -> None:
    # Does indentation `tind` work for this term? Raises _NoGood if not (io_lib_pretty:cind).
    if _fits(node, col, most, ld, w):
        return
    if node.kind == "tag_tuple":
        tag, rest = node.items[0], node.items[1:]
        w += 1
        tag_ind = tag.length + 2
        tcol = col + tag_ind
        if tind > 0 and tag_ind > tind:
            col1 = col + tind
            if most + col1 <= LINE_LENGTH or col1 <= LINE_LENGTH // 2:
                _cind_tail(rest, col1, tcol, most, tind, ld, w + tag.length)
                return
            raise _NoGood
        if most + tcol < LINE_LENGTH or tcol < LINE_LENGTH // 2:
            _cind_list(rest, tcol, most, tind, ld, w + tag.length + 1)
            return
        raise _NoGood
    if node.kind == "tuple":
        _cind_list(node.items, col + 1, most, tind, ld, w + 1)


def _cind_list(items: list, col0: int, most: int, tind: int, ld: int, w: int) -> None:
    width = _cind_element(items[0], col0, most, tind, _last_depth(items[1:], ld), w)
    _cind_tail(items[1:], col0, col0 + width, most, tind, ld, w + width)


def _cind_tail(items: list, col0: int, col: int, most: int, tind: int, ld: int,
               w: int) -> None:
    for i, node in enumerate(items):
        ld1 = _last_depth(items[i + 1:], ld)
        if _inline(node, col, most, ld1, w):
            col += node.length + 1
            w += node.length + 1
        else:
            width = _cind_element(node, col0, most, tind, ld1, 0)
            col, w = col0 + width, width


def _cind_element(node: _Node, col: int, most: int, tind: int, ld: int, w: int) -> int:
    if node.kind == "leaf" and _fits(node, col, most, ld, w):
        return node.length
    _cind(node, col, most, tind, ld, w)
    return LINE_LENGTH


def _flat(term: object) -> str:
    if isinstance(term, bool):
        return "true" if term else "false"
    if isinstance(term, Atom):
        return str(term)
    if isinstance(term, int):
        return str(term)
    if isinstance(term, str):
        return '"' + "".join(_ESCAPES.get(ord(c), c) for c in term) + '"'
    if isinstance(term, (bytes, bytearray)):
        if not term:
            return "<<>>"
        if _printable(term):
            return '<<"' + "".join(_ESCAPES.get(b, chr(b)) for b in term) + '">>'
        return "<<" + ",".join(str(b) for b in term) + ">>"
    if isinstance(term, tuple):
        return "{" + ",".join(_flat(e) for e in term) + "}"
    raise TypeError(f"cannot print {type(term).__name__} as an Erlang term")


def _printable(data: bytes) -> bool:
    return all(32 <= b < 127 or b in _ESCAPES for b in data)
