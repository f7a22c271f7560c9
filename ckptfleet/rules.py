"""Validation rules every layer shares, each defined once. What the wire contract fixes (a file line's path, its
sha256) is defined by the agent (``fleet.agent``), which the server imports; these are the rest."""

from __future__ import annotations

import re

# A storage class as object stores spell it: STANDARD, STANDARD_IA, GLACIER_IR, DEEP_ARCHIVE, INTELLIGENT_TIERING,
# and the names S3-compatible stores add. The price book, bucket tier maps, promotion targets and settings use it.
STORAGE_CLASS = re.compile(r"^[A-Z][A-Z0-9_]{0,31}$")


def is_storage_class(value: object) -> bool:
    return isinstance(value, str) and STORAGE_CLASS.match(value) is not None


# What a person types as a host's, a location's or a team's name: printable, on one line, not padded.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def name_problem(value: object, what: str, max_length: int | None) -> str:
    """Why ``value`` is not a usable name of a ``what`` (a host, a storage location, a team), or "" when it is."""
    if not isinstance(value, str) or not value.strip():
        return f"a {what} needs a name"
    if value != value.strip():
        return f"the {what} name {value!r} starts or ends with a space"
    if max_length is not None and len(value) > max_length:
        return f"a {what} name is at most {max_length} characters"
    if _CONTROL.search(value):
        return f"the {what} name {value!r} holds a control character"
    return ""
