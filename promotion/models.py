"""Promotions: one job brings one checkpoint copy to a hotter tier or another location, file by file.

The job's state and one row per file live in the database, never in the broker: a worker that dies
is replaced by one that reads where the job stands and carries on. Rows are written only by
``promotion.services`` (requests, cancellations, outcomes, each audited) and ``promotion.runner``
(the work itself).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from promotion.choices import OPEN_STATES, Direction, ItemState, JobState, Method, RestoreTier


class PromotionJob(models.Model):
    """One promotion of one copy of a checkpoint: to a hotter storage class, another location, or both.

    ``target_storage_class`` is empty for a host location, and for a restore that only makes the
    archived objects readable where they are for ``restore_days`` (S3's temporary restored copy).
    """

    checkpoint = models.ForeignKey("catalog.Checkpoint", on_delete=models.PROTECT, related_name="promotions")
    source_copy = models.ForeignKey("catalog.CheckpointCopy", on_delete=models.PROTECT, related_name="promotions")
    target_location = models.ForeignKey("fleet.StorageLocation", on_delete=models.PROTECT, related_name="promotions_in")
    target_storage_class = models.CharField(max_length=32, blank=True)
    target_tier = models.CharField(max_length=32)
    direction = models.CharField(max_length=8, choices=Direction.choices, default=Direction.PROMOTE)
    origin = models.CharField(max_length=40, default="manual", help_text="manual, or policy:<id>.")
    method = models.CharField(max_length=12, choices=Method.choices)
    state = models.CharField(max_length=16, choices=JobState.choices, default=JobState.REQUESTED)
    in_place = models.BooleanField(default=False, help_text="The target is the source's own location and keys.")
    restore_days = models.PositiveIntegerField(default=7)
    restore_tier = models.CharField(max_length=10, choices=RestoreTier.choices, default=RestoreTier.STANDARD)
    reason = models.TextField()
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    requested_label = models.CharField(max_length=200)
    requested_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    cancelled_label = models.CharField(max_length=200, blank=True)
    items_total = models.IntegerField(default=0)
    items_done = models.IntegerField(default=0)
    items_blocked = models.IntegerField(default=0)
    bytes_total = models.BigIntegerField(default=0)
    bytes_done = models.BigIntegerField(default=0)
    next_poll_at = models.DateTimeField(null=True, blank=True, help_text="When beat next checks the restores.")
    claimed_by = models.CharField(max_length=64, blank=True, help_text="The task delivery working on it.")
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True)
    # Moves (demote, offload) only: what the plan said, when the new copy verified, and how the source went.
    plan = models.JSONField(default=dict, blank=True, help_text="A move's plan figures when it was requested.")
    verified_at = models.DateTimeField(null=True, blank=True, help_text="When every new object of a move verified.")
    # A move's verification is bounded (settings.MOVE_VERIFY_HOURS, MOVE_VERIFY_ATTEMPTS): a new copy that never
    # verifies ends its move failed, with the reason, instead of leaving it verifying for ever.
    verifying_since = models.DateTimeField(null=True, blank=True, help_text="When a move began verifying.")
    verify_attempts = models.IntegerField(default=0, help_text="Tries of a move's verification that did not settle.")
    verify_detail = models.TextField(blank=True, help_text="Why a move's new copy has not verified yet, in words.")
    source_deletion = models.ForeignKey(
        "actions.DeletionJob",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="+",
        help_text="The two-phase deletion that frees a move's source copy.",
    )
    source_outcome = models.TextField(blank=True, help_text="What became of a move's source copy, in words.")

    class Meta:
        ordering = ["-requested_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=~Q(reason=""), name="promotionjob_has_reason"),
            models.CheckConstraint(
                condition=Q(bytes_done__gte=0) & Q(bytes_done__lte=models.F("bytes_total")),
                name="promotionjob_bytes_done_in_range",
            ),
            models.CheckConstraint(
                condition=~Q(state=JobState.FAILED) | ~Q(error=""), name="promotionjob_failed_has_error"
            ),
            # One open promotion of a copy to the same place at a time: a second click is refused, not doubled.
            models.UniqueConstraint(
                fields=["source_copy", "target_location", "target_storage_class"],
                condition=Q(state__in=OPEN_STATES),
                name="promotionjob_one_open_per_target",
            ),
        ]
        indexes = [
            models.Index(fields=["state", "next_poll_at"], name="promotionjob_due"),
            models.Index(fields=["checkpoint", "-requested_at"], name="promotionjob_checkpoint"),
        ]

    def __str__(self) -> str:
        return f"{self.get_direction_display().lower()} {self.pk} of checkpoint {self.checkpoint_id} ({self.state})"

    @property
    def is_move(self) -> bool:
        return self.direction != Direction.PROMOTE

    @property
    def open(self) -> bool:
        return self.state in OPEN_STATES

    @property
    def percent(self) -> int:
        if not self.bytes_total:
            return 100 if self.state == JobState.COMPLETED else 0
        return min(100, int(self.bytes_done * 100 // self.bytes_total))


class PromotionItem(models.Model):
    """One file of a promotion, frozen when it was requested: where it comes from and where it goes."""

    job = models.ForeignKey(PromotionJob, on_delete=models.CASCADE, related_name="items")
    shard_file = models.ForeignKey("catalog.ShardFile", on_delete=models.SET_NULL, null=True, related_name="+")
    path = models.TextField(help_text="Relative to the location root: the same at the source and the target.")
    source_key = models.TextField(help_text="The key in the source bucket, or the path on the source host.")
    target_key = models.TextField(help_text="The key in the target bucket, or the absolute path on the target host.")
    size = models.BigIntegerField()
    etag = models.CharField(max_length=200, blank=True)
    version_id = models.CharField(max_length=1024, blank=True)
    sha256 = models.CharField(max_length=64, blank=True, help_text="The catalog's sha256 of the file, when known.")
    source_storage_class = models.CharField(max_length=32, blank=True)
    state = models.CharField(max_length=10, choices=ItemState.choices, default=ItemState.PENDING)
    detail = models.TextField(blank=True)
    restore_requested_at = models.DateTimeField(null=True, blank=True)
    done_at = models.DateTimeField(null=True, blank=True)
    verified_at = models.DateTimeField(null=True, blank=True, help_text="A move's new object checked out.")
    upload_id = models.CharField(
        max_length=1024, blank=True, help_text="An offload's multipart upload, started by the server for the agent."
    )
    part_size = models.BigIntegerField(default=0, help_text="The part size of that upload (0: none).")

    class Meta:
        ordering = ["job", "path"]
        constraints = [
            models.UniqueConstraint(fields=["job", "path"], name="promotionitem_unique_per_job"),
            models.CheckConstraint(condition=Q(size__gte=0), name="promotionitem_size_not_negative"),
        ]
        indexes = [models.Index(fields=["job", "state"], name="promotionitem_job_state")]

    def __str__(self) -> str:
        return f"{self.path} ({self.state})"
