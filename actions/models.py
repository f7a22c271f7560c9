"""What operators do to checkpoints: pins, holds (legal, governance, compliance), and two-phase deletions.

Rows here are the state the promises in PRODUCT.md are checked against; every change to them is
made by a service in ``actions.services`` that writes its audit event in the same transaction.
Pins and holds are never deleted: releasing one stamps it, so its history stays.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import F, Q

from catalog.selectors import OrphanKind


class Pin(models.Model):
    """A checkpoint an operator wants kept: it cannot be scheduled for deletion while pinned."""

    checkpoint = models.ForeignKey("catalog.Checkpoint", on_delete=models.PROTECT, related_name="pins")
    reason = models.TextField()
    pinned_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, related_name="+")
    pinned_label = models.CharField(max_length=200)
    pinned_at = models.DateTimeField()
    unpinned_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    unpinned_label = models.CharField(max_length=200, blank=True)
    unpinned_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-pinned_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["checkpoint"], condition=Q(unpinned_at__isnull=True), name="pin_one_active_per_checkpoint"
            ),
            models.CheckConstraint(condition=~Q(reason=""), name="pin_has_reason"),
        ]

    def __str__(self) -> str:
        return f"pin on checkpoint {self.checkpoint_id}"

    @property
    def active(self) -> bool:
        return self.unpinned_at is None


class MirrorState(models.TextChoices):
    NONE = "none", "Nothing to mirror (no Object Lock bucket)"
    PENDING = "pending", "Mirroring to Object Lock"
    DONE = "done", "Mirrored to Object Lock"
    PARTIAL = "partial", "Partly mirrored: the store refused some objects"
    FAILED = "failed", "Not mirrored: the store refused"


class HoldMode(models.TextChoices):
    """How a hold is released, after S3 Object Lock's legal hold and its GOVERNANCE and COMPLIANCE retention modes
    (the same three that GCS event-based/temporary holds with locked retention and Azure legal holds with locked
    immutability policies offer)."""

    LEGAL = "legal", "Legal hold"
    GOVERNANCE = "governance", "Governance hold"
    COMPLIANCE = "compliance", "Compliance hold"


# What each mode promises, as the hold form and docs/operators.md (Hold modes) say it.
HOLD_MODE_HELP = {
    HoldMode.LEGAL: "Kept until another person (an operator) releases it with a reason.",
    HoldMode.GOVERNANCE: (
        "Kept until another person with the approver role releases it, giving a reason and a case reference."
    ),
    HoldMode.COMPLIANCE: (
        "Kept at least until the retain-until date: nobody can release it or shorten the date before then, "
        "admins and the database included. The date can only be extended."
    ),
}


class Hold(models.Model):
    """A hold: nothing it covers is deleted, demoted or overwritten, by anyone.

    A hold covers one checkpoint, or, with ``checkpoint`` empty, every checkpoint of ``run``,
    including ones that appear later. Only a different person than the one who placed it may
    release it; a governance hold only a person with the approver role (with a case reference);
    a compliance hold nobody before ``retain_until``, which can be extended, never shortened.
    The compliance rules are also kept by a database trigger (migration 0006), so the admin, a
    superuser's shell and raw SQL are refused as the services are.
    """

    run = models.ForeignKey("catalog.Run", on_delete=models.PROTECT, related_name="holds")
    checkpoint = models.ForeignKey(
        "catalog.Checkpoint", on_delete=models.PROTECT, null=True, blank=True, related_name="holds"
    )
    mode = models.CharField(max_length=12, choices=HoldMode.choices, default=HoldMode.LEGAL)
    retain_until = models.DateTimeField(
        null=True, blank=True, help_text="Compliance holds only: nobody can release the hold before this."
    )
    reason = models.TextField()
    case_ref = models.CharField(max_length=200)
    placed_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, related_name="+")
    placed_label = models.CharField(max_length=200)
    placed_at = models.DateTimeField()
    released_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    released_label = models.CharField(max_length=200, blank=True)
    released_at = models.DateTimeField(null=True, blank=True)
    release_reason = models.TextField(blank=True)
    release_case_ref = models.CharField(max_length=200, blank=True)
    # Object Lock mirroring: done after the hold commits (the database hold is what the promises
    # read); a store that refuses leaves the hold standing, and says so here and in the audit trail.
    mirror_state = models.CharField(max_length=12, choices=MirrorState.choices, default=MirrorState.NONE)
    mirror_detail = models.TextField(blank=True)
    mirrored_at = models.DateTimeField(null=True, blank=True)
    # The Object Lock retention the last mirror set for this hold's mode ("" and None: none, or lifted), and how
    # many objects the store confirmed and refused.
    mirror_mode = models.CharField(max_length=12, blank=True)
    mirror_retain_until = models.DateTimeField(null=True, blank=True)
    mirror_objects = models.IntegerField(default=0)
    mirror_refused = models.IntegerField(default=0)

    class Meta:
        ordering = ["-placed_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=~Q(reason="") & ~Q(case_ref=""), name="hold_has_reason_and_case"),
            models.CheckConstraint(condition=Q(mode__in=HoldMode.values), name="hold_mode_valid"),
            models.CheckConstraint(
                condition=(Q(mode=HoldMode.COMPLIANCE) & Q(retain_until__isnull=False))
                | (~Q(mode=HoldMode.COMPLIANCE) & Q(retain_until__isnull=True)),
                name="hold_retain_until_only_for_compliance",
            ),
            models.CheckConstraint(
                condition=Q(released_at__isnull=True) | ~Q(released_label=F("placed_label")),
                name="hold_released_by_another_person",
            ),
        ]
        indexes = [models.Index(fields=["run", "released_at"], name="hold_run_active")]

    def __str__(self) -> str:
        scope = f"checkpoint {self.checkpoint_id}" if self.checkpoint_id else f"run {self.run_id}"
        return f"hold {self.case_ref} on {scope}"

    @property
    def active(self) -> bool:
        return self.released_at is None

    def retained(self, now) -> bool:
        """A compliance hold before its retain-until date: nobody may release it."""
        return self.mode == HoldMode.COMPLIANCE and self.retain_until is not None and now < self.retain_until


class DeletionState(models.TextChoices):
    AWAITING_APPROVAL = "awaiting_approval", "Awaiting approval"
    SCHEDULED = "scheduled", "Scheduled (grace period)"
    RUNNING = "running", "Running"
    COMPLETED = "completed", "Completed"
    BLOCKED = "blocked", "Blocked by a promise"
    CANCELLED = "cancelled", "Cancelled"
    FAILED = "failed", "Failed"
    RESTORED = "restored", "Restored from the trash"


class ProofState(models.TextChoices):
    """What the store said, after the job ended, about what the job freed (``actions.reclaim``)."""

    NONE = "", "Not checked yet"
    CONFIRMED = "confirmed", "Confirmed: gone, or in the trash"
    FAILED = "failed", "Failed: the store still holds what was freed"
    UNCHECKED = "unchecked", "Could not be checked: the store did not answer"


class DeletionScope(models.TextChoices):
    CHECKPOINT = "checkpoint", "Every copy of a checkpoint"
    COPY = "copy", "One copy of a checkpoint"
    ORPHANS = "orphans", "Orphans at one location"


class DeletionJob(models.Model):
    """One scheduled deletion of a whole checkpoint, of one copy, or of one group of orphans, with its frozen items.

    An orphan clean-up (``scope`` orphans) has no checkpoint: it names the orphans page's group (kind,
    location, run directory, and the run for copies of a deleted run) and freezes the exact files and
    uploads of that group when it is scheduled (``actions.orphans``).
    The job's state and its items live in the database, never in the broker: a worker that dies
    is replaced by one that reads where the job stands and carries on.
    """

    scope = models.CharField(max_length=12, choices=DeletionScope.choices, default=DeletionScope.CHECKPOINT)
    checkpoint = models.ForeignKey(
        "catalog.Checkpoint",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="deletions",
        help_text="Empty for an orphan clean-up.",
    )
    orphan_kind = models.CharField(max_length=16, blank=True, help_text="Orphan clean-ups: the kind of orphan.")
    orphan_location = models.ForeignKey(
        "fleet.StorageLocation", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    orphan_prefix = models.TextField(blank=True, help_text="Orphan clean-ups: the run directory of the group.")
    orphan_run = models.ForeignKey("catalog.Run", on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    copy = models.ForeignKey(
        "catalog.CheckpointCopy",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="deletions",
        help_text="Empty: every copy of the checkpoint.",
    )
    state = models.CharField(max_length=20, choices=DeletionState.choices)
    reason = models.TextField()
    origin = models.CharField(max_length=20, default="manual", help_text="manual, or policy:<id>.")
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    requested_label = models.CharField(max_length=200)
    requested_at = models.DateTimeField()
    needs_approval = models.BooleanField(default=False)
    approval_reasons = models.JSONField(default=list, blank=True)
    approved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    approved_label = models.CharField(max_length=200, blank=True)
    approved_at = models.DateTimeField(null=True, blank=True)
    # Above a blast-radius limit (bytes, objects, share of the run) a second approver is needed too:
    # ``approvals_required`` is 0 (none), 1 or 2, and the second approval is recorded here.
    approvals_required = models.PositiveSmallIntegerField(default=0)
    second_approved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    second_approved_label = models.CharField(max_length=200, blank=True)
    second_approved_at = models.DateTimeField(null=True, blank=True)
    execute_after = models.DateTimeField(help_text="The end of the grace period.")
    cancelled_label = models.CharField(max_length=200, blank=True)
    cancelled_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When a worker or an agent last worked on it (started it, sent a batch to the store, reported "
        "files): the sweep sends a running job to a worker again when this is older than the lease.",
    )
    finished_at = models.DateTimeField(null=True, blank=True)
    items_total = models.IntegerField(default=0)
    bytes_total = models.BigIntegerField(default=0)
    items_deleted = models.IntegerField(default=0)
    items_blocked = models.IntegerField(default=0)
    outcome = models.TextField(blank=True, help_text="Why it ended as it did, for people.")
    reclaim_after = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Soft delete: until then what it moved to the trash can be restored; then it is purged.",
    )
    restored_label = models.CharField(max_length=200, blank=True)
    restored_at = models.DateTimeField(null=True, blank=True)
    # Proof of reclaim (``actions.reclaim``): the store listed again after the job ended. ``bytes_reclaimed`` are
    # the bytes proved gone (no longer stored nor billed), ``money_reclaimed`` what they cost per month at the price
    # book's price on the day of the proof; ``bytes_in_trash`` are proved in the trash (still billed until purged).
    proof_state = models.CharField(max_length=10, choices=ProofState.choices, default=ProofState.NONE, blank=True)
    proof_at = models.DateTimeField(null=True, blank=True)
    proof_detail = models.TextField(blank=True)
    proof_failures = models.JSONField(default=list, blank=True)
    bytes_reclaimed = models.BigIntegerField(default=0)
    bytes_in_trash = models.BigIntegerField(default=0)
    bytes_unproven = models.BigIntegerField(default=0)
    money_reclaimed = models.DecimalField(max_digits=30, decimal_places=12, null=True, blank=True)
    money_currency = models.CharField(max_length=8, blank=True)

    class Meta:
        ordering = ["-requested_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=~Q(reason=""), name="deletionjob_has_reason"),
            models.CheckConstraint(
                condition=Q(approved_at__isnull=True) | ~Q(approved_label=F("requested_label")),
                name="deletionjob_approved_by_another_person",
            ),
            models.CheckConstraint(
                condition=Q(second_approved_at__isnull=True)
                | (~Q(second_approved_label=F("requested_label")) & ~Q(second_approved_label=F("approved_label"))),
                name="deletionjob_second_approver_is_a_third_person",
            ),
            models.CheckConstraint(
                condition=(
                    Q(scope=DeletionScope.ORPHANS, checkpoint__isnull=True, orphan_location__isnull=False)
                    & ~Q(orphan_kind="")
                )
                | (~Q(scope=DeletionScope.ORPHANS) & Q(checkpoint__isnull=False, orphan_location__isnull=True)),
                name="deletionjob_checkpoint_or_orphans",
            ),
        ]
        indexes = [
            models.Index(fields=["state", "execute_after"], name="deletionjob_due"),
            models.Index(fields=["proof_state", "proof_at"], name="deletionjob_proof"),
        ]

    def __str__(self) -> str:
        if self.is_orphans:
            return f"orphan clean-up {self.pk} at location {self.orphan_location_id} ({self.state})"
        return f"deletion {self.pk} of checkpoint {self.checkpoint_id} ({self.state})"

    @property
    def is_orphans(self) -> bool:
        return self.scope == DeletionScope.ORPHANS

    @property
    def orphan_kind_label(self) -> str:
        return OrphanKind(self.orphan_kind).label if self.orphan_kind in OrphanKind.values else self.orphan_kind

    @property
    def subject(self) -> str:
        """What the job deletes, in words: the checkpoint, or the orphan group."""
        if self.is_orphans:
            where = f"{self.orphan_prefix}/" if self.orphan_prefix else "the location root"
            return f"{self.orphan_kind_label.lower()} at {self.orphan_location} in {where}"
        return str(self.checkpoint)

    @property
    def approvals_given(self) -> int:
        return (self.approved_at is not None) + (self.second_approved_at is not None)


class ItemState(models.TextChoices):
    PENDING = "pending", "Pending"
    DELETED = "deleted", "Deleted"
    BLOCKED = "blocked", "Blocked"
    SKIPPED = "skipped", "Skipped (left in place)"
    TRASHED = "trashed", "In the trash (recoverable)"
    RESTORING = "restoring", "Being restored from the trash"
    RESTORED = "restored", "Restored"


class ItemKind(models.TextChoices):
    FILE = "file", "Object or file"
    UPLOAD = "upload", "Incomplete multipart upload"


class DeletionItem(models.Model):
    """One frozen object version or host file of a deletion job: exactly what will be deleted.

    An orphan clean-up's items are files of no copy (``copy`` empty) or of a left-over or deleted-run
    copy, and incomplete multipart uploads (``kind`` upload: ``path`` is the key, ``upload_id`` the
    upload's id, and the item is carried out by aborting that upload).
    """

    job = models.ForeignKey(DeletionJob, on_delete=models.PROTECT, related_name="items")
    kind = models.CharField(max_length=8, choices=ItemKind.choices, default=ItemKind.FILE)
    copy = models.ForeignKey(
        "catalog.CheckpointCopy", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    multipart_upload = models.ForeignKey(
        "fleet.MultipartUpload", on_delete=models.SET_NULL, null=True, related_name="+"
    )
    upload_id = models.CharField(max_length=1024, blank=True)
    location = models.ForeignKey("fleet.StorageLocation", on_delete=models.PROTECT, related_name="+")
    shard_file = models.ForeignKey("catalog.ShardFile", on_delete=models.SET_NULL, null=True, related_name="+")
    path = models.TextField(help_text="The key in the bucket, or the path under the host's root.")
    version_id = models.CharField(max_length=1024, blank=True)
    etag = models.CharField(max_length=200, blank=True)
    size = models.BigIntegerField()
    mtime = models.DateTimeField()
    state = models.CharField(max_length=10, choices=ItemState.choices, default=ItemState.PENDING)
    detail = models.TextField(blank=True)
    done_at = models.DateTimeField(null=True, blank=True)
    # Soft delete: where the trashed object or file is (versioned bucket: the delete marker's version id, empty when
    # the planned version was non-current already; other buckets: the trash key; hosts: the trash path under the
    # root), the trash copy's own version id in a bucket with versioning suspended, and the end of its window.
    trash_ref = models.CharField(max_length=2048, blank=True)
    trash_version_id = models.CharField(max_length=1024, blank=True)
    reclaim_after = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["job", "location", "path"]
        constraints = [
            models.UniqueConstraint(
                fields=["job", "location", "path", "version_id", "upload_id"], name="deletionitem_unique_per_job"
            ),
        ]
        indexes = [
            models.Index(fields=["job", "state"], name="deletionitem_job_state"),
            models.Index(fields=["state", "reclaim_after"], name="deletionitem_trash_due"),
        ]

    def __str__(self) -> str:
        return f"{self.path} ({self.state})"


class LeasePurpose(models.TextChoices):
    RESUMING = "resuming", "Resuming from it"
    EVALUATING = "evaluating", "Evaluating it"
    EXPORTING = "exporting", "Exporting it"
    OTHER = "other", "Other"


class Lease(models.Model):
    """A job (or a person) is using a checkpoint until ``expires_at``: while the lease is live nothing deletes or
    demotes it, by hand or by a policy (PRODUCT.md promise 11). A lease lapses by itself when it expires; taking,
    renewing, releasing and lapsing are each audited (``actions.leases``)."""

    checkpoint = models.ForeignKey("catalog.Checkpoint", on_delete=models.CASCADE, related_name="leases")
    owner = models.CharField(max_length=200, help_text="Who holds it: a job's name, a person.")
    purpose = models.CharField(max_length=12, choices=LeasePurpose.choices)
    taken_label = models.CharField(max_length=200, help_text="The person or host that took it.")
    taken_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    host = models.ForeignKey("fleet.Host", on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    taken_at = models.DateTimeField()
    renewed_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField()
    released_at = models.DateTimeField(null=True, blank=True)
    released_label = models.CharField(max_length=200, blank=True)
    lapsed_at = models.DateTimeField(null=True, blank=True, help_text="When the product noticed it had expired.")

    class Meta:
        ordering = ["-taken_at", "-pk"]
        constraints = [
            models.CheckConstraint(condition=~Q(owner=""), name="lease_has_owner"),
            models.CheckConstraint(condition=Q(expires_at__gt=models.F("taken_at")), name="lease_expires_after_taken"),
        ]
        indexes = [models.Index(fields=["checkpoint", "expires_at"], name="lease_checkpoint_expiry")]

    def __str__(self) -> str:
        return f"lease {self.pk} on checkpoint {self.checkpoint_id} by {self.owner}"

    def live_at(self, now) -> bool:
        return self.released_at is None and self.expires_at > now
