"""Carrying out scheduled deletions: the frozen items of a job, in batches, against the real storage.

A job whose grace period has ended (and which a second person approved, if it needed that) is
started by beat (``start_due``) and worked through by one task (``execute``). Everything the job
knows is in the database: its state and one row per frozen object or file. A worker that dies
anywhere leaves the rows as they were at its last commit, and the next delivery carries on from
there; the beat sweep sends one when a running job has made no progress for ``LEASE``. Progress is
the job's ``heartbeat_at``: set when it starts, and in the transaction of every batch a worker sends
to the store and of every report of a host's agent, so the sweep reads one column, and the pages
say how long ago a job last moved ("last progress 12 s ago").

Before every batch, under row locks on the checkpoint and the job, the promises are checked
again (``blocker``): a hold or pin placed since scheduling stops the job as blocked, a cancelled
job stops. The lock is held while the store deletes that batch, so a hold placed meanwhile waits
for the batch and then wins. An item is marked deleted only when the store confirms it; a store
that refuses (Object Lock legal hold or retention: AccessDenied) leaves the item blocked, never
retried, and the job says so in its outcome and in the audit trail.

Objects in buckets are deleted here, by exact version: in a versioned bucket an item frozen without
its version id (the scan's HEAD pass had not reached it) has its version looked up by the content the
plan froze (one listing per directory of the batch's keys), never deleted version-less (that only adds a
delete marker and keeps the data); in a bucket without versioning each object is HEADed right before the
delete, skipped when its size or ETag changed, and deleted only under the ETag just checked, in the way the
bucket's store was probed to honour (``delete_condition``): a rewrite between the HEAD and the delete then
stays. A hard delete where the store honours no condition is refused (``NO_CONDITION_REFUSAL``). Files on hosts
are deleted by the host's agent (``agent_pending`` / ``agent_report``), which checks size and mtime
first. When a job ends, the files it removed are marked gone and the locations'
copies judged again by the ingestion's own code, so the catalog shows what remains.

At a location with a recovery window (``StorageLocation.trash_days``, soft delete) the same exact versions
and files are moved to a trash instead (``actions.trash`` for buckets; the agent's ``trash`` action for
hosts): the items end TRASHED with the date their window ends, and ``actions.softdelete`` restores or
purges them.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef, Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from actions import keepers, orphans, promises, reclaim, trash
from actions.models import DeletionItem, DeletionJob, DeletionState, ItemKind, ItemState
from actions.protection import OPEN_DELETION_STATES
from actions.services import audit_job_event, lock_checkpoint
from audit.actor import Actor
from audit.choices import EventSource
from catalog import hooks
from catalog.models import CheckpointCopy, ShardFile
from catalog.recovery import newest_restorable
from catalog.services import location_recognize
from ckptfleet.celery import task
from ckptfleet.errors import DomainError, PermissionRefused
from fleet import s3
from fleet.choices import DeleteCondition, LocationKind
from fleet.models import Bucket, Host, StorageLocation, trash_days_of
from fleet.services import bucket_record_delete_condition, host_root_or_refuse

log = logging.getLogger(__name__)

BATCH = s3.DELETE_BATCH  # keys per DeleteObjects request, and files per agent answer
LEASE = timedelta(minutes=10)  # a running job without progress this long is sent to a worker again
MAX_IDLE_PASSES = 5  # batches in a row that only met transient errors before the task gives up for now
TERMINAL = (DeletionState.COMPLETED, DeletionState.BLOCKED, DeletionState.FAILED)
TERMINAL_ACTIONS = {
    DeletionState.COMPLETED: "deletion.complete",
    DeletionState.BLOCKED: "deletion.blocked",
    DeletionState.FAILED: "deletion.fail",
}
HOST_KINDS = (LocationKind.NVME, LocationKind.PFS)
WORKER = Actor.worker("deletion worker")
_GONE_CODES = frozenset({"NoSuchKey", "NoSuchVersion", "404", "NotFound"})
_CHANGED_CODES = frozenset({"PreconditionFailed", "412"})


def audit_job(
    job: DeletionJob, actor: Actor, action: str, *, after: dict, reason: str = "", before=None, request_id: str = ""
) -> None:
    """One event on the checkpoint's history (the location's, for an orphan clean-up), naming the deletion, as the
    scheduling services write them."""
    audit_job_event(
        job,
        actor,
        action,
        reason=reason,
        before={"deletion": job.pk, **before} if before else None,
        after={"deletion": job.pk, **after},
        request_id=request_id,
    )


_audit = audit_job


# --- the promises, checked again at the moment of execution -----------------------------------------


def wait_for_lease(job: DeletionJob, *, actor: Actor) -> bool:
    """A job whose checkpoint a live lease covers goes back to scheduled until the lease ends (promise 11): it
    waits, it is not blocked for good, since a lease ends by itself. Audited ``deletion.wait``, naming the lease.
    Call it with the job locked and running; True when it now waits."""
    if job.checkpoint_id is None:
        return False
    from actions.leases import describe, live

    lease = live([job.checkpoint_id]).order_by("-expires_at").first()
    if lease is None:
        return False
    until = lease.expires_at + timedelta(minutes=1)
    moved = DeletionJob.objects.filter(pk=job.pk, state=DeletionState.RUNNING).update(
        state=DeletionState.SCHEDULED, execute_after=until, heartbeat_at=None
    )
    if moved == 1:
        _audit(
            job,
            actor,
            "deletion.wait",
            reason=f"in use: {describe(lease)}",
            before={"state": DeletionState.RUNNING, "execute_after": job.execute_after.isoformat()},
            after={"state": DeletionState.SCHEDULED, "execute_after": until.isoformat(), "lease": lease.pk},
        )
    return True


def blocker(job: DeletionJob) -> str:
    """Why the job must not delete anything more now, or "" when every promise allows it (promise 4).

    Call it with the checkpoint and the job locked. The rules are those ``schedule_deletion`` applied when the job
    was made (``actions.promises``), read again now: a hold or a pin placed since wins; a copy goes only while
    another verified copy that is not itself being deleted remains; a disputed copy is never deleted alone; a
    policy never deletes the run's newest restorable checkpoint, nor a checkpoint with a disputed copy; what a locked
    retention policy keeps goes only with its quorum's approvals, even when it was locked after scheduling
    (``actions.keepers``).
    """
    if job.is_orphans:
        return ""  # no checkpoint to protect as a whole: every item is asked again (``orphans.recheck``)
    checkpoint, copy = job.checkpoint, job.copy
    refusal = (
        promises.held(checkpoint)
        or promises.pinned(checkpoint)
        or promises.leased(checkpoint)
        or promises.disputed_copy(copy)
        or promises.files_protected_elsewhere(job)
    )
    survivors: list[CheckpointCopy] = []
    if refusal is None and copy is not None:
        others_going = DeletionJob.objects.filter(
            checkpoint=checkpoint, state__in=OPEN_DELETION_STATES, copy__isnull=False
        ).exclude(pk=job.pk)
        survivors = list(
            CheckpointCopy.objects.filter(checkpoint=checkpoint, gone_at__isnull=True)
            .exclude(pk=job.copy_id)
            .exclude(pk__in=others_going.values("copy_id"))
        )
        refusal = promises.last_verified_copy(checkpoint, copy, survivors)
    elif refusal is None and job.origin.startswith("policy"):
        refusal = (
            promises.newest_restorable_for_policy(checkpoint, job.origin, newest_restorable(checkpoint.run)[0])
            or promises.disputed_for_policy(checkpoint, job.origin)
            or promises.unidentified_for_policy(checkpoint, job.origin)
        )
    if refusal is not None:
        return f"{refusal.message} [{refusal.code}]"
    if not survivors:
        # A policy locked since scheduling wins, as a hold does: what it keeps goes only with its quorum.
        found = keepers.keepers([checkpoint.pk]).get(checkpoint.pk, [])
        short = keepers.short_of_quorum(str(checkpoint), found, job.approvals_given)
        if short:
            return f"{short} [kept_by_locked_policy]"
    return ""


def lock(job_id: int) -> DeletionJob | None:
    """Lock the run, the checkpoint, then the job (the services' order); None when there is no such job.

    An orphan clean-up locks the checkpoints its pending files belong to now (run, then checkpoint, as holds do),
    then its location (the lock a scan's apply takes, so no rescan claims a file mid-batch), then the job.
    """

    row = DeletionJob.objects.filter(pk=job_id).values_list("checkpoint_id", "orphan_location_id").first()
    if row is None:
        return None
    checkpoint_id, location_id = row
    if checkpoint_id is None:
        orphans.lock_checkpoints(job_id)
        StorageLocation.objects.locked().filter(pk=location_id).first()
        return DeletionJob.objects.select_for_update(of=("self",)).select_related("orphan_location").get(pk=job_id)
    checkpoint = lock_checkpoint(checkpoint_id)
    job = DeletionJob.objects.select_for_update(of=("self",)).select_related("copy").get(pk=job_id)
    job.checkpoint = checkpoint
    return job


_lock = lock


# --- starting due jobs, and the sweep ---------------------------------------------------------------


def due_jobs(now: datetime):
    """Scheduled jobs whose grace period is over and which need no approval or have it."""
    return (
        DeletionJob.objects.filter(state=DeletionState.SCHEDULED, execute_after__lte=now)
        .filter(Q(needs_approval=False) | Q(approved_at__isnull=False))
        .filter(Q(approvals_required__lt=2) | Q(second_approved_at__isnull=False))
    )


def stale_jobs(now: datetime):
    """Running jobs a worker should be working on but that have shown no progress for ``LEASE``.

    Progress is the job's heartbeat (its last batch or agent report), or its start. Jobs that only
    wait for host agents are left alone: the agent's next fetch checks the promises again.
    """
    pending = DeletionItem.objects.filter(job=OuterRef("pk"), state=ItemState.PENDING)
    return (
        DeletionJob.objects.filter(state=DeletionState.RUNNING)
        .annotate(last_progress=Coalesce("heartbeat_at", "started_at"))
        .filter(last_progress__lt=now - LEASE)
        .annotate(
            bucket_work=Exists(pending.filter(location__kind=LocationKind.BUCKET)),
            any_pending=Exists(pending),
        )
        .filter(Q(bucket_work=True) | Q(any_pending=False))
    )


def last_progress(job: DeletionJob, *, now: datetime | None = None) -> str:
    """How long ago a running job last moved, in words ("last progress 12 s ago"); "" when it is not running."""
    if job.state != DeletionState.RUNNING:
        return ""
    last = job.heartbeat_at or job.started_at
    if last is None:
        return ""
    seconds = max(int(((now or timezone.now()) - last).total_seconds()), 0)
    if seconds < 120:
        ago = f"{seconds} s"
    elif seconds < 7200:
        ago = f"{seconds // 60} min"
    else:
        ago = f"{seconds // 3600} h {seconds % 3600 // 60} min"
    lease = int(LEASE.total_seconds())
    stale = f" (longer than the {lease // 60} min lease)" if seconds > lease else ""
    return f"last progress {ago} ago{stale}"


def start(job_id: int, *, now: datetime | None = None) -> bool:
    """Move one due job from scheduled to running, with its audit event; queue its task after commit."""

    now = now or timezone.now()
    with transaction.atomic():
        job = _lock(job_id)
        if job is None or not due_jobs(now).filter(pk=job_id).exists():
            return False
        DeletionJob.objects.filter(pk=job.pk).update(state=DeletionState.RUNNING, started_at=now, heartbeat_at=now)
        _audit(
            job,
            WORKER,
            "deletion.start",
            before={"state": job.state},
            after={"state": DeletionState.RUNNING, "items": job.items_total, "bytes": job.bytes_total},
        )
        transaction.on_commit(lambda: task("actions.tasks.execute_deletion").delay(job_id))
    return True


def start_due(*, now: datetime | None = None) -> dict:
    """Start every due job and send a worker to every stale running one (beat, every minute)."""

    now = now or timezone.now()
    started = [pk for pk in due_jobs(now).order_by("execute_after", "pk").values_list("pk", flat=True)[:1000]]
    started = [pk for pk in started if start(pk, now=now)]
    resent = list(stale_jobs(now).order_by("pk").values_list("pk", flat=True)[:1000])
    for pk in resent:
        task("actions.tasks.execute_deletion").delay(pk)
    if started or resent:
        log.info("deletions started: %s; sent again after no progress: %s", started, resent)
    return {"started": started, "resent": resent}


# --- executing a job --------------------------------------------------------------------------------


@dataclass
class BatchResult:
    status: str  # "more", "done", "stopped", "waiting" (for agents), "retry" (only failed objects are left)
    deleted: int = 0
    retry: tuple[int, ...] = ()  # items that met a transient error in this batch


def execute(job_id: int) -> str:
    """Work through a running job's object items, batch by batch, and end it when nothing is pending.

    Safe to run twice at once or again after a crash: each batch locks the job, reads what is still
    pending and records what the store confirmed before it commits. Returns how the job stands:
    "done" (ended), "stopped" (not running), "waiting" (only host files remain, for the agents),
    "later" (the store kept failing; the sweep sends the job again).
    """
    skip: set[int] = set()
    clients: dict[int, object] = {}
    versioning: dict[int, str | None] = {}
    idle = 0
    while True:
        try:
            result = run_batch(job_id, skip=frozenset(skip), clients=clients, versioning=versioning)
        except s3.S3Error as exc:
            if not exc.transient:
                fail(job_id, f"the store refused the deletion: {exc.message}")
                return "done"
            idle += 1
            if idle > MAX_IDLE_PASSES:
                log.warning("deletion %s: the store keeps failing (%s); trying again later", job_id, exc.message)
                return "later"
            time.sleep(min(2**idle, 30))
            continue
        if result.status == "retry":
            # Only objects the store failed on for now are left: try them again after a pause.
            idle += 1
            if idle > MAX_IDLE_PASSES:
                return "later"
            time.sleep(min(2**idle, 30))
            skip.clear()
            continue
        if result.status != "more":
            return result.status
        skip.update(result.retry)
        if result.deleted:
            idle = 0
        elif result.retry:
            idle += 1
            if idle > MAX_IDLE_PASSES:
                return "later"
            time.sleep(min(2**idle, 30))


def run_batch(
    job_id: int, *, skip: frozenset[int] = frozenset(), clients: dict | None = None, versioning: dict | None = None
) -> BatchResult:
    """One batch of at most ``BATCH`` objects of one bucket, in one transaction with the locks held.

    ``clients`` keeps one S3 client per bucket across the batches of one task run, ``versioning`` the
    buckets' versioning status. A job with nothing pending ends by its items, before the promises
    are read again: a hold placed after the last batch deleted everything blocked nothing.
    """
    with transaction.atomic():
        job = _lock(job_id)
        if job is None or job.state != DeletionState.RUNNING:
            return BatchResult("stopped")
        pending = DeletionItem.objects.filter(job=job, state=ItemState.PENDING)
        if not pending.exists():
            _finish(job, *_verdict(job), actor=WORKER)
            return BatchResult("done")
        if wait_for_lease(job, actor=WORKER):
            return BatchResult("stopped")
        why = blocker(job)
        if why:
            _finish(job, DeletionState.BLOCKED, _stopped(job, why), actor=WORKER)
            return BatchResult("stopped")
        first = (
            pending.filter(location__kind=LocationKind.BUCKET)
            .exclude(pk__in=skip)
            .order_by("location_id", "pk")
            .values_list("location_id", flat=True)
            .first()
        )
        if first is None:
            if skip and pending.filter(pk__in=skip).exists():
                return BatchResult("retry")
            return BatchResult("waiting")
        items = list(pending.filter(location_id=first).exclude(pk__in=skip).order_by("pk")[:BATCH])
        bucket = Bucket.objects.select_related("location").get(location_id=first)
        clients = {} if clients is None else clients
        client = clients.get(first) or clients.setdefault(first, s3.client_for(bucket))
        versioning = {} if versioning is None else versioning
        if first not in versioning:
            versioning[first] = s3.bucket_versioning(client, bucket.bucket_name)
        now = timezone.now()
        done: dict[str, list[DeletionItem]] = defaultdict(list)
        files = items
        if job.is_orphans:
            files = _orphan_pass(job, items, client, bucket.bucket_name, done, now=now)
        checked = _check_before_delete(client, bucket.bucket_name, files, versioned=versioning[first])
        resolved = 0
        for item in files:
            verdict = checked[item.pk]
            if verdict.skip:
                item.state, item.detail, item.done_at = ItemState.SKIPPED, verdict.skip, now
                done[item.state].append(item)
            elif verdict.version_id and verdict.version_id != item.version_id:
                item.version_id = verdict.version_id
                DeletionItem.objects.filter(pk=item.pk).update(version_id=item.version_id)
                resolved += 1
            if verdict.etag:
                item.etag = verdict.etag  # the ETag just checked: what the delete is conditional on
        sending = [i for i in files if i.state == ItemState.PENDING]
        days = bucket.location.trash_days
        condition = ""
        if versioning[first] not in ("Enabled", "Suspended") and any(not i.version_id for i in sending):
            condition = delete_condition(bucket, client)
            if not days and condition not in (DeleteCondition.BATCH, DeleteCondition.SINGLE):
                for item in [i for i in sending if not i.version_id]:
                    item.state, item.detail, item.done_at = ItemState.BLOCKED, NO_CONDITION_REFUSAL, now
                    done[item.state].append(item)
                sending = [i for i in sending if i.state == ItemState.PENDING]
        moved = (
            trash.move(client, bucket.bucket_name, job.pk, sending, versioning=versioning[first], condition=condition)
            if days
            else []
        )
        for item, move in zip(sending if days else (), moved, strict=True):
            if move.skip:
                item.state, item.detail, item.done_at = ItemState.SKIPPED, move.skip, now
                done[item.state].append(item)
            item.trash_ref, item.trash_version_id = move.trash_ref, move.trash_version_id
        if days:
            outcomes = [m.outcome for m in moved if not m.skip]
            sending = [i for i, m in zip(sending, moved, strict=True) if not m.skip]
        else:
            outcomes = s3.delete_exact(
                client, bucket.bucket_name, [(i.path, i.version_id, i.etag) for i in sending], condition=condition
            )
        retry: list[int] = []
        refused: list[dict] = []
        for item, outcome in zip(sending, outcomes, strict=True):
            if outcome.deleted and days:
                item.state, item.detail, item.reclaim_after = ItemState.TRASHED, "", now + timedelta(days=days)
            elif outcome.deleted:
                item.state, item.detail = ItemState.DELETED, ""
            elif outcome.marker_version_id:
                # The bucket became versioned since it was read: the store only hid the object. Take the
                # marker away again, and look the version up on the next pass.
                _remove_marker(client, bucket.bucket_name, item, outcome.marker_version_id)
                versioning.pop(first, None)
                retry.append(item.pk)
                continue
            elif outcome.code == "AccessDenied":
                item.state = ItemState.BLOCKED
                item.detail = (
                    f"refused by the store (Object Lock legal hold or retention, or a policy): {outcome.message}"
                )
                refused.append({"key": outcome.key, "version_id": outcome.version_id, "message": outcome.message})
            elif outcome.code in _CHANGED_CODES:
                item.state, item.detail = ItemState.SKIPPED, "changed since scheduling: the ETag no longer matches"
            elif outcome.code in _GONE_CODES:
                item.state, item.detail = ItemState.SKIPPED, "missing: already gone from the store"
            elif not outcome.code or s3.is_transient_code(outcome.code):
                retry.append(item.pk)  # unconfirmed: stays pending, tried again
                continue
            else:
                item.state = ItemState.BLOCKED
                item.detail = f"refused by the store: {outcome.code}: {outcome.message}"
                refused.append({"key": outcome.key, "version_id": outcome.version_id, "message": outcome.message})
            item.done_at = now
            done[item.state].append(item)
        counts = _record(job, done, now=now)
        _audit(
            job,
            WORKER,
            "deletion.batch",
            after={
                "location": bucket.location.name,
                **counts,
                "unconfirmed": len(retry),
                "versions_looked_up": resolved,
                "refused_no_condition": sum(
                    1 for i in done.get(ItemState.BLOCKED, ()) if i.detail == NO_CONDITION_REFUSAL
                ),
                "first_key": items[0].path,
                "last_key": items[-1].path,
            },
        )
        if refused:
            # The alert: these stay in the store, and the job will end blocked rather than completed.
            _audit(
                job,
                WORKER,
                "deletion.refused_by_store",
                reason="the store refused to delete objects (Object Lock legal hold or retention?)",
                after={"location": bucket.location.name, "count": len(refused), "objects": refused[:50]},
            )
            log.warning("deletion %s: %s objects refused by %s", job.pk, len(refused), bucket.location.name)
    return BatchResult("more", deleted=counts["deleted"], retry=tuple(retry))


NO_CONDITION_REFUSAL = (
    "refused, left in place: this bucket has no versioning and its store does not honour a conditional delete "
    "(ETag / If-Match), so an object rewritten after its check would be deleted with its new bytes; give the "
    "location a recovery window, turn versioning on, or set the bucket's delete condition"
)


def delete_condition(bucket: Bucket, client) -> str:
    """The conditional delete the bucket's store honours (``DeleteCondition``): the operator's setting, else what
    the probe found, probing now (and recording it on the bucket, audited, in the caller's transaction) when the
    store was never asked. A probe that cannot tell counts as "none": fail closed."""
    in_force = bucket.delete_condition_in_force
    if in_force:
        return in_force
    found = s3.probe_conditional_delete(client, bucket.bucket_name) or DeleteCondition.NONE
    bucket_record_delete_condition(bucket=bucket, found=found, actor=WORKER)
    return found


def _orphan_pass(
    job: DeletionJob, items: list[DeletionItem], client, bucket: str, done: dict, *, now: datetime
) -> list[DeletionItem]:
    """An orphan clean-up's batch: leave what is no longer an orphan (``orphans.recheck``), abort its uploads by
    exact key and upload id, and return the files still to delete. Runs with the batch's locks held."""
    skips = orphans.recheck(job, items)
    files = []
    for item in items:
        if item.pk in skips:
            item.state, item.detail, item.done_at = ItemState.SKIPPED, skips[item.pk], now
            done[item.state].append(item)
        elif item.kind == ItemKind.UPLOAD:
            outcome = s3.abort_upload(client, bucket, item.path, item.upload_id)
            if outcome.deleted:
                item.state, item.detail = ItemState.DELETED, "multipart upload aborted: its parts are freed"
            elif outcome.code in ("NoSuchUpload", *_GONE_CODES):
                item.state, item.detail = ItemState.SKIPPED, "missing: the upload was completed or aborted already"
            else:
                item.state, item.detail = ItemState.BLOCKED, f"refused by the store: {outcome.code}: {outcome.message}"
            item.done_at = now
            done[item.state].append(item)
        else:
            files.append(item)
    orphans.mark_uploads_gone(done.get(ItemState.DELETED, []) + done.get(ItemState.SKIPPED, []), now=now)
    return files


@dataclass(frozen=True)
class Checked:
    """What the store says of one frozen object just before it is deleted: the exact version to delete (or, in a
    bucket without versioning, the ETag its delete is conditional on), or why it must not be (``skip``, in words;
    "missing: ..." when the planned content is gone)."""

    version_id: str = ""
    etag: str = ""
    skip: str = ""


CHECK_THREADS = 16  # HEAD requests in flight for one batch
MTIME_SLACK = timedelta(seconds=1)  # listings give LastModified to the second or the millisecond


def _check_before_delete(
    client, bucket: str, items: list[DeletionItem], *, versioned: str | None
) -> dict[int, Checked]:
    """Make every item of a batch an exact delete, or skip it, by asking the store right before deleting.

    An item frozen with its version id is exact already. One frozen without (the scan's HEAD pass had
    not reached it) is never sent version-less to a versioned bucket, where that only adds a delete
    marker: its version is looked up by the content the plan froze (size, ETag, last modified), with one
    paginated listing per directory of the batch's keys (``s3.versions_of_keys``), not one per key. In a
    bucket without versioning (or whose status could not be read) the object is HEADed, and one whose size
    or ETag differ from the plan is skipped as changed; the ETag it has now is the one its delete is made
    conditional on (``s3.delete_exact``). Raises S3Error for the batch to retry.
    """
    todo = [i for i in items if not i.version_id]
    if not todo:
        return {i.pk: Checked(version_id=i.version_id) for i in items}
    if versioned in ("Enabled", "Suspended"):
        listed = s3.versions_of_keys(client, bucket, [i.path for i in todo])
        answers = {i.pk: _planned_version(i, listed[i.path]) for i in todo}
    else:

        def check(item: DeletionItem) -> Checked:
            state = s3.object_state(client, bucket, item.path)
            if state is None:
                return Checked(skip="missing: already gone from the store")
            if state.size != item.size or (item.etag and state.etag != item.etag):
                return Checked(skip="changed since scheduling: its size or ETag no longer match the plan")
            if not state.etag:
                return Checked(skip="left alone: the store gave no ETag to make its delete conditional on")
            real_version = state.version_id if state.version_id != "null" else ""
            return Checked(version_id=real_version, etag=state.etag)

        with ThreadPoolExecutor(max_workers=min(CHECK_THREADS, len(todo))) as pool:
            answers = dict(zip((i.pk for i in todo), pool.map(check, todo), strict=True))
    return {i.pk: answers.get(i.pk) or Checked(version_id=i.version_id) for i in items}


def _planned_version(item: DeletionItem, versions: list[s3.VersionInfo]) -> Checked:
    """The one version of ``item``'s key that holds the content the plan froze, or why there is none."""
    same = [v for v in versions if v.size == item.size and (not item.etag or v.etag == item.etag)]
    if len(same) > 1:
        same = [v for v in same if abs(v.last_modified - item.mtime) <= MTIME_SLACK]
    if not same:
        return Checked(skip="missing: no version of the key holds the planned content (size and ETag)")
    if len(same) > 1:
        return Checked(skip=f"left alone: {len(same)} versions hold the planned content and none is told apart")
    return Checked(version_id=same[0].version_id)


def _remove_marker(client, bucket: str, item: DeletionItem, marker: str) -> None:
    outcome = s3.delete_objects(client, bucket, [(item.path, marker, "")])[0]
    if not outcome.deleted:
        log.warning("deletion: delete marker %s of %s stays: %s %s", marker, item.path, outcome.code, outcome.message)


def _stopped(job: DeletionJob, why: str) -> str:
    """The outcome of a job a promise stopped, saying what had been deleted before and what remains."""
    states = Counter(DeletionItem.objects.filter(job=job).values_list("state", flat=True))
    deleted, pending = states[ItemState.DELETED], states[ItemState.PENDING]
    done = f"{deleted} of {job.items_total} deleted before that, {pending} left in place"
    if states[ItemState.TRASHED]:
        done = f"{states[ItemState.TRASHED]} moved to the trash and {done}"
    return f"stopped before it was done: {why}; {done}"


def _record(job: DeletionJob, done: dict[str, list[DeletionItem]], *, now: datetime) -> dict[str, int]:
    """Store the items' new states, the job's counters and heartbeat and the files now gone, in the caller's
    transaction: a batch that only met transient errors still beats, as a worker is on the job."""
    for state, items in done.items():
        by_detail: dict[str, list[int]] = defaultdict(list)
        for item in items:
            by_detail[item.detail].append(item.pk)
        for detail, ids in by_detail.items():
            for i in range(0, len(ids), 1000):
                DeletionItem.objects.filter(pk__in=ids[i : i + 1000], state=ItemState.PENDING).update(
                    state=state, detail=detail, done_at=now
                )
    trashed_items = done.get(ItemState.TRASHED, [])
    if trashed_items:
        DeletionItem.objects.bulk_update(trashed_items, ["trash_ref", "trash_version_id", "reclaim_after"], 1000)
    trashed = len(trashed_items)
    deleted = len(done.get(ItemState.DELETED, ()))
    blocked = len(done.get(ItemState.BLOCKED, ()))
    skipped = len(done.get(ItemState.SKIPPED, ()))
    # A file in the trash is gone from where the plan found it: it counts as deleted until restored.
    DeletionJob.objects.filter(pk=job.pk).update(
        items_deleted=job.items_deleted + deleted + trashed,
        items_blocked=job.items_blocked + blocked,
        heartbeat_at=now,
    )
    job.items_deleted += deleted + trashed
    job.items_blocked += blocked
    job.heartbeat_at = now
    gone = [
        i
        for i in (*done.get(ItemState.DELETED, ()), *trashed_items, *done.get(ItemState.SKIPPED, ()))
        if i.shard_file_id and (i.state != ItemState.SKIPPED or i.detail.startswith("missing"))
    ]
    _mark_gone(gone, now=now)
    return {
        "deleted": deleted,
        "trashed": trashed,
        "bytes_trashed": sum(i.size for i in trashed_items),
        "blocked": blocked,
        "skipped": skipped,
        "bytes_deleted": sum(i.size for i in done.get(ItemState.DELETED, ())),
    }


def _mark_gone(items: list[DeletionItem], *, now: datetime) -> None:
    """Mark the shard files behind deleted items gone, as an inventory that no longer lists them would.

    Only a row that still describes the deleted object or file (same version, or same size and
    mtime) is marked: a file written again since belongs to nobody's frozen list.
    """
    if not items:
        return
    wanted = {i.shard_file_id: i for i in items}
    ids = list(wanted)
    last_seen = {}
    for i in range(0, len(ids), 1000):
        rows = ShardFile.objects.filter(pk__in=ids[i : i + 1000], gone_at__isnull=True).values_list(
            "pk", "version_id", "size", "mtime", "location__last_applied_at"
        )
        for pk, version_id, size, mtime, applied in rows:
            item = wanted[pk]
            # A version looked up at deletion time is compared with a row that may still have none.
            exact = item.version_id and version_id
            same = version_id == item.version_id if exact else (size, mtime) == (item.size, item.mtime)
            if same:
                last_seen[pk] = applied or now
    by_seen: dict[datetime, list[int]] = defaultdict(list)
    for pk, seen in last_seen.items():
        by_seen[seen].append(pk)
    for seen, pks in by_seen.items():
        for i in range(0, len(pks), 1000):
            ShardFile.objects.filter(pk__in=pks[i : i + 1000]).update(gone_at=now, last_seen_at=seen, changed_at=now)


def _verdict(job: DeletionJob) -> tuple[str, str]:
    """How a job whose items are all settled ends, and why, in words for people."""
    states = Counter(DeletionItem.objects.filter(job=job).values_list("state", flat=True))
    deleted, blocked, skipped = states[ItemState.DELETED], states[ItemState.BLOCKED], states[ItemState.SKIPPED]
    parts = [f"{deleted} of {job.items_total} deleted"] if deleted or not states[ItemState.TRASHED] else []
    if states[ItemState.TRASHED]:
        until = reclaim_date(job)
        parts.insert(
            0,
            f"{states[ItemState.TRASHED]} of {job.items_total} moved to the trash, recoverable until "
            f"{until:%Y-%m-%d %H:%M} UTC"
            if until
            else "",
        )
    if skipped:
        parts.append(
            f"{skipped} skipped and left in place (changed since scheduling, already gone, or archived; each says why)"
        )
    if blocked:
        unsafe = DeletionItem.objects.filter(job=job, state=ItemState.BLOCKED, detail=NO_CONDITION_REFUSAL).count()
        if unsafe:
            parts.append(
                f"{unsafe} refused: the store does not honour a conditional delete and the bucket has no versioning "
                "nor recovery window, so a rewrite could be lost; they remain"
            )
        if blocked > unsafe:
            parts.append(f"{blocked - unsafe} refused by the store (Object Lock legal hold or retention); they remain")
        return DeletionState.BLOCKED, "; ".join(parts)
    return DeletionState.COMPLETED, "; ".join(parts)


def reclaim_date(job: DeletionJob) -> datetime | None:
    """When the last of the job's trashed items is purged (the end of its recovery window), or None."""
    return (
        DeletionItem.objects.filter(job=job, state=ItemState.TRASHED)
        .order_by("-reclaim_after")
        .values_list("reclaim_after", flat=True)
        .first()
    )


def _finish(job: DeletionJob, state: str, outcome: str, *, actor: Actor) -> bool:
    """End a running job, once: the state change is the guard of its one completion event.

    Runs in the caller's transaction with the job locked. The locations whose files went are
    judged again (copies complete, partial or gone) and their usage refreshed, as after an inventory.
    """
    now = timezone.now()
    ended = DeletionJob.objects.filter(pk=job.pk, state=DeletionState.RUNNING).update(
        state=state, finished_at=now, outcome=outcome[:2000], reclaim_after=reclaim_date(job)
    )
    if ended != 1:
        return False
    states = Counter(DeletionItem.objects.filter(job=job).values_list("state", flat=True))
    _audit(
        job,
        actor,
        TERMINAL_ACTIONS[state],
        reason=outcome,
        before={"state": DeletionState.RUNNING},
        after={
            "state": state,
            "items": job.items_total,
            "deleted": states[ItemState.DELETED],
            "trashed": states[ItemState.TRASHED],
            "blocked": states[ItemState.BLOCKED],
            "skipped": states[ItemState.SKIPPED],
            "pending": states[ItemState.PENDING],
        },
    )
    _rejudge(job, now=now)
    if states[ItemState.DELETED] or states[ItemState.TRASHED]:
        reclaim.queue(job.pk)  # ask the store whether what went is really gone (proof of reclaim)
    job.state, job.outcome, job.finished_at = state, outcome, now
    return True


def _rejudge(job: DeletionJob, *, now: datetime) -> None:

    touched = (
        DeletionItem.objects.filter(job=job)
        .exclude(state__in=(ItemState.PENDING, ItemState.BLOCKED))
        .values_list("location_id", flat=True)
        .distinct()
    )
    for location in StorageLocation.objects.filter(pk__in=list(touched)).order_by("pk").locked():
        location_recognize(location=location)
        hooks.location_rejudged(location, now)  # the usage rollups (spend) follow, in this transaction


def fail(job_id: int, why: str) -> None:
    with transaction.atomic():
        job = _lock(job_id)
        if job is not None and job.state == DeletionState.RUNNING:
            _finish(job, DeletionState.FAILED, why, actor=WORKER)


# --- host files: the agent's side -------------------------------------------------------------------


def soft_locations() -> Q:
    """The locations whose deletions go to the trash first (a window of more than 0 days), as a filter on items."""
    if settings.SOFT_DELETE_REQUIRED:
        return Q(pk__isnull=False)  # every location: the default, which compliance keeps above 0, fills in a 0
    if settings.SOFT_DELETE_DAYS > 0:
        return Q(location__soft_delete_days__isnull=True) | Q(location__soft_delete_days__gt=0)
    return Q(location__soft_delete_days__gt=0)


def agent_pending(*, host: Host, root: str = "", limit: int = BATCH, soft: bool = False) -> list[dict]:
    """The pending files of running jobs on ``host``'s own roots, for its agent to delete or move to the trash.

    Each job is checked against the promises under its locks before its files are handed out; a
    job a promise now forbids is stopped here, and none of its files are listed. Files of a location
    with a recovery window are listed with ``"action": "trash"`` and their trash path, and only to an
    agent that said it can (``soft``): an older agent would delete them at once, so it gets none of them.
    """
    items = DeletionItem.objects.filter(
        state=ItemState.PENDING,
        job__state=DeletionState.RUNNING,
        location__host=host,
        location__kind__in=HOST_KINDS,
    )
    if not soft:
        items = items.exclude(soft_locations())
    if root:
        host_root_or_refuse(host, root)
        items = items.filter(location__root_path=root)
    allowed = []
    for job_id in items.order_by("job_id").values_list("job_id", flat=True).distinct()[:100]:
        with transaction.atomic():
            job = _lock(job_id)
            if job is None or job.state != DeletionState.RUNNING:
                continue
            actor = Actor.system("deletion check", EventSource.AGENT)
            if wait_for_lease(job, actor=actor):
                continue
            why = blocker(job)
            if why:
                _finish(job, DeletionState.BLOCKED, _stopped(job, why), actor=actor)
                continue
            if job.is_orphans and not _orphans_for_agent(job, items.filter(job_id=job_id)[:limit]):
                continue
        allowed.append(job_id)
    rows = (
        items.filter(job_id__in=allowed)
        .order_by("job_id", "pk")
        .values("pk", "job_id", "location__root_path", "location__soft_delete_days", "path", "size", "mtime")[:limit]
    )
    listed = []
    for r in rows:
        days = r["location__soft_delete_days"]
        entry = {
            "id": r["pk"],
            "job": r["job_id"],
            "root": r["location__root_path"],
            "path": r["path"],
            "size": r["size"],
            "mtime": r["mtime"].timestamp(),
        }
        if trash_days_of(days) > 0:
            entry.update(action="trash", trash_path=trash.trash_key(r["job_id"], r["path"]))
        listed.append(entry)
    return listed


def _orphans_for_agent(job: DeletionJob, pending) -> bool:
    """Before an agent is handed an orphan clean-up's files: leave (as skipped, with the reason) those that are no
    longer orphans, under the job's locks. False when the job has nothing left for agents (ended if so)."""
    items = list(pending)
    skips = orphans.recheck(job, items)
    if skips:
        now = timezone.now()
        left = [i for i in items if i.pk in skips]
        for item in left:
            item.state, item.detail, item.done_at = ItemState.SKIPPED, skips[item.pk], now
        counts = _record(job, {ItemState.SKIPPED: left}, now=now)
        _audit(job, Actor.system("deletion check", EventSource.AGENT), "deletion.batch", after=counts)
    if not DeletionItem.objects.filter(job=job, state=ItemState.PENDING).exists():
        _finish(job, *_verdict(job), actor=Actor.system("deletion check", EventSource.AGENT))
        return False
    return len(skips) < len(items)


AGENT_RESULTS = ("deleted", "trashed", "skipped", "failed")


def agent_report(*, host: Host, results: list) -> dict[str, int]:
    """Record what a host's agent did with its files: deleted, skipped (changed or missing), or failed.

    The whole report is refused when any entry is malformed or names an item of another host.
    Results for items no longer pending (reported twice, or the job was stopped) are ignored.
    Failed files stay pending for the agent's next run. One audit event per job, by the host.
    """
    if not isinstance(results, list) or not results:
        raise DomainError('send {"results": [{"id": ..., "result": "deleted|skipped|failed", "detail": ...}]}')
    if len(results) > BATCH:
        raise DomainError(f"at most {BATCH} results per report")
    parsed: dict[int, tuple[str, str]] = {}
    for n, entry in enumerate(results, start=1):
        if not isinstance(entry, dict):
            raise DomainError(f"result {n} is not an object")
        pk, result, detail = entry.get("id"), entry.get("result"), entry.get("detail", "")
        if not isinstance(pk, int) or isinstance(pk, bool):
            raise DomainError(f"result {n}: id must be an integer")
        if result not in AGENT_RESULTS:
            raise DomainError(f"result {n}: result must be one of {', '.join(AGENT_RESULTS)}")
        if not isinstance(detail, str):
            raise DomainError(f"result {n}: detail must be a string")
        parsed[pk] = (result, detail[:500])
    owners = dict(DeletionItem.objects.filter(pk__in=list(parsed)).values_list("pk", "location__host_id").iterator())
    foreign = [pk for pk in parsed if owners.get(pk) != host.pk]
    if foreign:
        raise PermissionRefused(
            f"items {', '.join(map(str, sorted(foreign)[:10]))} are not files of host {host.name}; nothing was recorded"
        )
    actor = Actor.agent(host.name)
    recorded = ignored = 0
    by_job: dict[int, list[int]] = defaultdict(list)
    for pk, job_id in DeletionItem.objects.filter(pk__in=list(parsed)).values_list("pk", "job_id"):
        by_job[job_id].append(pk)
    for job_id, pks in sorted(by_job.items()):
        with transaction.atomic():
            job = _lock(job_id)
            if job is None or job.state != DeletionState.RUNNING:
                ignored += len(pks)
                continue
            items = list(DeletionItem.objects.filter(pk__in=pks, state=ItemState.PENDING).select_related("location"))
            ignored += len(pks) - len(items)
            now = timezone.now()
            done: dict[str, list[DeletionItem]] = defaultdict(list)
            failed = []
            for item in items:
                result, detail = parsed[item.pk]
                if result == "failed":
                    failed.append({"path": item.path, "detail": detail})
                    continue
                item.state = {"deleted": ItemState.DELETED, "trashed": ItemState.TRASHED}.get(result, ItemState.SKIPPED)
                item.detail = detail if result == "skipped" else ""
                item.done_at = now
                if item.state == ItemState.TRASHED:
                    days = item.location.trash_days or settings.SOFT_DELETE_DAYS or 1
                    item.trash_ref = trash.trash_key(job.pk, item.path)
                    item.reclaim_after = now + timedelta(days=days)
                done[item.state].append(item)
                recorded += 1
            counts = _record(job, done, now=now)
            _audit(
                job, actor, "deletion.agent_report", after={**counts, "failed": len(failed), "failures": failed[:20]}
            )
            if not DeletionItem.objects.filter(job=job, state=ItemState.PENDING).exists():
                _finish(job, *_verdict(job), actor=actor)
    return {"recorded": recorded, "ignored": ignored}
