"""The work of a promotion against the store: restore requests, restore polling, server-side copies.

Every step reads where the job stands from the database and writes each item's outcome as soon as
the store confirms it, so a worker killed at any point is replaced by one that carries on: a restore
asked twice answers "already under way", an object copied but not yet recorded is found at the
target with the source's ETag and kept. Nothing here deletes or overwrites: an object that exists at
the target with other content is left alone and its item marked blocked.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor, wait
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Count, F, Q, Sum
from django.utils import timezone

from actions.protection import is_held
from audit.actor import Actor
from catalog.models import ShardFile
from ckptfleet.errors import DomainError
from fleet import s3
from fleet.models import Bucket
from ingest.scan import scan_start
from promotion import moves
from promotion.choices import Direction, ItemState, JobState, Method
from promotion.models import PromotionItem, PromotionJob
from promotion.services import WORKER, job_transition

log = logging.getLogger(__name__)

BATCH = 100  # items read per query (and their targets listed at once)
COPY_ROUND = 4  # copies handed to the pool per round, in widths; their outcomes are written together
LIST_AT_LEAST = 8  # a batch's targets from this many on: one listing shows which keys are free
LIST_OTHERS = 2000  # other objects a listing may step over before a HEAD each is cheaper
POLL_BATCH = 1000  # restores checked per job and poll
SOURCE_ETAG_META = "ckptfleet-source-etag"
HEARTBEAT_SECONDS = 30  # while copies run; far below PROMOTION_LEASE_SECONDS (at least 60)


def poll_seconds() -> int:
    return settings.PROMOTION_POLL_SECONDS


def lease_seconds() -> int:
    return settings.PROMOTION_LEASE_SECONDS


def multipart_threshold() -> int:
    return settings.PROMOTION_MULTIPART_THRESHOLD


def multipart_part_size() -> int:
    return settings.PROMOTION_MULTIPART_PART_SIZE


def _job(job_id: int) -> PromotionJob:
    return PromotionJob.objects.select_related(
        "checkpoint", "source_copy__location", "target_location", "target_location__host"
    ).get(pk=job_id)


def _bucket(location_id: int) -> Bucket:
    return Bucket.objects.select_related("location").get(location_id=location_id)


def _fail(job: PromotionJob, error: str) -> None:
    job_transition(
        job.pk,
        frm=(JobState.REQUESTED, JobState.RESTORING, JobState.COPYING),
        to=JobState.FAILED,
        action="promotion.fail",
        error=error,
    )


# --- step 1: restore requests -----------------------------------------------------------------------


def start(job_id: int) -> str:
    """Begin a requested job: ask for the restores it needs, or go straight to copying."""
    job = _job(job_id)
    if job.state == JobState.REQUESTED:
        if job.method == Method.RESTORE:
            if job.in_place and not job.target_storage_class:
                _readable_already(job)
            try:
                asked = _request_restores(job)
            except s3.S3Error as exc:
                if exc.transient:
                    raise
                _fail(job, f"restore requests failed: {exc.message}")
                return JobState.FAILED
            PromotionJob.objects.filter(pk=job.pk).update(next_poll_at=timezone.now())
            job_transition(
                job.pk,
                frm=(JobState.REQUESTED,),
                to=JobState.RESTORING,
                action="promotion.restore",
                after={"objects": asked, "days": job.restore_days, "retrieval_tier": job.restore_tier},
            )
            return poll(job.pk)
        job_transition(job.pk, frm=(JobState.REQUESTED,), to=JobState.COPYING)
        return copy(job.pk, claim=f"start-{job.pk}")
    if job.state == JobState.RESTORING:
        return poll(job.pk)
    if job.state == JobState.COPYING:
        return copy(job.pk, claim=f"start-{job.pk}")
    return job.state


def _readable_already(job: PromotionJob) -> None:
    """In a restore in place, the files outside archive classes are done before anything is asked."""
    with transaction.atomic():
        ready = job.items.filter(state=ItemState.READY)
        found = ready.aggregate(n=Count("id"), size=Sum("size"))
        if found["n"]:
            ready.update(state=ItemState.DONE, detail="readable already (not archived)", done_at=timezone.now())
            PromotionJob.objects.filter(pk=job.pk).update(
                items_done=F("items_done") + found["n"], bytes_done=F("bytes_done") + (found["size"] or 0)
            )


def _request_restores(job: PromotionJob) -> int:
    bucket = _bucket(job.source_copy.location_id)
    client = s3.client_for(bucket)
    asked = 0
    while True:
        items = list(job.items.filter(state=ItemState.PENDING).order_by("pk")[:BATCH])
        if not items:
            return asked
        for item in items:
            if not PromotionJob.objects.filter(pk=job.pk, state=JobState.REQUESTED).exists():
                return asked  # cancelled meanwhile
            answer = s3.restore_request(
                client,
                bucket.bucket_name,
                item.source_key,
                days=job.restore_days,
                tier=job.restore_tier,
                version_id=item.version_id,
            )
            now = timezone.now()
            state = ItemState.READY if answer == "available" else ItemState.RESTORING
            PromotionItem.objects.filter(pk=item.pk, state=ItemState.PENDING).update(
                state=state, restore_requested_at=now, detail=f"restore {answer}"
            )
            asked += 1


# --- step 2: restore polling (beat) -----------------------------------------------------------------


def poll(job_id: int) -> str:
    """Check the restores of a restoring job; once every object is readable, copy or complete."""
    job = _job(job_id)
    if job.state != JobState.RESTORING:
        return job.state
    # Move the next poll on first, so beat does not send a second poll while this one is under way.
    PromotionJob.objects.filter(pk=job.pk, state=JobState.RESTORING).update(
        next_poll_at=timezone.now() + timedelta(seconds=poll_seconds())
    )
    bucket = _bucket(job.source_copy.location_id)
    client = s3.client_for(bucket)
    items = list(job.items.filter(state__in=(ItemState.PENDING, ItemState.RESTORING)).order_by("pk")[:POLL_BATCH])
    restore_only = job.in_place and not job.target_storage_class
    for item in items:
        if item.state == ItemState.PENDING:
            answer = s3.restore_request(
                client,
                bucket.bucket_name,
                item.source_key,
                days=job.restore_days,
                tier=job.restore_tier,
                version_id=item.version_id,
            )
            if answer != "available":
                PromotionItem.objects.filter(pk=item.pk).update(
                    state=ItemState.RESTORING, restore_requested_at=timezone.now()
                )
                continue
        else:
            state = s3.object_state(client, bucket.bucket_name, item.source_key, version_id=item.version_id)
            if state is None:
                _item_done(job, item, ItemState.FAILED, "the object is gone from the source", count=False)
                continue
            if state.restore != "available":
                continue
        if restore_only:
            _item_done(job, item, ItemState.DONE, "restored", count=True)
        else:
            PromotionItem.objects.filter(pk=item.pk).update(state=ItemState.READY, detail="restored")
    waiting = job.items.filter(state__in=(ItemState.PENDING, ItemState.RESTORING)).count()
    if waiting:
        PromotionJob.objects.filter(pk=job.pk, state=JobState.RESTORING).update(
            next_poll_at=timezone.now() + timedelta(seconds=poll_seconds())
        )
        return JobState.RESTORING
    if restore_only:
        return finish(job.pk, frm=JobState.RESTORING)
    if job_transition(job.pk, frm=(JobState.RESTORING,), to=JobState.COPYING):
        return copy(job.pk, claim=f"poll-{job.pk}")
    return _job(job.pk).state


# --- step 3: copies ---------------------------------------------------------------------------------


def _claim(job_id: int, claim: str) -> bool:
    """Take the job for this delivery unless another one holds a fresh lease on it."""
    now = timezone.now()
    stale = now - timedelta(seconds=lease_seconds())
    return (
        PromotionJob.objects.filter(pk=job_id, state=JobState.COPYING)
        .filter(Q(claimed_by="") | Q(claimed_by=claim) | Q(heartbeat_at__lt=stale) | Q(heartbeat_at__isnull=True))
        .update(claimed_by=claim, heartbeat_at=now)
        == 1
    )


def _item_done(job: PromotionJob, item: PromotionItem, state: str, detail: str, *, count: bool) -> None:
    """Record one item's outcome and the job's progress together, once (a second delivery changes nothing)."""
    with transaction.atomic():
        changed = (
            PromotionItem.objects.filter(pk=item.pk)
            .exclude(state__in=(ItemState.DONE, ItemState.BLOCKED, ItemState.FAILED))
            .update(state=state, detail=detail[:2000], done_at=timezone.now())
        )
        if changed:
            updates = {"heartbeat_at": timezone.now()}
            if state == ItemState.DONE:
                updates["items_done"] = F("items_done") + 1
                if count:
                    updates["bytes_done"] = F("bytes_done") + item.size
            elif state == ItemState.BLOCKED:
                updates["items_blocked"] = F("items_blocked") + 1
            PromotionJob.objects.filter(pk=job.pk).update(**updates)


def _held_at_target(job: PromotionJob, item: PromotionItem) -> str:
    """The checkpoint a file at the item's target path belongs to, if it is on hold ("" otherwise)."""
    row = (
        ShardFile.objects.filter(location_id=job.target_location_id, path=item.path, copy__isnull=False)
        .select_related("copy__checkpoint__run__team")
        .first()
    )
    if row is not None and is_held(row.copy.checkpoint):
        return str(row.copy.checkpoint)
    return ""


def copy(job_id: int, *, claim: str) -> str:
    """Copy every readable item of a copying job, then finish it (completed, or failed with the reasons).

    Up to ``PROMOTION_COPY_CONCURRENCY`` objects are copied at once; the store's work runs in threads and
    every outcome is written here, by the thread that holds the claim, as soon as its copy returns.
    """
    if not _claim(job_id, claim):
        return "skipped"
    job = _job(job_id)
    source = _bucket(job.source_copy.location_id)
    target = _bucket(job.target_location_id)
    client = s3.client_for(target)
    width = max(1, settings.PROMOTION_COPY_CONCURRENCY)
    with ThreadPoolExecutor(max_workers=width, thread_name_prefix=f"promotion-{job_id}") as pool:
        while True:
            items = list(job.items.filter(state=ItemState.READY).order_by("pk")[: max(BATCH, width)])
            if not items:
                break
            # The promises are re-checked before every batch: a cancellation or a hold placed mid-job wins.
            with transaction.atomic():
                current = PromotionJob.objects.select_for_update(of=("self",)).get(pk=job.pk)
                if current.state != JobState.COPYING or current.claimed_by != claim:
                    return current.state if current.state != JobState.COPYING else "skipped"
                blocked = job.in_place and is_held(job.checkpoint)
                PromotionJob.objects.filter(pk=job.pk).update(heartbeat_at=timezone.now())
            if blocked:
                for item in items:
                    _item_done(
                        job, item, ItemState.BLOCKED, "the checkpoint was put on hold: not rewritten", count=False
                    )
                continue
            absent = set() if job.in_place else _absent(client, target, items)
            for start in range(0, len(items), COPY_ROUND * width):
                chunk = items[start : start + COPY_ROUND * width]
                futures = [
                    pool.submit(_copy_one, job, item, client, source, target, item.target_key in absent)
                    for item in chunk
                ]
                # A long multipart copy must not look like a lost worker: heartbeat while the store works.
                while wait(futures, timeout=HEARTBEAT_SECONDS).not_done:
                    PromotionJob.objects.filter(pk=job.pk, claimed_by=claim).update(heartbeat_at=timezone.now())
                outcomes, trouble = [], None
                for item, future in zip(chunk, futures, strict=True):
                    try:
                        state, detail = future.result()
                    except BaseException as exc:  # re-raised below, once the others are recorded
                        trouble = trouble or exc
                        continue
                    if state == ItemState.BLOCKED:
                        held = _held_at_target(job, item)
                        detail += f"; it belongs to {held}, which is on hold" if held else ""
                        detail += ": never overwritten"
                    outcomes.append((item, state, detail))
                _items_done(job, outcomes)
                if trouble is not None:
                    raise trouble  # a transient S3Error goes up: the task retries; the rest stay readable
                if not PromotionJob.objects.filter(pk=job.pk, state=JobState.COPYING, claimed_by=claim).exists():
                    break
    return finish(job.pk, frm=JobState.COPYING)


def _absent(client, target: Bucket, items: list[PromotionItem]) -> set[str]:
    """The items' target keys one listing shows free (a batch of a move into a folder); empty when not asked.

    Only for copies to another key: an in-place class change always HEADs its object. A key the listing
    shows taken is HEADed as before, to tell an identical object from another one.
    """
    keys = [item.target_key for item in items]
    if len(keys) < LIST_AT_LEAST:
        return set()
    try:
        found = s3.written_many(client, target.bucket_name, keys, at_most=LIST_OTHERS)
    except s3.S3Error:
        return set()  # each target is HEADed instead
    return set() if found is None else set(keys) - set(found)


def _items_done(job: PromotionJob, outcomes: list[tuple[PromotionItem, str, str]]) -> None:
    """Record a round's outcomes and the job's progress together, in one transaction; each item once."""
    if not outcomes:
        return
    with transaction.atomic():
        open_pks = set(
            PromotionItem.objects.select_for_update(of=("self",))
            .filter(pk__in=[item.pk for item, _s, _d in outcomes])
            .exclude(state__in=(ItemState.DONE, ItemState.BLOCKED, ItemState.FAILED))
            .values_list("pk", flat=True)
        )
        now = timezone.now()
        changed, done, done_bytes, blocked = [], 0, 0, 0
        for item, state, detail in outcomes:
            if item.pk not in open_pks:
                continue  # a second delivery: recorded already
            item.state, item.detail, item.done_at = state, detail[:2000], now
            changed.append(item)
            if state == ItemState.DONE:
                done += 1
                done_bytes += item.size
            elif state == ItemState.BLOCKED:
                blocked += 1
        if not changed:
            return
        PromotionItem.objects.bulk_update(changed, ["state", "detail", "done_at"], batch_size=500)
        PromotionJob.objects.filter(pk=job.pk).update(
            heartbeat_at=now,
            items_done=F("items_done") + done,
            bytes_done=F("bytes_done") + done_bytes,
            items_blocked=F("items_blocked") + blocked,
        )


def _copy_one(
    job: PromotionJob, item: PromotionItem, client, source: Bucket, target: Bucket, listed_free: bool = False
) -> tuple[str, str]:
    """Copy one object (or find it there already); runs in a pool thread, so it touches only the store.

    ``listed_free``: the batch's listing showed the target key free, so it is not HEADed again first."""
    try:
        there = (
            None if listed_free and not job.in_place else s3.object_state(client, target.bucket_name, item.target_key)
        )
        if there is not None:
            if job.in_place:
                if there.storage_class == job.target_storage_class:
                    return ItemState.DONE, f"already {there.storage_class}"
                if item.etag and there.etag != item.etag:
                    return ItemState.FAILED, "the object changed since the promotion was asked"
            else:
                same = (
                    there.size == item.size
                    and item.etag
                    and item.etag
                    in (
                        there.etag,
                        there.metadata.get(SOURCE_ETAG_META, ""),
                    )
                )
                if same:
                    return ItemState.DONE, "already at the target, identical"
                return ItemState.BLOCKED, "another object exists at the target key"
        multipart = item.size > multipart_threshold()
        metadata = None
        if multipart:
            found = s3.object_state(client, source.bucket_name, item.source_key, version_id=item.version_id)
            metadata = {**(found.metadata if found else {}), SOURCE_ETAG_META: item.etag}
        s3.copy_object(
            client,
            source_bucket=source.bucket_name,
            source_key=item.source_key,
            target_bucket=target.bucket_name,
            target_key=item.target_key,
            size=item.size,
            storage_class=job.target_storage_class,
            source_etag=item.etag,
            source_version_id=item.version_id,
            metadata=metadata,
            threshold=multipart_threshold(),
            part_size=multipart_part_size(),
            # A move verifies every new object before its source is freed: the store's sha256 makes that a HEAD.
            checksum_algorithm="SHA256" if job.direction != Direction.PROMOTE else "",
        )
    except s3.S3Error as exc:
        if exc.transient:
            raise  # the task retries; the item stays readable and is tried again
        return ItemState.FAILED, exc.message
    return ItemState.DONE, "multipart copy" if multipart else "copied"


def finish(job_id: int, *, frm: str, actor: Actor = WORKER) -> str:
    """End a job whose items are all settled: completed, or failed naming the first file that was not done.

    ``actor`` reports the outcome (the worker, or the host whose agent pulled). A bucket target is
    scanned afterwards; a host's agent reports its root itself after pulling.
    """
    job = PromotionJob.objects.get(pk=job_id)
    failed = job.items.filter(state=ItemState.FAILED).count()
    blocked = job.items.filter(state=ItemState.BLOCKED).count()
    done = job.items.filter(state=ItemState.DONE).aggregate(n=Sum("size"))["n"] or 0
    after = {"bytes_done": done, "items_done": job.items_done, "items_blocked": blocked, "items_failed": failed}
    noun = "file(s)" if job.method in (Method.AGENT_PULL, Method.AGENT_PUSH) else "object(s)"
    if job.direction != Direction.PROMOTE:
        if failed or blocked:
            first = job.items.filter(state__in=(ItemState.FAILED, ItemState.BLOCKED)).order_by("pk").first()
            error = (
                f"{failed} {noun} failed and {blocked} were blocked; first: {first.path}: {first.detail}; "
                "the source is kept"
            )
            job_transition(
                job_id, frm=(frm,), to=JobState.FAILED, action="move.fail", after=after, error=error, actor=actor
            )
            return JobState.FAILED
        return moves.copied(job_id)  # verify every new object, then free the source
    if failed or blocked:
        first = job.items.filter(state__in=(ItemState.FAILED, ItemState.BLOCKED)).order_by("pk").first()
        error = f"{failed} {noun} failed and {blocked} were blocked; first: {first.path}: {first.detail}"
        job_transition(
            job_id, frm=(frm,), to=JobState.FAILED, action="promotion.fail", after=after, error=error, actor=actor
        )
        return JobState.FAILED
    if job_transition(job_id, frm=(frm,), to=JobState.COMPLETED, action="promotion.complete", after=after, actor=actor):
        if job.method != Method.AGENT_PULL:
            transaction.on_commit(lambda: _rescan(job_id))
        return JobState.COMPLETED
    return PromotionJob.objects.get(pk=job_id).state


def _rescan(job_id: int) -> None:
    """Let the catalog see the new copy: scan the target bucket now (a running scan will see it anyway)."""

    job = PromotionJob.objects.select_related("target_location").get(pk=job_id)
    try:
        scan_start(location=job.target_location, actor=WORKER, audit=False)
    except DomainError as exc:
        log.info("no rescan after promotion %s: %s", job_id, exc.message)


# --- beat -------------------------------------------------------------------------------------------


def due_jobs(now=None) -> dict[str, list[int]]:
    """Jobs beat should move on: restores due for a poll, and requested or copying jobs nobody works on."""
    now = now or timezone.now()
    lost = now - timedelta(seconds=lease_seconds())
    return {
        "poll": list(
            PromotionJob.objects.filter(state=JobState.RESTORING, next_poll_at__lte=now).values_list("pk", flat=True)[
                :500
            ]
        ),
        "start": list(
            PromotionJob.objects.filter(state=JobState.REQUESTED, requested_at__lt=lost).values_list("pk", flat=True)[
                :100
            ]
        ),
        "copy": list(
            PromotionJob.objects.filter(state=JobState.COPYING)
            .filter(Q(heartbeat_at__lt=lost) | Q(heartbeat_at__isnull=True))
            .values_list("pk", flat=True)[:100]
        ),
    }
