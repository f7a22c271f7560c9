"""Planning the checksum phase: the objects to HEAD split into chunks (``plan_heads``) in the apply's
transaction, their tasks queued (``head_chunks_queue``) and queued again when stalled, and when a scan is a recheck."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from catalog.models import ShardFile
from ckptfleet.celery import task
from fleet.models import (
    Bucket,
    HeadChunk,
    HeadChunkState,
    Inventory,
)

log = logging.getLogger(__name__)

HEAD_CHUNK = 2000  # objects of one checksum-phase task: HEADed, then written and re-verified in one transaction
HEAD_STALLED = timedelta(minutes=30)  # a scan's chunks with no progress this long are queued again


def plan_heads(
    inventory: Inventory, bucket: Bucket, *, head_all: bool, versioned: bool, recheck: bool, write_lock_state: bool
) -> None:
    """Split what this scan added or changed into HEAD chunks, in the transaction that applies it.

    On a recheck (``recheck_due``) every present object goes into the chunks, so that a checksum
    that changed or went without the ETag changing is seen and when each was last confirmed is
    refreshed. The chunks are rows, so a worker lost between the commit and the queueing loses no
    work: the sweep queues them again (``head_chunks_resend``). Keys go in path order, so a
    checkpoint's files mostly share a chunk and are verified again together.

    ``head_all``: every object was HEADed while listing (an Object Lock bucket); ``write_lock_state``: the
    chunks write the lock state the store gives (not when it came with the listing or its report).
    """
    if head_all or not (bucket.fetch_checksums or versioned):
        return  # nothing to fetch, or everything was HEADed while listing (an Object Lock bucket)
    rows = ShardFile.objects.filter(location_id=bucket.location_id, gone_at__isnull=True)
    if not recheck:
        rows = rows.filter(changed_by_id=inventory.pk)
    rows = rows.exclude(etag="").order_by("path").values_list("path", "etag")
    chunks: list[HeadChunk] = []
    items: list[list[str]] = []
    total = 0

    def close() -> None:
        chunks.append(
            HeadChunk(
                inventory_id=inventory.pk,
                location_id=bucket.location_id,
                seq=len(chunks),
                items=items,
                size=len(items),
                write_lock_state=write_lock_state,
            )
        )

    for path, etag in rows.iterator(chunk_size=5000):
        items.append([path, etag])
        total += 1
        if len(items) >= HEAD_CHUNK:
            close()
            items = []
    if items:
        close()
    HeadChunk.objects.bulk_create(chunks, batch_size=20)
    Inventory.objects.filter(pk=inventory.pk).update(
        checksums_total=total,
        checksums_done=0,
        checksums_failed=0,
        checksums_finished_at=None if total else timezone.now(),
    )
    if not total:
        log.info(
            "scan %s stored: 0 HEAD requests after the snapshot, 0 files updated, 0 copies re-verified, in 0.00 s "
            "(nothing added or changed)",
            inventory.pk,
        )


def head_chunks_queue(inventory_id: int, *, queue: str | None = None) -> int:
    """Queue a task for each pending chunk of one scan's checksum phase (once this transaction commits)."""

    ids = list(
        HeadChunk.objects.filter(inventory_id=inventory_id, state=HeadChunkState.PENDING)
        .order_by("seq")
        .values_list("pk", flat=True)
    )
    options = {"queue": queue} if queue else {}
    for pk in ids:
        transaction.on_commit(lambda pk=pk: task("ingest.tasks.head_chunk").apply_async((pk,), **options))
    return len(ids)


def head_chunks_resend(*, now: datetime | None = None) -> int:
    """Queue again the pending chunks of scans whose checksum phase made no progress for ``HEAD_STALLED``.

    A chunk's message can be lost (a broker restart without persistence, a worker killed between the
    apply and the queueing). A chunk still waiting behind a long queue may be sent twice; the second
    delivery finds it done and writes nothing.
    """
    now = now or timezone.now()
    cutoff = now - HEAD_STALLED
    stalled = []
    pending = (
        Inventory.objects.filter(head_chunks__state=HeadChunkState.PENDING, finished_at__lt=cutoff)
        .order_by()
        .values_list("pk", flat=True)
        .distinct()
    )
    for inventory_id in pending:
        last = (
            HeadChunk.objects.filter(inventory_id=inventory_id, finished_at__isnull=False)
            .order_by("-finished_at")
            .values_list("finished_at", flat=True)
            .first()
        )
        if last is None or last < cutoff:
            stalled.append(inventory_id)
    return sum(head_chunks_queue(inventory_id) for inventory_id in stalled)


def recheck_due(bucket: Bucket, now: datetime) -> bool:
    """Whether a scan of this bucket now is a recheck: every object HEADed again (``Bucket.recheck_days``).

    Only where checksums are fetched at all; the first scan of a bucket (or the first since this
    setting came) is one, which for a new bucket is no more than it would HEAD anyway.
    """
    if not bucket.fetch_checksums or not bucket.recheck_days:
        return False
    return bucket.rechecked_at is None or bucket.rechecked_at <= now - timedelta(days=bucket.recheck_days)
