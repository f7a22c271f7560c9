"""Teams, runs, checkpoints, their copies and the shard files behind them."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from catalog.choices import (
    CopyState,
    Importance,
    RunStatus,
    RunStatusSource,
    SavedSource,
    Verification,
    VerificationBasis,
)


class Team(models.Model):
    """A group that owns runs and pays for their storage through a cost center.

    ``cost_center`` is the one in force today, kept in step with the newest ``TeamCostCenter`` by
    ``catalog.teams``; spend reads the history, so that past days keep the cost center they had.
    """

    name = models.CharField(max_length=100, unique=True)
    cost_center = models.CharField(max_length=100, blank=True, help_text="In force today (catalog.teams).")
    rpo_hours = models.FloatField(
        null=True,
        blank=True,
        help_text="The team's recovery point objective, hours: the default of its runs (catalog.recovery_point).",
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class TeamCostCenter(models.Model):
    """A team's cost center from a UTC day on, until the next one: the history spend reports bill by.

    Appended by ``catalog.teams.team_set_cost_center`` and never edited: of two set for the same day the one set
    later wins. An empty ``cost_center`` means none from that day. Days before a team's first row keep
    ``Team.cost_center`` as it was before history was kept (``catalog.teams.CostCenters``).
    """

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="cost_centers")
    cost_center = models.CharField(max_length=100, blank=True)
    effective_from = models.DateField(help_text="The first UTC day it applies to.")
    set_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    set_by_label = models.CharField(max_length=200)
    set_at = models.DateTimeField()
    reason = models.TextField(blank=True)

    class Meta:
        ordering = ["team", "effective_from", "set_at", "pk"]
        indexes = [models.Index(fields=["team", "effective_from"], name="teamcostcenter_team_from")]

    def __str__(self) -> str:
        return f"{self.team.name}: {self.cost_center or 'no cost center'} from {self.effective_from:%Y-%m-%d}"


class Run(models.Model):
    """One training run of one team. Its checkpoints may live at many locations.

    Its status, and who set it when and why, change only through ``catalog.lifecycle.run_status_set``, which
    audits every change."""

    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="runs")
    name = models.CharField(max_length=200)
    status = models.CharField(max_length=12, choices=RunStatus.choices, default=RunStatus.ACTIVE)
    status_source = models.CharField(max_length=12, choices=RunStatusSource.choices, blank=True, default="")
    status_changed_at = models.DateTimeField(null=True, blank=True)
    status_reason = models.CharField(max_length=500, blank=True, default="")
    status_by_label = models.CharField(
        max_length=150, blank=True, default="", help_text="Who set the status: a person, a host or the product."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    # GPUs the run trains on, as its sidecar says (``gpus``) and as an operator set it; the recovery point reads
    # the sidecar first, then the newest checkpoint's world size, then the operator's (catalog.recovery_point).
    sidecar_gpus = models.PositiveIntegerField(null=True, blank=True)
    operator_gpus = models.PositiveIntegerField(null=True, blank=True)
    rpo_hours = models.FloatField(
        null=True, blank=True, help_text="This run's recovery point objective, hours; empty: its team's."
    )
    # Lineage (catalog.lineage): the checkpoint this run was initialised or fine-tuned from, who said so, and
    # what was said when the checkpoint is not (yet) in the catalog ("team/run@step").
    parent_checkpoint = models.ForeignKey(
        "Checkpoint", on_delete=models.SET_NULL, null=True, blank=True, related_name="child_runs"
    )
    parent_ref = models.CharField(max_length=420, blank=True, default="")
    parent_source = models.CharField(max_length=12, blank=True, default="", help_text="sidecar or operator")

    class Meta:
        ordering = ["team__name", "name"]
        constraints = [
            models.UniqueConstraint(fields=["team", "name"], name="run_team_name_unique"),
            models.CheckConstraint(condition=Q(status__in=RunStatus.values), name="run_status_valid"),
            models.CheckConstraint(
                condition=Q(status_source__in=RunStatusSource.values), name="run_status_source_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.team.name}/{self.name}"


class Checkpoint(models.Model):
    """One step of one run: a logical checkpoint, whatever copies of it exist.

    A few checkpoints carry no step (a run's final exported model, ``last.ckpt``, Megatron's
    ``release``); they are told apart by ``tag``, the name they were saved under.
    """

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="checkpoints")
    step = models.BigIntegerField(null=True, blank=True)
    tag = models.CharField(max_length=200, blank=True, help_text="The name of a checkpoint that has no step.")
    importance = models.CharField(max_length=12, choices=Importance.choices, default=Importance.ROUTINE)
    first_seen_at = models.DateTimeField(auto_now_add=True)
    # When it was saved, by the best evidence seen so far (``catalog.ages``): every age the product uses ("older
    # than N days", "last saved", "saved at") counts from it, and from ``first_seen_at`` only when it is unknown.
    saved_at = models.DateTimeField(null=True, blank=True)
    # NULL, not "": added in place on SQLite, whose table rebuild the ownership triggers would break (SavedSource).
    saved_source = models.CharField(max_length=16, choices=SavedSource.choices, null=True, blank=True)  # noqa: DJ001

    class Meta:
        ordering = ["run", models.F("step").desc(nulls_last=True)]
        indexes = [
            # A run's checkpoints newest first as every page lists them (``NEWEST_STEP_FIRST, "tag"``): a page of
            # a 5,000-checkpoint run read in index order, stopping at the page's end, instead of sorted whole.
            # Made on PostgreSQL only (catalog 0024): SQLite has no NULLS LAST in an index.
            models.Index(
                models.F("run"), models.F("step").desc(nulls_last=True), models.F("tag"), name="checkpoint_run_newest"
            ),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["run", "step"], condition=Q(step__isnull=False), name="checkpoint_run_step_unique"
            ),
            models.UniqueConstraint(
                fields=["run", "tag"], condition=Q(step__isnull=True), name="checkpoint_run_tag_unique"
            ),
            models.CheckConstraint(
                condition=Q(step__gte=0) | (Q(step__isnull=True) & ~Q(tag="")), name="checkpoint_has_step_or_tag"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.run} {self.label}"

    @property
    def label(self) -> str:
        return f"step {self.step}" if self.step is not None else self.tag

    @property
    def saved_or_seen(self):
        """When it was saved, or failing any evidence when it was first seen (``catalog.ages``)."""
        return self.saved_at or self.first_seen_at


class CheckpointCopy(models.Model):
    """A checkpoint at one storage location, judged complete, partial or corrupt, with the reasons."""

    checkpoint = models.ForeignKey(Checkpoint, on_delete=models.CASCADE, related_name="copies")
    location = models.ForeignKey("fleet.StorageLocation", on_delete=models.CASCADE, related_name="copies")
    path = models.TextField(help_text="The checkpoint directory or file, relative to the location root.")
    format = models.CharField(max_length=40)
    state = models.CharField(max_length=10, choices=CopyState.choices)
    reasons = models.JSONField(default=list, blank=True)
    temporary = models.BooleanField(default=False, help_text="A left-over of an interrupted save.")
    verification = models.CharField(max_length=12, choices=Verification.choices, default=Verification.UNVERIFIED)
    verification_reasons = models.JSONField(default=list, blank=True)
    verification_basis = models.CharField(
        max_length=12, choices=VerificationBasis.choices, default=VerificationBasis.NONE, blank=True
    )
    verified_at = models.DateTimeField(
        null=True, blank=True, help_text="When the oldest checksum behind the copy's verified verdict was taken."
    )
    content_print = models.CharField(
        max_length=64,
        blank=True,
        default="",
        help_text="sha256 of its files' (relative path, size, checksum) when every file has a content checksum: "
        "copies with the same print hold the same content, and are compared without reading their files.",
    )
    checksums_at = models.DateTimeField(
        null=True, blank=True, help_text="The oldest time its files' checksums were taken, when known."
    )
    reference_checksums = models.JSONField(
        default=dict, blank=True, help_text="What the writer recorded: {path in the copy: [algorithm, hex digest]}."
    )
    file_count = models.BigIntegerField(default=0)
    bytes = models.BigIntegerField(default=0)
    expected_files = models.BigIntegerField(null=True, blank=True)
    expected_bytes = models.BigIntegerField(null=True, blank=True)
    newest_mtime = models.DateTimeField(null=True, blank=True)
    first_seen_at = models.DateTimeField(auto_now_add=True)
    judged_at = models.DateTimeField(null=True, blank=True)
    verification_changed_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When verification last gave the copy a different verdict (catalog.verification): since when it "
        "has been disputed, unverified or mismatched, for the problems list.",
    )
    gone_at = models.DateTimeField(null=True, blank=True)
    # Provenance: set only where the product itself wrote this copy from another (a move, an offload, a promotion;
    # ``catalog.hooks.provenance``). Verification holds a copy against its source's earlier checksum only where
    # this is recorded: an order of writing alone proves nothing about where a copy came from.
    made_from = models.ForeignKey(
        "self",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="made_copies",
        help_text="The copy the product wrote this one from, when it did.",
    )
    made_at = models.DateTimeField(null=True, blank=True, help_text="When the product began writing it from made_from.")
    made_by = models.CharField(
        max_length=60, blank=True, default="", help_text="What wrote it from made_from, e.g. 'offload #12'."
    )

    class Meta:
        ordering = ["checkpoint", "location"]
        verbose_name_plural = "checkpoint copies"
        constraints = [
            models.UniqueConstraint(fields=["location", "path"], name="copy_location_path_unique"),
            models.CheckConstraint(condition=Q(file_count__gte=0) & Q(bytes__gte=0), name="copy_counts_not_negative"),
        ]
        indexes = [models.Index(fields=["checkpoint", "gone_at"], name="copy_checkpoint_present")]

    def __str__(self) -> str:
        return f"{self.checkpoint} at {self.location}"


class ShardFile(models.Model):
    """One physical file at one location, as the newest inventory saw it.

    Rows are never deleted when a file disappears: ``gone_at`` is set and its history kept. While a
    file is present it was last seen at its location's ``last_applied_at``; ``last_seen_at`` is only
    stored when it goes, so that re-reporting an unchanged inventory writes nothing.
    On PostgreSQL ``path`` uses the "C" collation (see the migration) so that ordering and range
    comparisons are bytewise, as on SQLite, and a directory's files form one contiguous range.
    """

    # Indexes: (location, path) is unique and serves every location filter; copy and changed_by have
    # the named indexes below. Django's automatic FK indexes would duplicate them on the largest table.
    # location and copy are enforced on PostgreSQL by statement-level triggers (migration 0008), which
    # check each distinct referenced row once per statement instead of every row: two per-row foreign
    # keys cost as much as writing the rows. On SQLite they remain plain foreign keys.
    location = models.ForeignKey(
        "fleet.StorageLocation", on_delete=models.CASCADE, related_name="files", db_index=False, db_constraint=False
    )
    path = models.TextField()
    size = models.BigIntegerField()
    mtime = models.DateTimeField()
    checksum = models.CharField(max_length=128, blank=True, default="")
    checksum_algo = models.CharField(max_length=16, blank=True, default="")
    facts = models.JSONField(null=True, blank=True)
    storage_class = models.CharField(max_length=32, blank=True, default="")
    tier = models.CharField(max_length=32, blank=True, default="", help_text="Empty: the location's tier.")
    etag = models.CharField(max_length=200, blank=True, default="")
    version_id = models.CharField(max_length=1024, blank=True, default="")
    legal_hold = models.BooleanField(null=True, blank=True, help_text="Object Lock legal hold, where known.")
    retain_until = models.DateTimeField(null=True, blank=True, help_text="Object Lock retention, where known.")
    digests = models.JSONField(
        null=True,
        blank=True,
        help_text="Every other checksum known (catalog.digests): CRCs, block CRCs, S3 composites; 'at' when taken.",
    )
    # Set by the merge when a file's content checksum changes while its size and mtime do not (a scrub
    # found other bytes: bit rot or an in-place write), and kept while they stay the same: the
    # checksum the file had when it was first taken, which verification holds its content against.
    first_checksum = models.JSONField(
        null=True, blank=True, help_text='{"algo", "digest", "at"}: the content checksum first taken, if it changed.'
    )
    copy = models.ForeignKey(
        CheckpointCopy,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="files",
        db_index=False,
        db_constraint=False,
    )
    first_seen_at = models.DateTimeField()
    changed_at = models.DateTimeField()
    last_seen_at = models.DateTimeField(null=True, blank=True)
    gone_at = models.DateTimeField(null=True, blank=True)
    # Which inventory last changed the row: bookkeeping for re-judging, not integrity, so no database
    # constraint (its deferred check cost seconds per million rows at commit).
    changed_by = models.ForeignKey(
        "fleet.Inventory",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        db_index=False,
        db_constraint=False,
    )

    class Meta:
        ordering = ["location", "path"]
        constraints = [
            models.UniqueConstraint(fields=["location", "path"], name="shardfile_location_path_unique"),
            models.CheckConstraint(condition=Q(size__gte=0), name="shardfile_size_not_negative"),
            models.CheckConstraint(
                condition=Q(checksum="") | ~Q(checksum_algo=""), name="shardfile_checksum_has_algorithm"
            ),
        ]
        indexes = [
            models.Index(fields=["copy"], name="shardfile_copy"),
            models.Index(fields=["changed_by"], name="shardfile_changed_by"),
        ]

    def __str__(self) -> str:
        return f"{self.location}:{self.path}"


class IngestRow(models.Model):
    """Staging for one file line of an inventory being ingested; emptied once merged or rejected."""

    # Staging is written by COPY and emptied within the task: a database constraint would only add a
    # check per staged row, and (inventory, path) is already the unique index.
    inventory = models.ForeignKey(
        "fleet.Inventory", on_delete=models.CASCADE, related_name="+", db_index=False, db_constraint=False
    )
    path = models.TextField()
    size = models.BigIntegerField()
    mtime = models.DateTimeField()
    checksum = models.CharField(max_length=128, blank=True, default="")
    checksum_algo = models.CharField(max_length=16, blank=True, default="")
    facts = models.JSONField(null=True, blank=True)
    storage_class = models.CharField(max_length=32, blank=True, default="")
    tier = models.CharField(max_length=32, blank=True, default="", help_text="Empty: the location's tier.")
    etag = models.CharField(max_length=200, blank=True, default="")
    version_id = models.CharField(max_length=1024, blank=True, default="")
    legal_hold = models.BooleanField(null=True, blank=True, help_text="Object Lock legal hold, where known.")
    retain_until = models.DateTimeField(null=True, blank=True, help_text="Object Lock retention, where known.")
    digests = models.JSONField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["inventory", "path"], name="ingestrow_inventory_path_unique")]

    def __str__(self) -> str:
        return f"staged {self.path} of inventory {self.inventory_id}"


class CopyTierUsage(models.Model):
    """The bytes and files a present checkpoint copy holds on one tier and storage class, now.

    Kept current by the same refresh as the daily rollup; a copy's files may sit in several storage
    classes of a bucket. Current state only (no history): what a run's steps hold where, for the
    placement, retention and tiering views.
    """

    copy = models.ForeignKey(CheckpointCopy, on_delete=models.CASCADE, related_name="tier_usage")
    location = models.ForeignKey("fleet.StorageLocation", on_delete=models.CASCADE, related_name="+")
    tier = models.CharField(max_length=32)
    storage_class = models.CharField(max_length=32, blank=True)
    bytes = models.BigIntegerField()
    files = models.BigIntegerField()

    class Meta:
        ordering = ["copy", "tier", "storage_class"]
        constraints = [
            models.UniqueConstraint(fields=["copy", "tier", "storage_class"], name="copytierusage_unique"),
        ]
        indexes = [models.Index(fields=["location"], name="copytierusage_location")]

    def __str__(self) -> str:
        return f"copy {self.copy_id} on {self.tier}: {self.bytes} B"


class RestoreDrill(models.Model):
    """One restore drill: a sample of a trusted checkpoint's files read back from one copy and checked against the
    checksums recorded for them (``catalog.drills``). Measured throughput feeds the restore estimates; a failed
    drill takes the copy out of the restore ranking until a later drill of it passes."""

    class Outcome(models.TextChoices):
        PASSED = "passed", "Passed"
        FAILED = "failed", "Failed: the bytes read back do not match"
        ERROR = "error", "Could not read the copy"

    team = models.ForeignKey(Team, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    checkpoint = models.ForeignKey(Checkpoint, on_delete=models.CASCADE, related_name="drills")
    copy = models.ForeignKey(CheckpointCopy, on_delete=models.CASCADE, related_name="drills")
    tier = models.CharField(max_length=32)
    storage_class = models.CharField(max_length=32, blank=True)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()
    outcome = models.CharField(max_length=8, choices=Outcome.choices)
    files = models.IntegerField(default=0, help_text="Files read back and checked.")
    bytes = models.BigIntegerField(default=0, help_text="Bytes read back.")
    seconds = models.FloatField(default=0.0)
    detail = models.TextField(blank=True)

    class Meta:
        ordering = ["-started_at", "-pk"]
        indexes = [models.Index(fields=["copy", "-started_at"], name="restoredrill_copy_newest")]

    def __str__(self) -> str:
        return f"drill of {self.copy_id} at {self.started_at:%Y-%m-%d %H:%M} ({self.outcome})"

    @property
    def mib_per_s(self) -> float | None:
        return self.bytes / (1 << 20) / self.seconds if self.seconds > 0 and self.bytes else None
