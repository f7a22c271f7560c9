"""One run of one scan (``Scanner``): it lists the bucket (or reads its report) into staged rows, with its
collaborators (``listing``, ``report``, ``objects``, ``prejudge``), then applies the snapshot with what the
bucket itself said (``apply``, ``first_apply``) and plans the checksum phase (``head_plan``)."""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from catalog.models import ShardFile
from fleet import s3
from fleet.choices import InventoryStatus
from fleet.models import (
    Bucket,
    Inventory,
    StorageLocation,
)
from ingest.inventory.rows import Row
from ingest.inventory.staged import apply_staged
from ingest.inventory.staging import stage_rows, unstage
from ingest.scan.apply import apply_uploads, apply_versions
from ingest.scan.first_apply import apply_first
from ingest.scan.head_plan import head_chunks_queue, plan_heads, recheck_due
from ingest.scan.listing import listing_pages, noncurrent_versions
from ingest.scan.notes import Notes
from ingest.scan.objects import ObjectRows
from ingest.scan.prejudge import PreJudge
from ingest.scan.report import ReportReader

log = logging.getLogger(__name__)


class Scanner:
    """One run of one scan: lists (or reads the report of) a bucket into staged rows, then applies them.

    The pages come from ``listing.listing_pages`` or a ``report.ReportReader``; ``objects.ObjectRows`` turns
    them into rows (its ranged GETs and HEADs by a ``fetch.Fetcher``); ``prejudge.PreJudge`` recognises a
    first listing's run directories meanwhile. The apply writes the uploads and versions (``apply``), the snapshot
    (``first_apply.apply_first`` or ``ingest.inventory``'s ``apply_staged``) and plans the checksum phase.
    """

    def __init__(self, inventory: Inventory, bucket: Bucket) -> None:
        self.inventory = inventory
        self.bucket = bucket
        self.location = bucket.location
        self.prefix = bucket.prefix if not bucket.prefix or bucket.prefix.endswith("/") else bucket.prefix + "/"
        self.report = bool(bucket.inventory_report_uri)
        where = f"s3://{bucket.bucket_name}/{self.prefix}"
        self.what = (
            f"reading the S3 Inventory report {bucket.inventory_report_uri} of {where}"
            if self.report
            else f"listing {where}"
        )
        self.notes = Notes()
        self.client: Any = None
        self.versioning: str | None = None
        self.object_lock: bool | None = None
        self.abort_days: int | None = None  # the bucket's AbortIncompleteMultipartUpload rule, as read now
        self.uploads: list[s3.UploadInfo] | None = None
        self.lock_enabled = False
        self.versioned = False
        self.recheck = False  # a full pass: every object HEADed again, not only what this scan added or changed
        self.objects: ObjectRows | None = None  # the listed objects' rows, made in ``stage``
        self.versions: list[s3.VersionInfo] | None = None
        self.queue: str | None = None  # where the checksum phase's chunks are queued (None: the default queue)
        self.prejudged: PreJudge | None = None  # a first listing's run directories, recognised while listing

    # -- staging

    def stage(self) -> tuple[int, int]:
        """List the bucket (or read its report) into staged rows; then list its incomplete uploads."""
        self.client = s3.client_for(self.bucket)
        name = self.bucket.bucket_name
        self.versioning = s3.bucket_versioning(self.client, name)
        self.object_lock = s3.bucket_object_lock(self.client, name)
        self.abort_days = s3.abort_uploads_days(self.client, name, self.prefix)
        if self.versioning is None or self.object_lock is None:
            self.notes.other.append(
                "the bucket's versioning or Object Lock configuration could not be read; the last known is kept"
            )
        self.versioned = (self.versioning if self.versioning is not None else self.bucket.versioning) in (
            "Enabled",
            "Suspended",
        )
        self.lock_enabled = bool(self.object_lock if self.object_lock is not None else self.bucket.object_lock)
        self.recheck = recheck_due(self.bucket, timezone.now())
        known_paths = ShardFile.objects.filter(location_id=self.location.pk).exists()
        objects = self.objects = ObjectRows(
            self.client,
            self.bucket,
            self.prefix,
            self.notes,
            lock_enabled=self.lock_enabled,
            recheck=self.recheck,
            known_paths=known_paths,
        )
        if self.report:
            taken, pages = ReportReader(self.client, self.bucket, self.prefix).pages()
        else:
            taken, pages = timezone.now(), listing_pages(self.client, name, self.prefix)
        Inventory.objects.filter(pk=self.inventory.pk).update(taken_at=taken)
        self.inventory.taken_at = taken
        files = total = 0
        # A first listing's run directories are recognised as soon as the listing has passed them.
        prejudge = PreJudge.start(self.location) if not (known_paths or self.report) else None
        # A batch at a time, each staged by its own call: the rows are made (and the last scan's
        # facts looked up, a database query) while no COPY holds the connection.
        batch: list[Row] = []
        try:
            for row in objects.rows(pages):
                batch.append(row)
                if prejudge is not None:
                    prejudge.add(row)
                if len(batch) >= settings.INGEST_CHUNK_ROWS:
                    files, total = self._stage(batch, files, total)
                    batch = []
            if batch or not files:
                files, total = self._stage(batch, files, total)
            if prejudge is not None:
                prejudge.close()  # the last run directories are recognised while the uploads are listed
            self.uploads = s3.multipart_uploads(self.client, name, self.prefix)
            if self.uploads is None:
                self.notes.other.append("incomplete multipart uploads could not be listed; the last known are kept")
            if self.versioned:
                self.versions = noncurrent_versions(self.client, name, self.prefix, self.notes)
            if prejudge is not None:
                prejudge.finish()
        finally:
            if prejudge is not None:
                prejudge.stop()
        self.prejudged = prejudge
        log.info(
            "scan %s of %s: %s objects staged, %s HEAD and %s ranged GET requests",
            self.inventory.pk,
            self.location.name,
            files,
            objects.fetcher.heads,
            objects.fetcher.gets,
        )
        return files, total

    def _stage(self, batch: list[Row], files: int, total: int) -> tuple[int, int]:
        staged, size = stage_rows(self.inventory, batch)
        files, total = files + staged, total + size
        self._progress(files, total)
        return files, total

    def _progress(self, files: int, total: int) -> None:
        Inventory.objects.filter(pk=self.inventory.pk).update(files_count=files, bytes_total=total)

    # -- after the snapshot is applied

    def fetch_stored(self) -> None:
        """Start the checksum phase planned when the snapshot was applied: one task per chunk, any worker's.

        HEAD is one request per object, a thousand times a listing's cost, so it is kept off the
        listing's path: the snapshot is applied first (new objects unverified, with the reason that
        their checksum is unknown), with the objects this scan added or changed split into chunks of
        ``HEAD_CHUNK`` (``head_plan.plan_heads``, in the same transaction). Each chunk is a task
        (``ingest.tasks.head_chunk``) that HEADs its objects, writes what the store says and verifies
        their checkpoints again (``head_chunk_run``), retried with backoff while the store struggles.
        The chunks go to the queue this scan came from. In-process (``CELERY_TASK_ALWAYS_EAGER``) they
        run here, one after another.
        """
        head_chunks_queue(self.inventory.pk, queue=self.queue)

    # -- applying

    def apply(self, *, files: int, total: int, started: float, claim: str) -> Inventory | None:
        """Merge the staged snapshot, the multipart uploads and the bucket's state in one transaction."""
        inventory = self.inventory
        try:
            with transaction.atomic():
                still_mine = (
                    Inventory.objects.select_for_update(of=("self",))
                    .filter(pk=inventory.pk, status=InventoryStatus.PROCESSING, claimed_by=claim)
                    .exists()
                )
                if not still_mine:
                    # The sweep gave up on it (or another delivery took it): its result is not wanted now.
                    unstage(inventory.pk)
                    log.warning("scan %s was taken away while it ran; its result is dropped", inventory.pk)
                    return None
                # Uploads and versions first, under the lock the merge takes: the merge rolls up usage,
                # and what it sums of them must be this scan's, not the last one's.
                StorageLocation.objects.locked().filter(pk=self.location.pk).first()
                now = timezone.now()
                apply_uploads(self.location, self.uploads, now)
                apply_versions(self.location, self.versions, versioned=self.versioned, now=now)
                prejudged, self.prejudged = self.prejudged, None  # freed once applied
                if prejudged is not None and prejudged.usable():
                    inventory = apply_first(inventory, prejudged, files=files, total=total, started=started)
                else:
                    inventory = apply_staged(inventory, files=files, total=total, started=started)
                listed = self.objects
                plan_heads(
                    inventory,
                    self.bucket,
                    head_all=listed is not None and listed.head_all,
                    versioned=self.versioned,
                    recheck=self.recheck,
                    # A lock bucket's state came with the listing (HEADed) or its report, and belongs to the snapshot.
                    write_lock_state=not (self.lock_enabled or (listed is not None and listed.lock_listed)),
                )
                state: dict[str, Any] = {}
                if self.versioning is not None:
                    state["versioning"] = self.versioning
                if self.object_lock is not None:
                    state["object_lock"] = self.object_lock
                if self.abort_days is not None:
                    state["abort_uploads_days"] = self.abort_days
                if self.recheck:
                    state["rechecked_at"] = now
                if state:
                    Bucket.objects.filter(pk=self.bucket.pk).update(**state)
                notes = self.notes.text()
                if notes:
                    Inventory.objects.filter(pk=inventory.pk).update(error=notes)
        except Exception:
            unstage(inventory.pk)
            raise
        inventory.refresh_from_db()
        return inventory
