"""Applying one received inventory: claim it, try the one-pass way, else stage it and apply it the staged
way; a bad upload fails the inventory with the line and the reason, having changed nothing."""

from __future__ import annotations

import logging
import time

from django.db import DatabaseError
from django.db.models import Q
from django.utils import timezone

from catalog.models import ShardFile
from ckptfleet.heap import collector_paused
from fleet.choices import InventorySource, InventoryStatus
from fleet.models import Inventory
from ingest.inventory.apply import fail
from ingest.inventory.direct import ingest_direct
from ingest.inventory.rows import InventoryError
from ingest.inventory.staged import apply_staged
from ingest.inventory.staging import stage, unstage

log = logging.getLogger(__name__)


def ingest(inventory_id: int, *, claim: str = "") -> Inventory | None:
    """Apply one received inventory, all or nothing (``_ingest``), with the cyclic garbage collector paused:
    a million files make millions of objects that form no cycle (``ckptfleet.heap.collector_paused``)."""

    with collector_paused():
        return _ingest(inventory_id, claim=claim)


def _ingest(inventory_id: int, *, claim: str = "") -> Inventory | None:
    """Apply one received inventory, all or nothing. Safe to run twice: only one run claims it.

    ``claim`` is the task id: a redelivery of the same task (its worker died mid-way) may take the
    inventory over again, a different task may not. The first inventory of a location that has no
    shard files yet is applied in one pass (``ingest_direct``) when it is sorted by path as the agent
    sends it and every line is as it should be; any other is staged, then merged (``apply_staged``).
    """
    waiting = Q(status=InventoryStatus.RECEIVED)
    if claim:
        waiting |= Q(status=InventoryStatus.PROCESSING, claimed_by=claim)
    # Scans have no upload: they are applied by ingest.scan.scan_run, never here.
    claimed = Inventory.objects.filter(waiting, pk=inventory_id, source=InventorySource.AGENT).update(
        status=InventoryStatus.PROCESSING, started_at=timezone.now(), claimed_by=claim
    )
    if claimed != 1:
        log.info("inventory %s is not waiting to be ingested; nothing to do", inventory_id)
        return None
    inventory = Inventory.objects.select_related("location").get(pk=inventory_id)
    location = inventory.location
    unstage(inventory.pk)  # a worker killed mid-staging may have left rows behind
    t0 = time.monotonic()
    header: dict = {}
    try:
        if not ShardFile.objects.filter(location=location).exists():
            done = ingest_direct(inventory, started=t0)
            if done is not None:
                return done
            t0 = time.monotonic()  # not taken in one pass: staged below, timed from here
        with inventory.upload.open("rb") as stream:
            files, total = stage(inventory, stream, header)
        if files == 0 and not header.get("allow_empty"):
            present = ShardFile.objects.filter(location=location, gone_at__isnull=True).count()
            if present:
                raise InventoryError(
                    None,
                    f"the root reported no files, but {present} were present: is its file system mounted? "
                    "If it is really empty now, run the agent with --allow-empty",
                )
    except InventoryError as exc:
        unstage(inventory.pk)
        return fail(inventory, exc.reason, exc.line)
    except OSError as exc:
        unstage(inventory.pk)
        return fail(inventory, f"the stored upload cannot be read: {exc}", None)
    except DatabaseError as exc:
        unstage(inventory.pk)
        return fail(inventory, f"the database refused a value: {str(exc).splitlines()[0]}", None)

    return apply_staged(inventory, files=files, total=total, started=t0)
