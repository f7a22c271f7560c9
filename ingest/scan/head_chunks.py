"""One chunk of a scan's checksum phase, one task each: HEADed, written conditional on the ETag listed, and
its checkpoints verified again, in one transaction under the location's lock; retried with backoff."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from django.db import connection, transaction
from django.db.models import F, Sum
from django.db.models.expressions import RawSQL
from django.utils import timezone

from catalog.digests import dumps as digests_dumps
from catalog.models import CheckpointCopy, ShardFile
from catalog.verification import checkpoints_verify
from fleet import s3
from fleet.models import (
    Bucket,
    HeadChunk,
    HeadChunkState,
    Inventory,
    StorageLocation,
)
from spend.usage import usage_refresh

log = logging.getLogger(__name__)

HEAD_THREADS = 16  # HEAD requests wait on the store, not on this process
HEAD_RETRIES = 5  # retries of a chunk while the store throttles, fails with 5xx or times out
HEAD_BACKOFF = 5.0  # seconds before a chunk's first retry; doubled each time, with jitter
HEAD_BACKOFF_MAX = 300.0


class ChunkRetry(Exception):
    """A chunk met a store that may answer later (throttling, 5xx, a timeout): its task retries it."""

    def __init__(self, error: s3.S3Error) -> None:
        super().__init__(error.message)
        self.error = error


def head_backoff(retries: int) -> float:
    """Seconds before a chunk's next attempt: exponential, capped, with full jitter (many chunks retry at once)."""
    return random.uniform(HEAD_BACKOFF / 2, min(HEAD_BACKOFF_MAX, HEAD_BACKOFF * 2**retries))


def head_chunk_run(chunk_id: int, *, final: bool = True, worker: str = "") -> str:
    """HEAD one chunk's objects, write what the store says and verify their checkpoints again. Idempotent.

    Raises ``ChunkRetry`` when the store may answer later and this is not the ``final`` attempt; on
    the final one the chunk is given up (marked failed, its objects left unverified, the reason kept).
    An object refused for good (AccessDenied) is counted as failed and the others are written. An
    object gone or rewritten since it was listed (the conditional HEAD says so, or the shard file now
    carries another ETag) is left alone: the scan that sees the new content fetches its checksum.
    """
    chunk = HeadChunk.objects.filter(pk=chunk_id).first()
    if chunk is None or chunk.state != HeadChunkState.PENDING:
        return "skipped"
    HeadChunk.objects.filter(pk=chunk.pk).update(attempts=F("attempts") + 1)
    attempts = chunk.attempts + 1
    started = time.monotonic()
    bucket = Bucket.objects.filter(location_id=chunk.location_id).first()
    if bucket is None:
        return _chunk_end(chunk, {}, gave_up=True, error="the location has no bucket settings any more", worker=worker)
    try:
        answers, failed, error = _head_items(bucket, chunk.items)
    except s3.S3Error as exc:
        if exc.transient and not final:
            raise ChunkRetry(exc) from None
        why = f"given up after {attempts} attempts" if exc.transient else "not retried: it would fail the same way"
        return _chunk_end(chunk, {}, gave_up=True, error=f"{exc.message}; {why}", worker=worker)
    state = _chunk_end(chunk, answers, gave_up=False, failed=failed, error=error, worker=worker)
    log.info(
        "HEAD chunk %s (scan %s, %s objects, attempt %s): %s in %.2f s",
        chunk.seq,
        chunk.inventory_id,
        chunk.size,
        attempts,
        state,
        time.monotonic() - started,
    )
    return state


def _head_items(bucket: Bucket, items: list[list[str]]) -> tuple[dict[str, s3.HeadInfo], int, str]:
    """HEAD every ``[path, ETag]`` by ``HEAD_THREADS`` threads: (answers by path, objects refused, first refusal).

    A transient failure of any object raises (the chunk is retried whole); a refusal is counted.
    """
    client = s3.client_for(bucket)
    prefix = bucket.prefix if not bucket.prefix or bucket.prefix.endswith("/") else bucket.prefix + "/"

    def one(item: list[str]) -> s3.HeadInfo | s3.S3Error | None:
        path, etag = item
        try:
            return s3.head(client, bucket.bucket_name, prefix + path, etag=etag)
        except s3.S3Error as exc:
            if exc.transient:
                raise
            return exc

    answers: dict[str, s3.HeadInfo] = {}
    failed = 0
    first = ""
    pool = ThreadPoolExecutor(max_workers=HEAD_THREADS, thread_name_prefix="s3-head")
    try:
        for (path, _etag), answer in zip(items, pool.map(one, items), strict=True):
            if isinstance(answer, s3.S3Error):
                failed += 1
                first = first or answer.message
            elif answer is not None:
                answers[path] = answer
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return answers, failed, first


def _chunk_end(
    chunk: HeadChunk,
    answers: dict[str, s3.HeadInfo],
    *,
    gave_up: bool,
    failed: int = 0,
    error: str = "",
    worker: str = "",
) -> str:
    """Write one chunk's answers, verify its checkpoints again and count it, in one transaction."""

    state = HeadChunkState.FAILED if gave_up else HeadChunkState.DONE
    failed = chunk.size if gave_up else failed
    fields = ["checksum", "checksum_algo", "version_id", "legal_hold", "retain_until", "digests"]
    with transaction.atomic():
        # The ingest's lock: a scan or inventory applying at this location waits, and is waited for.
        location = StorageLocation.objects.locked().filter(pk=chunk.location_id).first()
        now = timezone.now()
        took = HeadChunk.objects.filter(pk=chunk.pk, state=HeadChunkState.PENDING).update(
            state=state,
            finished_at=now,
            failed=failed,
            error=error[:2000],
            done_by=worker[:200],
            # The keys are only worth keeping while something of the chunk is unresolved.
            items=chunk.items if failed else [],
        )
        if not took or location is None:
            return "skipped"  # another delivery finished it first
        listed = {path: etag for path, etag in chunk.items if path in answers}
        changed = []
        for path_batch in _batches(list(listed), 1000):
            for row in ShardFile.objects.filter(
                location_id=chunk.location_id, path__in=path_batch, gone_at__isnull=True
            ).only("pk", "path", "etag", "copy_id", *fields):
                if row.etag != listed[row.path]:
                    continue  # rewritten since it was listed: the next scan fetches for the new content
                info = answers[row.path]
                values = {
                    "checksum": info.checksum or row.checksum,
                    "checksum_algo": info.checksum_algo if info.checksum else row.checksum_algo,
                    "version_id": (info.version_id or row.version_id)[:1024],
                    "legal_hold": info.legal_hold if chunk.write_lock_state else row.legal_hold,
                    "retain_until": info.retain_until if chunk.write_lock_state else row.retain_until,
                    # What the store says now, the time of this HEAD included (a recheck refreshes it).
                    "digests": info.digests or row.digests,
                }
                if any(getattr(row, k) != v for k, v in values.items()):
                    for k, v in values.items():
                        setattr(row, k, v)
                    changed.append(row)
        for row in changed:
            row.digests = _json_text(row.digests)
        ShardFile.objects.bulk_update(changed, fields, batch_size=1000)
        copy_ids = {row.copy_id for row in changed if row.copy_id}
        copies = 0
        if copy_ids:
            checkpoints = set(CheckpointCopy.objects.filter(pk__in=copy_ids).values_list("checkpoint_id", flat=True))
            copies = checkpoints_verify(checkpoints)
        HeadChunk.objects.filter(pk=chunk.pk).update(written=len(changed), copies=copies)
        Inventory.objects.filter(pk=chunk.inventory_id).update(
            checksums_done=F("checksums_done") + chunk.size, checksums_failed=F("checksums_failed") + failed
        )
        if not HeadChunk.objects.filter(inventory_id=chunk.inventory_id, state=HeadChunkState.PENDING).exists():
            _checksums_finished(chunk.inventory_id, location, now)
    return state


def _json_text(digests: dict | None) -> Any:
    """Digests written as the canonical text the ingest stages (``catalog.digests.dumps``): on SQLite the
    merge compares the stored text, which must not differ from an unchanged object's staged text."""
    text = digests_dumps(digests)
    if text is None:
        return RawSQL("NULL", ())
    cast = "%s::jsonb" if connection.vendor == "postgresql" else "%s"
    return RawSQL(cast, (text,))  # noqa: S611 - the text is a parameter


def _batches(values: list, size: int) -> Iterator[list]:
    for i in range(0, len(values), size):
        yield values[i : i + size]


def _checksums_finished(inventory_id: int, location: StorageLocation, now: datetime) -> None:
    """The last chunk of a scan is in: record when, say what failed, and roll usage up again if verdicts moved."""
    sums = HeadChunk.objects.filter(inventory_id=inventory_id).aggregate(
        copies=Sum("copies"), failed=Sum("failed"), written=Sum("written"), attempts=Sum("attempts")
    )
    if sums["copies"]:
        # Verification may have found a copy corrupt: today's usage states follow it.
        usage_refresh(location=location, day=now.astimezone(UTC).date(), now=now)
    inventory = Inventory.objects.only("pk", "error", "checksums_total", "finished_at").get(pk=inventory_id)
    error = inventory.error
    failed = sums["failed"] or 0
    if failed:
        reason = (
            HeadChunk.objects.filter(inventory_id=inventory_id, failed__gt=0)
            .exclude(error="")
            .order_by("seq")
            .values_list("error", flat=True)
            .first()
        )
        note = (
            f"warning: stored checksums could not be fetched for {failed:,} of {inventory.checksums_total:,} "
            f"object(s), which stay unverified until they change: {reason or 'no reason given'}"
        )
        error = f"{error}\n{note}" if error else note
    Inventory.objects.filter(pk=inventory_id).update(checksums_finished_at=now, error=error[:4000])
    log.info(
        "scan %s stored: %s HEAD requests after the snapshot, %s files updated, %s copies re-verified, in %.2f s "
        "(%s chunk attempts, %s objects failed)",
        inventory_id,
        inventory.checksums_total,
        sums["written"] or 0,
        sums["copies"] or 0,
        (now - inventory.finished_at).total_seconds() if inventory.finished_at else 0.0,
        sums["attempts"] or 0,
        failed,
    )
