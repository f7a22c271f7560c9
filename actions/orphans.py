"""Orphan clean-up: one group of the orphans page deleted through the same two-phase, audited deletion.

An orphan clean-up is a ``DeletionJob`` of scope ``orphans``: scheduling freezes the exact rows of one group as
the orphans page shows it (``catalog.selectors.orphan_group_files`` / ``orphan_group_uploads``: files of no
checkpoint, the files of left-over copies of interrupted saves or of copies of a deleted run, and incomplete
multipart uploads by key and upload id), never a prefix or a pattern. Then the grace period, the approvals
(files of no recognised checkpoint, copies of a deleted run, size, blast radius), cancelling, and execution by
the same executor (``actions.execution``) with the same audit events as any deletion, written on the location's history.

At execution each item is asked again, under the locks, whether it is still an orphan (``recheck``): a file a
rescan has since recognised as part of a checkpoint is left, and the item says which checkpoint claimed it; a
file whose checkpoint is now held or pinned is never deleted. Uploads are aborted (AbortMultipartUpload with the
recorded key and upload id), which frees their parts at once: a trash window cannot keep them.

Who: a person with the operator role who sees the whole fleet. With team scoping on, a scoped person does not
see files of no run (``access.scoping.visible_orphans``), so cannot clean them up either.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Q, QuerySet, Sum
from django.utils import timezone

from access.roles import Role
from access.scoping import scoped_team_names
from actions import keepers
from actions.keepers import Keeper
from actions.models import DeletionItem, DeletionJob, DeletionScope, DeletionState, ItemKind, ItemState
from actions.protection import OPEN_DELETION_STATES, active_holds
from actions.services import (
    blast_radius,
    freeze_files,
    grace_period,
    grace_text,
    lock_checkpoint,
    require_person_role,
    require_reason,
)
from audit.actor import Actor
from audit.choices import ActorKind
from audit.services import audit
from catalog.choices import RunStatus
from catalog.models import Checkpoint, CheckpointCopy, Run, ShardFile
from catalog.selectors import CLEANABLE_KINDS, OrphanKind, orphan_group_files, orphan_group_uploads
from ckptfleet.errors import DomainError, PermissionRefused
from fleet.choices import LocationKind
from fleet.models import MultipartUpload, StorageLocation
from fleet.pricebook import GIB, PriceBook, utc_today

SAMPLE_PATHS = 20
MAX_PREFIX = 1024


@dataclass
class OrphanCleanup:
    """What cleaning up one orphan group would remove and free, and whether it may: shown before a person confirms.

    ``left_out`` names the checkpoints whose files are kept although in the group (held or pinned now).
    """

    kind: str
    location: StorageLocation
    prefix: str
    run: Run | None
    files: int = 0
    uploads: int = 0
    bytes: int = 0
    uploads_unknown_size: int = 0
    monthly_cost: Decimal | None = None
    currency: str = ""
    sample: list[dict] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)
    refusal: str | None = None
    refusal_code: str = ""
    approval_reasons: list[str] = field(default_factory=list)
    blast_reasons: list[str] = field(default_factory=list)
    grace_days: int = 7
    left_out_copy_ids: set[int] = field(default_factory=set)
    # The checkpoints this clean-up leaves with no present copy that a locked retention policy keeps
    # (``actions.keepers``), and the approvals that adds: deleting what a locked policy keeps takes its quorum.
    kept_by: dict[str, list[Keeper]] = field(default_factory=dict)
    kept_approvals: int = 0

    @property
    def items(self) -> int:
        return self.files + self.uploads

    @property
    def allowed(self) -> bool:
        return self.refusal is None

    @property
    def needs_approval(self) -> bool:
        return bool(self.approval_reasons)

    @property
    def approvals_required(self) -> int:
        return max(2 if self.blast_reasons else 1 if self.approval_reasons else 0, self.kept_approvals)

    @property
    def kind_label(self) -> str:
        return OrphanKind(self.kind).label

    @property
    def trash_days(self) -> int:
        """The location's recovery window: files go to its trash first; uploads are aborted at once, whatever it."""
        return self.location.trash_days

    @property
    def execute_after(self) -> datetime:
        return timezone.now() + grace_period()

    @property
    def grace_text(self) -> str:
        return grace_text()

    @property
    def group_label(self) -> str:
        where = f"{self.prefix}/" if self.prefix else "the location root"
        run = f" (run {self.run.team.name}/{self.run.name})" if self.run is not None else ""
        return f"{self.kind_label.lower()} at {self.location.name} in {where}{run}"


# --- reading the group ----------------------------------------------------------------------------


def _group(kind, location, prefix, run) -> tuple[str, StorageLocation, str, Run | None]:
    """Check the group's key as the orphans page names it (kind, location, run directory, and the run for copies of
    a deleted run); ``location`` and ``run`` as objects or ids. ``DomainError`` on anything unknown."""
    if not isinstance(kind, str) or kind not in OrphanKind.values:
        raise DomainError(f"unknown orphan kind {str(kind)[:40]!r}; one of {', '.join(CLEANABLE_KINDS)}")
    if kind not in CLEANABLE_KINDS:
        raise DomainError(
            "checkpoints whose every copy is partial are checkpoints, not orphans of no one: delete them from their "
            "checkpoint's page, where the preview checks the promises",
            code="not_cleanable",
        )
    if not isinstance(location, StorageLocation):
        if not isinstance(location, int) or isinstance(location, bool):
            raise DomainError("the location must be a location id", code="invalid")
        found = StorageLocation.objects.select_related("bucket", "host").filter(pk=location).first()
        if found is None:
            raise DomainError(f"location {location} does not exist", code="not_found", http_status=404)
        location = found
    if prefix is None:
        prefix = ""
    if not isinstance(prefix, str) or len(prefix) > MAX_PREFIX or "\x00" in prefix:
        raise DomainError("the run directory must be text of at most 1024 characters", code="invalid")
    prefix = prefix.strip().rstrip("/")
    if kind == OrphanKind.DELETED_RUN:
        if run is None or run == "":
            raise DomainError("copies of a deleted run are cleaned up one run at a time: name the run", code="required")
        if not isinstance(run, Run):
            if not isinstance(run, int) or isinstance(run, bool):
                raise DomainError("the run must be a run id", code="invalid")
            found_run = Run.objects.select_related("team").filter(pk=run).first()
            if found_run is None:
                raise DomainError(f"run {run} does not exist", code="not_found", http_status=404)
            run = found_run
        if run.status != RunStatus.DELETED:
            raise DomainError(f"run {run} is not marked deleted, so its copies are not orphans", code="not_orphaned")
    elif run not in (None, ""):
        raise DomainError("only copies of a deleted run are grouped by run", code="invalid")
    else:
        run = None
    if kind == OrphanKind.MULTIPART and location.kind != LocationKind.BUCKET:
        raise DomainError(f"{location} is not a bucket: it has no multipart uploads", code="invalid")
    return kind, location, prefix, run


def _protected_copies(files) -> tuple[set[int], list[str]]:
    """The copies among ``files`` whose checkpoint is held or pinned now, and those checkpoints named."""
    copy_ids = set(files.exclude(copy__isnull=True).values_list("copy_id", flat=True).distinct())
    if not copy_ids:
        return set(), []
    left: set[int] = set()
    named: list[str] = []
    for copy in CheckpointCopy.objects.filter(pk__in=copy_ids).select_related("checkpoint__run__team"):
        why = _protection(copy.checkpoint)
        if why:
            left.add(copy.pk)
            named.append(f"{copy.checkpoint} ({why})")
    return left, sorted(set(named))


def _protection(checkpoint: Checkpoint) -> str:
    holds = list(active_holds(checkpoint).values_list("case_ref", flat=True))
    if holds:
        return f"held, case {', '.join(sorted(set(holds)))}"
    if checkpoint.pins.filter(unpinned_at__isnull=True).exists():
        return "pinned"
    return ""


def _money(location: StorageLocation, files, uploads) -> tuple[Decimal | None, str]:
    book = PriceBook.load()
    today = utc_today()
    parts: dict[tuple[str, str], int] = defaultdict(int)
    for row in files.values("tier", "storage_class").annotate(n=Sum("size")).order_by():
        parts[(row["tier"] or location.tier, row["storage_class"])] += row["n"] or 0
    for row in uploads.values("storage_class").annotate(n=Sum("bytes")).order_by():
        parts[(location.tier, row["storage_class"])] += row["n"] or 0
    total = Decimal(0)
    for (tier, storage_class), nbytes in parts.items():
        price = book.price(location, tier, storage_class, today)
        if price is None:
            return None, book.currency
        total += Decimal(nbytes) / GIB * price
    return total.quantize(Decimal("0.01")), book.currency


def _assess(
    kind: str, location: StorageLocation, prefix: str, run: Run | None, *, with_money: bool
) -> tuple[OrphanCleanup, QuerySet[ShardFile], QuerySet[MultipartUpload]]:
    """The checks and sums of ``schedule_cleanup``, without writing; with the exact rows it would freeze."""
    result = OrphanCleanup(kind=kind, location=location, prefix=prefix, run=run)
    result.grace_days = max(settings.DELETION_GRACE_DAYS, 0)
    uploads = (
        orphan_group_uploads(location_id=location.pk, prefix=prefix)
        if kind == OrphanKind.MULTIPART
        else MultipartUpload.objects.none()
    )
    files = (
        orphan_group_files(kind=kind, location_id=location.pk, prefix=prefix, run_id=run.pk if run else None)
        if kind != OrphanKind.MULTIPART
        else ShardFile.objects.none()
    )
    left, result.left_out = _protected_copies(files)
    result.left_out_copy_ids = left
    if left:
        files = files.exclude(copy_id__in=left)
    # Nothing already in an open deletion's frozen list is frozen twice.
    taken = DeletionItem.objects.filter(job__state__in=OPEN_DELETION_STATES, location=location, state=ItemState.PENDING)
    busy_files = files.filter(pk__in=taken.filter(kind=ItemKind.FILE).values("shard_file_id")).count()
    busy_uploads = uploads.filter(upload_id__in=taken.filter(kind=ItemKind.UPLOAD).values("upload_id")).count()
    counted = files.aggregate(n=Count("pk"), b=Sum("size"))
    up = uploads.aggregate(n=Count("pk"), b=Sum("bytes"), unknown=Count("pk", filter=Q(bytes__isnull=True)))
    result.files, result.uploads = counted["n"] or 0, up["n"] or 0
    result.bytes = (counted["b"] or 0) + (up["b"] or 0)
    result.uploads_unknown_size = up["unknown"] or 0
    if with_money:
        result.monthly_cost, result.currency = _money(location, files, uploads)
    if busy_files or busy_uploads:
        open_job = (
            DeletionItem.objects.filter(job__state__in=OPEN_DELETION_STATES, location=location)
            .filter(
                Q(shard_file_id__in=files.values("pk"))
                | Q(kind=ItemKind.UPLOAD, upload_id__in=uploads.values("upload_id"))
            )
            .values_list("job_id", flat=True)
            .first()
        )
        result.refusal_code = "already_scheduled"
        result.refusal = (
            f"{busy_files + busy_uploads} of these orphans are already in deletion {open_job}, which has not "
            "finished; cancel it first or wait for it"
        )
    elif not result.items:
        result.refusal_code = "nothing_to_delete"
        kept = f" ({len(result.left_out)} held or pinned checkpoints are kept)" if result.left_out else ""
        result.refusal = f"this group has no present orphans at {location}, so there is nothing to clean up{kept}"
    if result.refusal is None:
        going = set(files.exclude(copy__isnull=True).values_list("copy_id", flat=True).distinct())
        result.kept_by = {str(c): found for c, found in kept_taken(going).items()}
        _approval_reasons(result)
    return result, files, uploads


def kept_taken(going: set[int]) -> dict[Checkpoint, list[Keeper]]:
    """{checkpoint: the locked policies that keep it} for the checkpoints whose every present copy the copies
    ``going`` (with the open deletions of single copies) would take: left-overs of an interrupted save or copies of
    a deleted run can be all that is left of a checkpoint a locked policy keeps."""
    if not going:
        return {}
    checkpoint_ids = set(CheckpointCopy.objects.filter(pk__in=going).values_list("checkpoint_id", flat=True))
    kept = keepers.keepers(checkpoint_ids)
    if not kept:
        return {}
    taken_elsewhere = DeletionJob.objects.filter(state__in=OPEN_DELETION_STATES, copy__isnull=False)
    staying = set(
        CheckpointCopy.objects.filter(checkpoint_id__in=list(kept), gone_at__isnull=True)
        .exclude(pk__in=going)
        .exclude(pk__in=taken_elsewhere.values("copy_id"))
        .values_list("checkpoint_id", flat=True)
    )
    taken = Checkpoint.objects.filter(pk__in=[pk for pk in kept if pk not in staying]).select_related("run__team")
    return {c: kept[c.pk] for c in taken.order_by("pk")}


def _approval_reasons(result: OrphanCleanup) -> None:
    threshold = settings.DELETION_APPROVAL_BYTES
    if result.bytes > threshold:
        result.approval_reasons.append(f"it frees more than the approval threshold of {threshold:,} bytes")
    if result.kind == OrphanKind.UNCLAIMED and result.files:
        # Promise 12's spirit for people too: what the product cannot identify, a second person looks at first.
        result.approval_reasons.append(
            "these files belong to no checkpoint the product recognises, so a second person looks before they go"
        )
    if result.kind == OrphanKind.DELETED_RUN:
        result.approval_reasons.append(f"it deletes copies of checkpoints of run {result.run}, marked deleted")
    for what, found in result.kept_by.items():
        result.approval_reasons.append(keepers.approval_reason(what, found))
    if result.kept_by:
        result.kept_approvals = keepers.quorum_approvals()
    result.blast_reasons = blast_radius(result.bytes, result.items, None)
    if result.blast_reasons:
        result.approval_reasons.append(
            "its blast radius is above a limit, so two approvers (neither of them the person who asked) must approve "
            "it: " + "; ".join(result.blast_reasons)
        )


def _sample(location: StorageLocation, files, uploads) -> list[dict]:
    prefix = ""
    bucket = getattr(location, "bucket", None) if location.kind == LocationKind.BUCKET else None
    if bucket is not None and bucket.prefix:
        prefix = bucket.prefix if bucket.prefix.endswith("/") else bucket.prefix + "/"
    rows = [
        {"path": prefix + f.path, "version_id": f.version_id, "size": f.size, "upload_id": ""}
        for f in files.order_by("path").only("path", "version_id", "size")[:SAMPLE_PATHS]
    ]
    rows += [
        {"path": u.key, "version_id": "", "size": u.bytes, "upload_id": u.upload_id}
        for u in uploads.order_by("key", "pk")[: SAMPLE_PATHS - len(rows)]
    ]
    return rows


def _check_who(actor: Actor, doing: str) -> None:
    require_person_role(actor, Role.OPERATOR, doing=doing)
    if actor.kind == ActorKind.USER and scoped_team_names(actor.user) is not None:
        raise PermissionRefused(
            f"{doing} is for people who see the whole fleet: orphans of no run are not shown to a person limited to "
            "some teams"
        )


def preview(*, kind, location, prefix="", run=None, actor: Actor | None = None) -> OrphanCleanup:
    """What cleaning up one orphan group would remove (exact counts, bytes, money a month, the first paths), and
    whether it may be scheduled. With ``actor``, refused as scheduling would be for who they are."""
    if actor is not None:
        _check_who(actor, "cleaning up orphans")
    kind, location, prefix, run = _group(kind, location, prefix, run)
    result, files, uploads = _assess(kind, location, prefix, run, with_money=True)
    result.sample = _sample(location, files, uploads)
    return result


# --- scheduling -----------------------------------------------------------------------------------


def schedule_cleanup(
    *, kind, location, prefix="", run=None, reason: str, actor: Actor, request_id: str = ""
) -> DeletionJob:
    """Schedule the clean-up of one orphan group, freezing its exact files (with version, ETag, size) and uploads
    (key and upload id). Runs no sooner than the grace period from now; needs approval as ``_approval_reasons`` say.
    """
    reason = require_reason(reason)
    _check_who(actor, "scheduling an orphan clean-up")
    kind, location, prefix, run = _group(kind, location, prefix, run)
    grace = grace_period()
    with transaction.atomic():
        # The location's lock is the one a scan's apply takes: no rescan claims a file while the list is frozen.
        StorageLocation.objects.locked().filter(pk=location.pk).first()
        assessed, files, uploads = _assess(kind, location, prefix, run, with_money=False)
        if assessed.refusal:
            raise DomainError(assessed.refusal, code=assessed.refusal_code)
        now = timezone.now()
        job = DeletionJob.objects.create(
            scope=DeletionScope.ORPHANS,
            orphan_kind=kind,
            orphan_location=location,
            orphan_prefix=prefix,
            orphan_run=run,
            state=DeletionState.AWAITING_APPROVAL if assessed.needs_approval else DeletionState.SCHEDULED,
            reason=reason,
            origin="manual",
            requested_by=actor.user,
            requested_label=actor.label,
            requested_at=now,
            needs_approval=assessed.needs_approval,
            approval_reasons=assessed.approval_reasons,
            approvals_required=assessed.approvals_required,
            execute_after=now + grace,
        )
        count, total = freeze_files(job, files, location_ids=[location.pk])
        ups = list(uploads.order_by("key", "pk"))
        DeletionItem.objects.bulk_create(
            [
                DeletionItem(
                    job=job,
                    kind=ItemKind.UPLOAD,
                    location=location,
                    multipart_upload=u,
                    upload_id=u.upload_id,
                    path=u.key,
                    size=u.bytes or 0,
                    mtime=u.initiated_at or u.first_seen_at,
                )
                for u in ups
            ],
            batch_size=1000,
        )
        job.items_total, job.bytes_total = count + len(ups), total + sum(u.bytes or 0 for u in ups)
        job.save(update_fields=["items_total", "bytes_total"])
        audit(
            actor,
            "deletion.schedule",
            target_type="location",
            target_id=location.pk,
            target_label=str(location),
            reason=reason,
            before={"state": None},
            after={
                "deletion": job.pk,
                "state": job.state,
                "scope": DeletionScope.ORPHANS,
                "kind": kind,
                "prefix": prefix,
                "run": run.pk if run else None,
                "files": count,
                "uploads": len(ups),
                "items": job.items_total,
                "bytes": job.bytes_total,
                "left_out": assessed.left_out,
                "execute_after": job.execute_after.isoformat(),
                "needs_approval": job.needs_approval,
                "approvals_required": job.approvals_required,
                "approval_reasons": job.approval_reasons,
            },
            request_id=(request_id or "")[:64],
        )
    return job


# --- at execution: is each item still an orphan? ----------------------------------------------------


def lock_checkpoints(job_id: int) -> None:
    """Lock the checkpoints the job's pending files belong to now (run, then checkpoint, in order), so a hold placed
    meanwhile waits for the batch and then wins; called before the location's and the job's locks."""
    ids = sorted(
        set(
            CheckpointCopy.objects.filter(
                pk__in=DeletionItem.objects.filter(job_id=job_id, state=ItemState.PENDING, kind=ItemKind.FILE)
                .exclude(shard_file__copy__isnull=True)
                .values("shard_file__copy_id")
            ).values_list("checkpoint__run_id", "checkpoint_id")
        )
    )
    for _run_id, checkpoint_id in ids:
        lock_checkpoint(checkpoint_id)


def recheck(job: DeletionJob, items: list[DeletionItem]) -> dict[int, str]:
    """Why each of ``items`` must be left now ({item id: reason}); an item not named is still an orphan.

    A file a rescan has given to a checkpoint since scheduling is left ("claimed by checkpoint X since
    scheduling"); a left-over copy recognised as a real one, or a run no longer marked deleted, likewise; a file
    whose checkpoint is held or pinned now is never deleted. An upload the last scan no longer found is left to
    the store's own answer (it was completed or aborted: the abort says NoSuchUpload).
    """
    skips: dict[int, str] = {}
    file_ids = [i.shard_file_id for i in items if i.kind == ItemKind.FILE and i.shard_file_id]
    rows = {
        r["pk"]: r
        for r in ShardFile.objects.filter(pk__in=file_ids).values(
            "pk", "copy_id", "copy__temporary", "copy__checkpoint_id", "copy__checkpoint__run__status"
        )
    }
    checkpoints = {
        c.pk: c
        for c in Checkpoint.objects.filter(
            pk__in={r["copy__checkpoint_id"] for r in rows.values() if r["copy__checkpoint_id"]}
        ).select_related("run__team")
    }
    protection = {pk: _protection(c) for pk, c in checkpoints.items()}
    # A policy locked since scheduling wins, as a hold does: what it keeps goes only with its quorum's approvals.
    job_copies = set(DeletionItem.objects.filter(job=job).exclude(copy__isnull=True).values_list("copy_id", flat=True))
    if job.approvals_given < keepers.quorum_approvals():
        for checkpoint, found in kept_taken(job_copies).items():
            if checkpoint.pk in checkpoints and not protection.get(checkpoint.pk):
                protection[checkpoint.pk] = (
                    f"kept by the locked {keepers.names(found)}, and this clean-up has {job.approvals_given} of the "
                    f"{keepers.quorum_approvals()} approvals deleting what a locked policy keeps needs"
                )
    for item in items:
        if item.kind != ItemKind.FILE:
            continue
        row = rows.get(item.shard_file_id) if item.shard_file_id else None
        if row is None:
            skips[item.pk] = "missing: the catalog no longer has the file"
            continue
        checkpoint = checkpoints.get(row["copy__checkpoint_id"]) if row["copy__checkpoint_id"] else None
        if row["copy_id"] != item.copy_id and checkpoint is not None:
            skips[item.pk] = f"claimed by checkpoint {checkpoint} since scheduling; left in place"
        elif job.orphan_kind == OrphanKind.TEMPORARY and checkpoint is not None and not row["copy__temporary"]:
            skips[item.pk] = f"recognised as a copy of checkpoint {checkpoint} since scheduling; left in place"
        elif (
            job.orphan_kind == OrphanKind.DELETED_RUN
            and checkpoint is not None
            and row["copy__checkpoint__run__status"] != RunStatus.DELETED
        ):
            skips[item.pk] = f"run of checkpoint {checkpoint} is no longer marked deleted; left in place"
        elif checkpoint is not None and protection.get(checkpoint.pk):
            skips[item.pk] = f"belongs to checkpoint {checkpoint}, which is {protection[checkpoint.pk]}; never deleted"
    return skips


def mark_uploads_gone(items: list[DeletionItem], *, now: datetime) -> None:
    """The uploads behind aborted items are gone, as a scan that no longer lists them would say."""
    ids = [i.upload_id for i in items if i.kind == ItemKind.UPLOAD]
    locations = {i.location_id for i in items if i.kind == ItemKind.UPLOAD}
    if ids:
        MultipartUpload.objects.filter(location_id__in=locations, upload_id__in=ids, gone_at__isnull=True).update(
            gone_at=now
        )


# --- the suggested lifecycle rule -------------------------------------------------------------------

ABORT_AFTER_DAYS = 7


@dataclass(frozen=True)
class LifecycleRule:
    """A ready-to-paste AbortIncompleteMultipartUpload rule for one bucket, scoped to the location's prefix."""

    location: StorageLocation
    bucket_name: str
    prefix: str
    json: str
    days_in_place: int | None = None  # as the last scan read the bucket's lifecycle: 0 none, None unknown

    @property
    def command(self) -> str:
        return (
            f"aws s3api put-bucket-lifecycle-configuration --bucket {self.bucket_name} "
            "--lifecycle-configuration file://abort-incomplete-uploads.json"
        )


def lifecycle_rule(subject) -> LifecycleRule | None:
    """The rule that has the store abort this bucket's incomplete uploads ``ABORT_AFTER_DAYS`` after they start
    (so none needs cleaning up again), for a bucket location or a multipart clean-up; None for anything else.

    ``put-bucket-lifecycle-configuration`` replaces the bucket's whole configuration: the page says to add the
    rule to the bucket's existing rules, if it has any.
    """
    location = subject.location if isinstance(subject, OrphanCleanup) else subject
    if isinstance(subject, OrphanCleanup) and subject.kind != OrphanKind.MULTIPART:
        return None
    bucket = getattr(location, "bucket", None) if location.kind == LocationKind.BUCKET else None
    if bucket is None:
        return None
    rule: dict = {
        "ID": f"ckptfleet-abort-incomplete-uploads-{ABORT_AFTER_DAYS}d",
        "Filter": {"Prefix": bucket.prefix},
        "Status": "Enabled",
        "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": ABORT_AFTER_DAYS},
    }
    return LifecycleRule(
        location=location,
        bucket_name=bucket.bucket_name,
        prefix=bucket.prefix,
        json=json.dumps({"Rules": [rule]}, indent=2),
        days_in_place=bucket.abort_uploads_days,
    )
