"""The warnings of an applied scan (skipped keys, failed HEADs, archived manifests), kept in the inventory."""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field

from fleet import s3

SKIPPED_EXAMPLES = 5
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass
class Notes:
    """Warnings of an applied scan, kept in the inventory's ``error`` field (which the UI shows for failures only)."""

    skipped: int = 0
    skipped_examples: list[str] = field(default_factory=list)
    unheaded: int = 0
    archived: int = 0
    unheaded_reason: str = ""
    other: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def skip(self, key: str, why: str) -> None:
        self.skipped += 1
        if len(self.skipped_examples) < SKIPPED_EXAMPLES:
            self.skipped_examples.append(f"{printable(key)} ({why})")

    def head_failed(self, error: s3.S3Error) -> None:
        with self.lock:
            self.unheaded += 1
            self.unheaded_reason = self.unheaded_reason or error.message

    def text(self) -> str:
        parts = []
        if self.skipped:
            parts.append(
                f"warning: skipped {self.skipped} key(s) that are not safe paths below the prefix, e.g. "
                + "; ".join(self.skipped_examples)
            )
        if self.unheaded:
            parts.append(
                f"warning: {self.unheaded} object(s) could not be HEADed, so their checksum, version and "
                f"lock state are unknown: {self.unheaded_reason}"
            )
        if self.archived:
            parts.append(
                f"note: {self.archived} manifest object(s) in archive storage classes were not read (that needs a "
                "restore); their checkpoints are judged from file names and sizes"
            )
        parts.extend(f"warning: {line}" for line in self.other)
        return "\n".join(parts)[:2000]


def printable(key: str) -> str:
    text = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", key)
    return repr(text if len(text) <= 200 else text[:197] + "...")
