"""Running one scan: claim it, list the bucket into staged rows, apply the snapshot, start the checksum phase."""

from __future__ import annotations

import logging
import time

from django.db import DatabaseError
from django.db.models import Q
from django.utils import timezone

from actions.objectlock import mirror_after_scan
from ckptfleet.heap import collector_paused
from fleet import s3
from fleet.choices import InventorySource, InventoryStatus
from fleet.models import (
    Bucket,
    Inventory,
)
from ingest.inventory.apply import fail
from ingest.inventory.rows import InventoryError
from ingest.inventory.staging import unstage
from ingest.scan.scanner import Scanner

log = logging.getLogger(__name__)


def scan_run(inventory_id: int, *, claim: str = "", queue: str | None = None) -> Inventory | None:
    """``_scan_run`` with the cyclic garbage collector paused: a listing of a large bucket makes millions of
    objects that form no cycle, as an ingest does (``ckptfleet.heap.collector_paused``)."""

    with collector_paused():
        return _scan_run(inventory_id, claim=claim, queue=queue)


def _scan_run(inventory_id: int, *, claim: str = "", queue: str | None = None) -> Inventory | None:
    """Scan the bucket of one waiting scan and apply the snapshot, all or nothing. Safe to run twice.

    ``claim`` is the task id: a redelivery of the same task (its worker died) may take the scan over
    and start again; another task may not. ``queue`` is where the checksum phase's chunks go (the
    queue the scan came from; None: the default one). A listing that fails for good (after botocore's
    retries with backoff) fails the scan with the store's error code and message: nothing is applied
    and nothing is marked gone.
    """
    waiting = Q(status=InventoryStatus.RECEIVED)
    if claim:
        waiting |= Q(status=InventoryStatus.PROCESSING, claimed_by=claim)
    claimed = (
        Inventory.objects.filter(waiting, pk=inventory_id)
        .exclude(source=InventorySource.AGENT)
        .update(status=InventoryStatus.PROCESSING, started_at=timezone.now(), claimed_by=claim)
    )
    if claimed != 1:
        log.info("scan %s is not waiting to run; nothing to do", inventory_id)
        return None
    inventory = Inventory.objects.select_related("location").get(pk=inventory_id)
    bucket = Bucket.objects.select_related("location").filter(location_id=inventory.location_id).first()
    if bucket is None:
        return fail(inventory, "the location has no bucket settings, so there is nothing to scan", None)
    unstage(inventory.pk)  # a worker killed mid-scan may have left rows behind
    started = time.monotonic()
    scanner = Scanner(inventory, bucket)
    scanner.queue = queue
    try:
        files, total = scanner.stage()
    except s3.S3Error as exc:
        unstage(inventory.pk)
        return fail(inventory, f"{scanner.what} failed: {exc.message}. Nothing was applied or marked gone.", None)
    except InventoryError as exc:
        unstage(inventory.pk)
        return fail(inventory, f"{scanner.what}: {exc.reason}. Nothing was applied or marked gone.", exc.line)
    except DatabaseError as exc:
        unstage(inventory.pk)
        return fail(inventory, f"the database refused a value: {str(exc).splitlines()[0]}", None)
    except Exception as exc:
        # A bug must not leave the scan "processing", which would block every later scan of the bucket.
        unstage(inventory.pk)
        fail(inventory, f"internal error: {type(exc).__name__}: {exc}", None)
        raise
    applied = scanner.apply(files=files, total=total, started=started, claim=claim)
    if applied is not None and applied.status == InventoryStatus.APPLIED:
        scanner.fetch_stored()
        applied.refresh_from_db()
        _mirror_holds(applied)
    return applied


def _mirror_holds(inventory: Inventory) -> None:
    """Holds cover objects that appear after them: mirror them onto what the scan found (``actions.objectlock``)."""

    mirror_after_scan(inventory=inventory)
