"""Reading JSON from outside (API bodies, agent answers, inventory lines) without letting its shape hurt us.

One rule, one place: a document nested deeper than ``MAX_DEPTH`` arrays and objects is refused with
``JsonTooDeep`` (a ValueError, so every caller's "not valid JSON" path takes it). Python's decoder recurses
once per level and raises RecursionError near 1,000 levels, which escaped as an HTTP 500 and crashed the
ingest task; nothing we read is legitimately deeper than a few levels, so the bound is far below that.

The check costs nothing for ordinary documents: only text with more than ``MAX_DEPTH`` opening brackets
can be too deep, and only then is the decoded value walked (iteratively, never recursively).
"""

from __future__ import annotations

import json
from typing import Any

MAX_DEPTH = 64


class JsonTooDeep(ValueError):
    """The document nests arrays and objects deeper than MAX_DEPTH."""

    def __init__(self) -> None:
        super().__init__(f"JSON nested deeper than {MAX_DEPTH} levels")


class JsonHasNul(ValueError):
    """A string holds U+0000, which PostgreSQL's text and jsonb cannot store."""

    def __init__(self) -> None:
        super().__init__("JSON strings may not contain the NUL character (\\u0000)")


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def depth(value: Any) -> int:
    """How deeply ``value`` nests lists and dicts (a scalar is 0, ``[]`` is 1), without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        level += 1
        if level > deepest:
            deepest = level
            if deepest > MAX_DEPTH:
                return deepest
        stack.extend((child, level) for child in children if isinstance(child, (dict, list)))
    return deepest


def _has_nul(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def check(text: str | bytes, value: Any, *, refuse_nul: bool = False) -> Any:
    """Return ``value`` (decoded from ``text`` by any decoder) or raise JsonTooDeep / JsonHasNul."""
    opening = (b"[", b"{") if isinstance(text, bytes) else ("[", "{")
    if text.count(opening[0]) + text.count(opening[1]) > MAX_DEPTH and depth(value) > MAX_DEPTH:  # type: ignore[arg-type]
        raise JsonTooDeep
    if refuse_nul and (b"\\u0000" if isinstance(text, bytes) else "\\u0000") in text and _has_nul(value):  # type: ignore[operator]
        raise JsonHasNul
    return value


def loads(text: str | bytes, *, refuse_nul: bool = False, allow_nan: bool = False) -> Any:
    """``json.loads`` with the depth bounded and (unless ``allow_nan``) NaN and Infinity refused; every refusal is
    a ValueError."""
    try:
        value = json.loads(text) if allow_nan else json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise JsonTooDeep from None
    return check(text, value, refuse_nul=refuse_nul)
