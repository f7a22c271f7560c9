"""What an inventory line becomes: a staged ``Row``, the staged and shard-file columns, and ``InventoryError``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


class InventoryError(Exception):
    """A reason to reject the whole inventory, with the 1-based line it was found on."""

    def __init__(self, line: int | None, reason: str) -> None:
        super().__init__(f"line {line}: {reason}" if line else reason)
        self.line = line
        self.reason = reason


@dataclass(slots=True)
class Row:
    """One file or object, ready to stage. Host inventories leave the object fields empty."""

    path: str
    size: int
    mtime: datetime
    checksum: str = ""
    checksum_algo: str = ""
    facts: str | None = None  # canonical JSON text, or None
    storage_class: str = ""
    tier: str = ""
    etag: str = ""
    version_id: str = ""
    legal_hold: bool | None = None
    retain_until: datetime | None = None
    digests: str | None = None  # canonical JSON text of catalog.digests, or None

    def values(self, inventory_id: int, adapt) -> tuple:
        return (
            inventory_id,
            self.path,
            self.size,
            adapt(self.mtime),
            self.checksum,
            self.checksum_algo,
            self.facts,
            self.storage_class,
            self.tier,
            self.etag,
            self.version_id,
            self.legal_hold,
            adapt(self.retain_until) if self.retain_until else None,
            self.digests,
        )


STAGED_COLUMNS = (
    "path",
    "size",
    "mtime",
    "checksum",
    "checksum_algo",
    "facts",
    "storage_class",
    "tier",
    "etag",
    "version_id",
    "legal_hold",
    "retain_until",
    "digests",
)

SHARD_COLUMNS = (*STAGED_COLUMNS, "first_seen_at", "changed_at", "changed_by_id", "copy_id")
