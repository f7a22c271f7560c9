"""Validation rules every layer shares, each defined once. What the wire contract fixes (a file line's path, its
sha256) is defined by the agent (``fleet.agent``), which the server imports; these are the rest."""

from __future__ import annotations

import re

# A storage class as object stores spell it: STANDARD, STANDARD_IA, GLACIER_IR, DEEP_ARCHIVE, INTELLIGENT_TIERING,
# and the names S3-compatible stores add. The price book, bucket tier maps, promotion targets and settings use it.
STORAGE_CLASS = re.compile(r"^[A-Z][A-Z0-9_]{0,31}$")


def is_storage_class(value: object) -> bool:
    return isinstance(value, str) and STORAGE_CLASS.match(value) is not None
