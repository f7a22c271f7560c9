"""The end of every apply, shared by the one-pass and staged ingests and by the scanner: the counts, the
batch size, the usage rollup and the inventory's own rows, the log line, and failing an inventory."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from django.conf import settings
from django.utils import timezone

from catalog.models import CheckpointCopy
from fleet.choices import InventoryStatus
from fleet.models import Inventory, StorageLocation
from spend.usage import usage_refresh

log = logging.getLogger(__name__)


@dataclass
class MergeCounts:
    added: int
    changed: int
    gone: int


def flush_every() -> int:
    """Files judged between two writes of links and verification: bounds the worker's memory."""
    return settings.INGEST_CHUNK_ROWS * 4


def finish(
    inventory: Inventory, location: StorageLocation, *, now: datetime, files: int, total: int, counts, totals=None
) -> None:
    """The end of every apply, in its transaction: the usage rollup, the location's cursor, the inventory.

    ``totals`` ({copy id or None: (bytes, files)}) are given by an apply that wrote every present file itself.
    """

    found = CheckpointCopy.objects.filter(location=location, gone_at__isnull=True).count()
    usage_refresh(location=location, day=now.astimezone(UTC).date(), now=now, totals=totals)
    taken = inventory.taken_at or now
    StorageLocation.objects.filter(pk=location.pk).update(last_inventory=inventory, last_applied_at=taken)
    Inventory.objects.filter(pk=inventory.pk).update(
        status=InventoryStatus.APPLIED,
        finished_at=timezone.now(),
        files_count=files,
        bytes_total=total,
        files_added=counts.added,
        files_changed=counts.changed,
        files_gone=counts.gone,
        checkpoints_found=found,
    )


def log_applied(inventory, mode, files, counts, judged, t0, t1, t2, t3) -> None:
    log.info(
        "inventory %s applied (%s): staged %s rows in %.2f s, merged (+%s ~%s -%s) in %.2f s, "
        "judged %s checkpoint copies in %.2f s, committed in %.2f s",
        inventory.pk,
        mode,
        files,
        t1 - t0,
        counts.added,
        counts.changed,
        counts.gone,
        t2 - t1,
        judged,
        t3 - t2,
        time.monotonic() - t3,
    )


def end_apply(inventory: Inventory, location: StorageLocation, links, judge, *, now, files, total, counts) -> None:
    """The end of an apply that writes its new files a batch at a time (``links``, with ``flush``, ``close``
    and ``added``): the last batch and its verification, then ``finish``."""
    links.flush()
    judge.verify()
    links.close()
    counts.added = links.added
    finish(inventory, location, now=now, files=files, total=total, counts=counts)


def fail(inventory: Inventory, reason: str, line: int | None) -> Inventory:
    Inventory.objects.filter(pk=inventory.pk).update(
        status=InventoryStatus.FAILED, finished_at=timezone.now(), error=reason[:2000], error_line=line
    )
    StorageLocation.objects.filter(pk=inventory.location_id).update(last_inventory=inventory)
    inventory.refresh_from_db()
    log.warning("inventory %s of %s failed: %s", inventory.pk, inventory.location, reason)
    return inventory
