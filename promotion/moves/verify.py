"""After the copy: verify every new object against what was recorded of its source, then free the source.

The source goes only through ``actions.services.schedule_deletion`` (origin ``move:<job id>``), so a deletion's
rules (holds, pins, approval, grace period, the re-check when it executes) decide whether and when.
"""

from __future__ import annotations

import hashlib
import logging
import re
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from actions.models import DeletionJob
from actions.protection import active_holds
from actions.services import schedule_deletion
from audit.actor import Actor
from audit.choices import EventSource
from audit.services import audit
from catalog.choices import CopyState, Verification
from catalog.models import CheckpointCopy
from ckptfleet.errors import DomainError
from fleet import s3
from fleet.models import Bucket
from ingest.scan import scan_start
from promotion.choices import Direction, ItemState, JobState
from promotion.models import PromotionItem, PromotionJob
from promotion.moves.plan import FREED_IN_PLACE
from promotion.services import ITEM_BATCH, WORKER, job_transition

log = logging.getLogger(__name__)

READ_BACK_CHUNK = 8 * 1024 * 1024  # bounded memory when a new object is read back to be hashed
VERIFY_THREADS = 16  # new objects HEADed at once (the store answers them side by side)
MD5_ETAG = re.compile(r"^[0-9a-f]{32}$")  # a single-part ETag is the content's MD5; a multipart one ends in -N


class Mismatch(Exception):
    """A new object that does not match what was recorded of its source."""


def copied(job_id: int) -> str:
    """Every item of a move is done: verify each new object, then free the source. Returns the job's state.

    Safe to call twice and from any worker: the job moves to ``verifying`` by compare-and-swap, items already
    verified are not checked again, and the outcome is written once. Call it after the transaction that marked
    the last item done has committed (it talks to the store).
    """
    job = PromotionJob.objects.select_related("source_copy__location", "target_location").get(pk=job_id)
    if job.direction == Direction.PROMOTE:
        raise DomainError(f"promotion #{job_id} is not a move", code="not_a_move")
    if job.state in (JobState.COPYING, JobState.AWAITING_AGENT):
        pending = job.items.exclude(state=ItemState.DONE)
        if pending.exists():
            first = pending.order_by("pk").first()
            assert first is not None
            error = (
                f"{pending.count()} file(s) were not copied; first: {first.path}: {first.detail or first.state}; "
                "the source is kept"
            )
            job_transition(job.pk, frm=(job.state,), to=JobState.FAILED, action="move.fail", error=error)
            return JobState.FAILED
        job_transition(job.pk, frm=(job.state,), to=JobState.VERIFYING)
    job.refresh_from_db()
    if job.state != JobState.VERIFYING:
        return job.state
    if job.verified_at is None:
        try:
            if not _verify_all(job):
                return JobState.FAILED
        except s3.S3Error as exc:
            # The store did not answer: tried again (the task's retries, then beat) until the bound, then failed.
            if _not_verified(job.pk, f"the store did not answer while the new objects were checked: {exc}", store=True):
                return JobState.FAILED
            raise
    return free_source(job.pk)


def verify_deadline(job: PromotionJob) -> datetime:
    """When a verifying move that has not verified ends failed (``settings.MOVE_VERIFY_HOURS``)."""
    since = job.verifying_since or job.verified_at or job.started_at or job.requested_at
    return since + timedelta(hours=settings.MOVE_VERIFY_HOURS)


def _not_verified(job_id: int, why: str, *, store: bool = False) -> bool:
    """A move's verification did not settle, for ``why``: recorded on the job; past the bound (hours since it began
    verifying, or tries the ``store`` did not answer: waiting for the catalog is not a try) the move ends failed
    with that reason and its source is kept. Returns whether it failed."""
    with transaction.atomic():
        job = PromotionJob.objects.select_for_update(of=("self",)).get(pk=job_id)
        if job.state != JobState.VERIFYING:
            return job.state == JobState.FAILED
        fields = ["verify_detail"]
        if store:
            job.verify_attempts += 1
            fields.append("verify_attempts")
        job.verify_detail = why[:2000]
        job.save(update_fields=fields)
        hours, tries = settings.MOVE_VERIFY_HOURS, settings.MOVE_VERIFY_ATTEMPTS
        if timezone.now() >= verify_deadline(job):
            bound = f"within {hours:,} h of verifying"
        elif job.verify_attempts >= tries:
            bound = f"after {tries:,} tries"
        else:
            return False
    error = f"the new copy did not verify {bound}: {why}; the source is kept"
    job_transition(job_id, frm=(JobState.VERIFYING,), to=JobState.FAILED, action="move.fail", error=error)
    return True


def _verification_failed(job_id: int, why: str) -> str:
    """The new copy was found wrong: the move ends failed at once, with the reason, and its source is kept."""
    PromotionJob.objects.filter(pk=job_id, state=JobState.VERIFYING).update(verify_detail=why[:2000])
    error = f"{why}; the source is kept"
    job_transition(job_id, frm=(JobState.VERIFYING,), to=JobState.FAILED, action="move.fail", error=error)
    return PromotionJob.objects.get(pk=job_id).state


def _verify_all(job: PromotionJob) -> bool:
    """Verify the job's unverified items, ``VERIFY_THREADS`` objects at once, a batch of rows at a time.

    A mismatch fails the job (the first one by item order is named) after the items verified before it in
    its batch are recorded; trouble with the store (S3Error) leaves the job verifying for beat to retry.
    """
    bucket = Bucket.objects.select_related("location").get(location_id=job.target_location_id)
    client = s3.client_for(bucket)
    source = Bucket.objects.filter(location_id=job.source_copy.location_id).first()
    pending = job.items.filter(verified_at__isnull=True).order_by("pk")

    def one(item: PromotionItem) -> tuple[PromotionItem, str, Exception | None]:
        try:
            return item, verify_object(client, bucket.bucket_name, item, job, source), None
        except (Mismatch, s3.S3Error) as exc:
            return item, "", exc

    with ThreadPoolExecutor(max_workers=VERIFY_THREADS) as pool:
        after = 0
        while True:
            batch = list(pending.filter(pk__gt=after)[:ITEM_BATCH])
            if not batch:
                break
            after = batch[-1].pk
            done, trouble = [], None
            now = timezone.now()
            for item, how, exc in pool.map(one, batch):
                if exc is not None:
                    trouble = trouble or (item, exc)
                    continue
                item.verified_at, item.detail = now, how[:2000]
                done.append(item)
            if done:
                PromotionItem.objects.bulk_update(done, ["verified_at", "detail"], batch_size=500)
            PromotionJob.objects.filter(pk=job.pk).update(heartbeat_at=timezone.now())
            if trouble is not None:
                item, exc = trouble
                if not isinstance(exc, Mismatch):
                    raise exc  # the store is unwell: the job stays verifying, beat tries again
                error = f"{item.path}: {exc}; the source is kept"
                PromotionItem.objects.filter(pk=item.pk).update(state=ItemState.FAILED, detail=str(exc)[:2000])
                job_transition(job.pk, frm=(JobState.VERIFYING,), to=JobState.FAILED, action="move.fail", error=error)
                return False
    with transaction.atomic():
        locked = PromotionJob.objects.select_for_update(of=("self",)).select_related("checkpoint").get(pk=job.pk)
        if locked.state != JobState.VERIFYING or locked.verified_at is not None:
            return locked.state == JobState.VERIFYING
        locked.verified_at = timezone.now()
        locked.save(update_fields=["verified_at"])
        audit(
            WORKER,
            "move.verified",
            target_type="checkpoint",
            target_id=locked.checkpoint_id,
            target_label=str(locked.checkpoint),
            before={"state": locked.state},
            after={"move": locked.pk, "objects": locked.items_total, "bytes": locked.bytes_total},
        )
        transaction.on_commit(lambda: _rescan(job.pk))
    return True


def verify_object(client, bucket_name: str, item: PromotionItem, job: PromotionJob, source: Bucket | None) -> str:
    """Check one new object against what was recorded of its source; returns how, raises Mismatch.

    Size always; then the catalog's sha256 against the store's full-object SHA256 (or, when the store keeps
    none, against the object read back and hashed, in bounded memory); with no sha256 on record, a single-part
    ETag (the content's MD5) against the source's.
    """
    state = s3.written(client, bucket_name, item.target_key)  # one HEAD: size, ETag, class, the store's sha256
    if state is None:
        raise Mismatch(f"the new object s3://{bucket_name}/{item.target_key} is missing")
    if state.size != item.size:
        raise Mismatch(f"size {state.size} bytes at the target, {item.size} recorded")
    if job.target_storage_class and state.storage_class.upper() != job.target_storage_class:
        raise Mismatch(f"storage class {state.storage_class} at the target, {job.target_storage_class} asked")
    if item.sha256:
        stored = state.sha256
        if stored:
            if stored != item.sha256:
                raise Mismatch(f"sha256 {stored} at the target, {item.sha256} recorded")
            return "verified: sha256 (store's checksum)"
        measured = _read_back(client, bucket_name, item.target_key, state, hashlib.sha256)
        if measured != item.sha256:
            raise Mismatch(f"sha256 {measured} read back from the target, {item.sha256} recorded")
        return "verified: sha256 (read back)"
    if item.etag and MD5_ETAG.match(item.etag):
        if state.etag == item.etag:
            return "verified: ETag (MD5) equals the source's"
        if "-" in state.etag:  # a multipart copy: its ETag is no MD5, so read the content back
            measured = _read_back(client, bucket_name, item.target_key, state, hashlib.md5)
            if measured == item.etag:
                return "verified: MD5 (read back) equals the source's ETag"
            raise Mismatch(f"MD5 {measured} read back from the target, source ETag {item.etag}")
        raise Mismatch(f"ETag {state.etag} at the target, {item.etag} at the source")
    if source is not None and item.etag:
        source_client = s3.client_for(source)
        theirs = _read_back(source_client, source.bucket_name, item.source_key, None, hashlib.sha256, item.version_id)
        ours = _read_back(client, bucket_name, item.target_key, state, hashlib.sha256)
        if theirs != ours:
            raise Mismatch(f"sha256 {ours} at the target, {theirs} at the source (both read back)")
        return "verified: sha256 of both read back"
    raise Mismatch("no checksum on record to verify the new object against (no sha256, no MD5 ETag)")


def _read_back(client, bucket_name: str, key: str, state, algorithm, version_id: str = "") -> str:
    """Hash an object by reading it in ranged chunks (bounded memory); an archived object cannot be read."""
    if state is not None and state.storage_class.upper() in s3.RESTORE_CLASSES:
        raise Mismatch(
            f"the new object is in {state.storage_class} and carries no checksum of its own, so it cannot be read "
            "back to be verified"
        )
    digest = algorithm()
    kwargs: dict[str, Any] = {"Bucket": bucket_name, "Key": key}
    if version_id:
        kwargs["VersionId"] = version_id
    try:
        body = client.get_object(**kwargs)["Body"]
        for chunk in iter(lambda: body.read(READ_BACK_CHUNK), b""):
            digest.update(chunk)
    except Exception as exc:  # a botocore error, named in the reason; the job stops and keeps its source
        raise Mismatch(f"reading s3://{bucket_name}/{key} back failed: {exc}") from None
    return digest.hexdigest()


def _rescan(job_id: int) -> None:
    """Let the catalog see the new copy (a running scan will see it anyway)."""
    job = PromotionJob.objects.select_related("target_location").get(pk=job_id)
    try:
        scan_start(location=job.target_location, actor=WORKER, audit=False)
    except DomainError as exc:
        log.info("no rescan after move %s: %s", job_id, exc.message)
    # Where the scan ran at once (tasks in-process) the source can be freed now; elsewhere beat tries again
    # (``due_verifying``) until a scan shows the new copy.
    transaction.on_commit(lambda: free_source(job_id))


def requester(job: PromotionJob) -> Actor:
    """Who frees the source: the person who asked (their role is checked again), or the policy that did."""
    if job.requested_by is not None:
        return Actor.person(job.requested_by, EventSource.TASK)
    return Actor.system(job.requested_label)


def free_source(job_id: int) -> str:
    """Free a verified move's source: nothing for a class change in place; otherwise schedule its deletion once
    the catalog shows the new copy complete. A refusal (a hold placed after the request, a pin) ends the job
    completed with the source kept and the reason."""
    job = PromotionJob.objects.select_related("checkpoint", "source_copy__location", "target_location").get(pk=job_id)
    if job.state != JobState.VERIFYING or job.verified_at is None:
        return job.state
    if job.in_place:
        return _complete(job, FREED_IN_PLACE)
    present = CheckpointCopy.objects.filter(
        checkpoint=job.checkpoint, location=job.target_location, gone_at__isnull=True
    ).order_by("pk")
    # The copy at the path the move wrote, then a complete one, should another sit beside it.
    new_copy = min(present, key=lambda c: (c.path != job.source_copy.path, c.state != CopyState.COMPLETE), default=None)
    if new_copy is not None and new_copy.verification == Verification.MISMATCH:
        return _verification_failed(job.pk, f"the catalog found the new copy wrong: {_reasons(new_copy)}")
    holds = list(active_holds(job.checkpoint).only("case_ref"))
    if holds:  # a hold placed after the request: the copy stands, the source stays (schedule_deletion agrees)
        cases = ", ".join(sorted({h.case_ref for h in holds}))
        return _complete(job, f"source kept: held (case {cases})")
    if new_copy is None or new_copy.state != CopyState.COMPLETE:
        shown = "no scan has shown the new copy in the catalog"
        if new_copy is not None:
            shown = f"the catalog shows the new copy {new_copy.state}: {_reasons(new_copy, new_copy.reasons)}"
        if _not_verified(job.pk, shown):
            return JobState.FAILED
        return JobState.VERIFYING  # beat asks again after the next scan
    try:
        deletion = schedule_deletion(
            checkpoint=job.checkpoint,
            copy=job.source_copy,
            reason=f"moved to {job.target_location.name} ({job.target_storage_class}) by move #{job.pk}: {job.reason}"[
                :2000
            ],
            actor=requester(job),
            origin=f"move:{job.pk}",
        )
    except DomainError as exc:
        if exc.code != "last_verified_copy":
            return _complete(job, f"source kept: {exc.message}")
        # The catalog has not verified the new copy yet (unverified, disputed): wait for it, within the bound.
        why = f"the catalog has the new copy {new_copy.verification}: {_reasons(new_copy)}"
        if _not_verified(job.pk, why):
            return JobState.FAILED
        return JobState.VERIFYING
    return _complete(
        job, f"deletion {deletion.pk} of the source copy scheduled ({deletion.get_state_display()})", deletion
    )


def _reasons(copy: CheckpointCopy, reasons: list[str] | None = None, limit: int = 2) -> str:
    items = list(reasons if reasons is not None else copy.verification_reasons or [])
    if not items:
        return "no reason recorded"
    text = "; ".join(items[:limit])
    return text + (f" (and {len(items) - limit:,} more)" if len(items) > limit else "")


def _complete(job: PromotionJob, outcome: str, deletion: DeletionJob | None = None) -> str:
    PromotionJob.objects.filter(pk=job.pk, state=JobState.VERIFYING).update(
        source_outcome=outcome[:2000], source_deletion=deletion
    )
    after = {"source": outcome, "deletion": deletion.pk if deletion else None}
    if job_transition(job.pk, frm=(JobState.VERIFYING,), to=JobState.COMPLETED, action="move.complete", after=after):
        return JobState.COMPLETED
    return PromotionJob.objects.get(pk=job.pk).state


def due_verifying() -> list[int]:
    """Moves beat should move on: verified and waiting for the catalog, verifying with no fresh heartbeat, or past
    the bound of their verification (to end them failed)."""
    now = timezone.now()
    lost = now - timedelta(seconds=settings.PROMOTION_LEASE_SECONDS)
    overdue = now - timedelta(hours=settings.MOVE_VERIFY_HOURS)
    return list(
        PromotionJob.objects.filter(state=JobState.VERIFYING)
        .filter(
            Q(verified_at__isnull=False)
            | Q(heartbeat_at__lt=lost)
            | Q(heartbeat_at__isnull=True)
            | Q(verifying_since__lt=overdue)
        )
        .values_list("pk", flat=True)[:100]
    )
