"""The bookkeeping of the inventory queue: re-queue the lost, fail the abandoned, remove old uploads."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Q
from django.utils import timezone

from ckptfleet.celery import task
from fleet.choices import InventorySource, InventoryStatus
from fleet.models import Inventory
from ingest.inventory.staging import unstage

RESEND_AFTER = timedelta(minutes=10)
STALE_AFTER = timedelta(hours=2)
# A listing of tens of millions of objects can take hours; a scan is abandoned much later.
STALE_SCAN_AFTER = timedelta(hours=24)
KEEP_APPLIED_UPLOADS = timedelta(days=1)
KEEP_FAILED_UPLOADS = timedelta(days=30)


@dataclass
class SweepCounts:
    resent: int = 0
    abandoned: int = 0
    uploads_removed: int = 0


def sweep(*, now: datetime | None = None) -> SweepCounts:
    """Periodic care of the inventory queue, so that no upload waits or lingers forever.

    - received but never picked up (the broker lost the message): queued again;
    - claimed but not finished long after (the worker died and its message is gone): failed, with why;
    - stored uploads removed once applied (a day later) or failed (a month later, for diagnosis).
    """

    now = now or timezone.now()
    counts = SweepCounts()
    waiting = Inventory.objects.filter(status=InventoryStatus.RECEIVED, received_at__lt=now - RESEND_AFTER)
    for pk, source in waiting.values_list("pk", "source")[:1000]:
        task("ingest.tasks.ingest_inventory" if source == InventorySource.AGENT else "ingest.tasks.scan_bucket").delay(
            pk
        )
        counts.resent += 1
    processing = Inventory.objects.filter(status=InventoryStatus.PROCESSING)
    stale = list(
        processing.filter(
            Q(source=InventorySource.AGENT, started_at__lt=now - STALE_AFTER)
            | (~Q(source=InventorySource.AGENT) & Q(started_at__lt=now - STALE_SCAN_AFTER))
        ).values_list("pk", flat=True)[:1000]
    )
    for pk in stale:
        unstage(pk)
        counts.abandoned += Inventory.objects.filter(pk=pk, status=InventoryStatus.PROCESSING).update(
            status=InventoryStatus.FAILED,
            finished_at=now,
            error="abandoned: not finished long after it started (the worker stopped); "
            "the next inventory or scan of the location replaces it",
        )
    old = Inventory.objects.exclude(upload="").filter(
        Q(status=InventoryStatus.APPLIED, finished_at__lt=now - KEEP_APPLIED_UPLOADS)
        | Q(status=InventoryStatus.FAILED, finished_at__lt=now - KEEP_FAILED_UPLOADS)
    )
    for inventory in old[:1000]:
        inventory.upload.delete(save=False)
        Inventory.objects.filter(pk=inventory.pk).update(upload="")
        counts.uploads_removed += 1
    return counts
