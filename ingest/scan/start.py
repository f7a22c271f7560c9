"""Starting scans: on demand (``scan_start``, one active scan per location) and on schedule (``scan_due``)."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.db.models import OuterRef, Subquery
from django.utils import timezone

from audit.actor import Actor
from audit.services import audit as audit_event
from ckptfleet.celery import task
from ckptfleet.errors import DomainError
from fleet.choices import InventorySource, InventoryStatus
from fleet.models import (
    Bucket,
    Inventory,
    StorageLocation,
)

log = logging.getLogger(__name__)

SCANNER = "ckptfleet-scanner/1"
BEAT_ACTOR = Actor.system("beat: scheduled bucket scan")
ACTIVE = (InventoryStatus.RECEIVED, InventoryStatus.PROCESSING)


def scan_start(*, location: StorageLocation, actor: Actor, audit: bool = True) -> Inventory:
    """Start a scan of a bucket location: an Inventory waiting for a worker, queued once this commits.

    The database allows one active scan per location (a partial unique index), so two starts racing
    each other cannot both win; the loser gets ``DomainError(code="scan_running")``. On-demand scans
    are audited; the scheduled ones (``audit=False``) would only repeat the schedule.
    """

    bucket = Bucket.objects.filter(location_id=location.pk).values("inventory_report_uri").first()
    if bucket is None:
        raise DomainError(
            f"{location.name} is not a bucket: hosts report their own inventories with the agent",
            code="not_a_bucket",
        )
    source = InventorySource.S3_INVENTORY if bucket["inventory_report_uri"] else InventorySource.BUCKET_LISTING
    try:
        with transaction.atomic():
            inventory = Inventory.objects.create(location_id=location.pk, source=source, agent=SCANNER)
            if audit:
                audit_event(
                    actor,
                    "location.scan",
                    target_type="location",
                    target_id=location.pk,
                    target_label=location.name,
                    after={"inventory": inventory.pk, "source": source},
                )
            transaction.on_commit(lambda: task("ingest.tasks.scan_bucket").delay(inventory.pk))
    except IntegrityError:
        running = (
            Inventory.objects.filter(location_id=location.pk, status__in=ACTIVE)
            .exclude(source=InventorySource.AGENT)
            .first()
        )
        if running is None:
            raise
        raise DomainError(
            f"a scan of {location.name} is already {running.status} (inventory #{running.pk}); "
            "one scan of a bucket runs at a time, so wait for it to finish",
            code="scan_running",
            http_status=409,
        ) from None
    return inventory


def scan_due(*, now: datetime | None = None) -> list[Inventory]:
    """Start a scan of every scheduled bucket whose last scan started ``scan_every_minutes`` ago or more.

    The last *started* scan counts, failed ones included, so a failing bucket is retried on its own
    schedule rather than every minute. A bucket whose scan is still running is left alone.
    """
    now = now or timezone.now()
    last = (
        Inventory.objects.filter(location_id=OuterRef("location_id"))
        .exclude(source=InventorySource.AGENT)
        .order_by("-received_at")
        .values("received_at")[:1]
    )
    due = (
        Bucket.objects.filter(scan_every_minutes__gt=0)
        .select_related("location")
        .annotate(last_scan=Subquery(last))
        .order_by("location__name")
    )
    started: list[Inventory] = []
    for bucket in due:
        if bucket.last_scan and bucket.last_scan > now - timedelta(minutes=bucket.scan_every_minutes):
            continue
        try:
            started.append(scan_start(location=bucket.location, actor=BEAT_ACTOR, audit=False))
        except DomainError as exc:
            log.info("scheduled scan of %s not started: %s", bucket.location.name, exc.message)
    return started
