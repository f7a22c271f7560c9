"""Retention policies: keep rules for a team's runs or one run, applied by a periodic task as proposals."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from retention.rules import KeepRules


class RetentionPolicy(models.Model):
    """Keep rules for every run of a team, or for one run (which then wins over its team's policy).

    Pinned and held checkpoints and each run's newest restorable checkpoint are always kept, whatever
    the rules say. A policy never deletes: its task schedules deletions, which wait for a second
    person's approval and the grace period like any other (``actions.services.schedule_deletion``).
    Edited only through ``retention.services``, which audits every change.
    """

    name = models.CharField(max_length=200)
    team = models.OneToOneField(
        "catalog.Team", on_delete=models.PROTECT, null=True, blank=True, related_name="retention_policy"
    )
    run = models.OneToOneField(
        "catalog.Run", on_delete=models.PROTECT, null=True, blank=True, related_name="retention_policy"
    )
    keep_last = models.PositiveIntegerField(default=5, help_text="Keep the N newest stepped checkpoints; 0: off.")
    keep_every = models.PositiveBigIntegerField(
        default=0, help_text="Keep checkpoints whose step is a multiple of M; 0: off."
    )
    keep_milestones = models.BooleanField(default=True)
    keep_critical = models.BooleanField(default=True)
    keep_stepless = models.BooleanField(default=True, help_text="Keep checkpoints saved without a step (exports).")
    enabled = models.BooleanField(default=False, help_text="Only enabled policies propose deletions.")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    created_label = models.CharField(max_length=200)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    last_proposed_at = models.DateTimeField(null=True, blank=True)
    last_proposed_count = models.IntegerField(null=True, blank=True)
    # The retention lock (``retention.services.policy_lock``). Until ``lock_cooling_off_ends_at`` a different
    # approver may still unlock it; from then on it can only be made stricter (``retention.rules.loosenings``),
    # never unlocked or deleted, which the database enforces too (the triggers of retention migration 0003).
    # The end is fixed when it is locked, so that changing the setting later moves no lock.
    locked_at = models.DateTimeField(null=True, blank=True)
    locked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    locked_label = models.CharField(max_length=200, blank=True)
    lock_cooling_off_ends_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name", "pk"]
        verbose_name_plural = "retention policies"
        constraints = [
            models.CheckConstraint(
                condition=(Q(team__isnull=False) & Q(run__isnull=True)) | (Q(team__isnull=True) & Q(run__isnull=False)),
                name="retentionpolicy_one_scope",
            ),
            models.CheckConstraint(condition=~Q(name=""), name="retentionpolicy_has_name"),
            models.CheckConstraint(
                condition=Q(locked_at__isnull=True, lock_cooling_off_ends_at__isnull=True)
                | Q(locked_at__isnull=False, lock_cooling_off_ends_at__gte=F("locked_at")),
                name="retentionpolicy_lock_has_cooling_off",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.scope_label})"

    @property
    def scope_label(self) -> str:
        if self.run_id:
            return f"run {self.run}"
        return f"team {self.team}"

    @property
    def rules(self) -> KeepRules:
        return KeepRules(
            keep_last=self.keep_last,
            keep_every=self.keep_every,
            keep_milestones=self.keep_milestones,
            keep_critical=self.keep_critical,
            keep_stepless=self.keep_stepless,
        )

    @property
    def locked(self) -> bool:
        return self.locked_at is not None

    def lock_binding(self, now=None) -> bool:
        """Locked and past its cooling-off: no unlock, no delete, only stricter edits."""
        return self.lock_cooling_off_ends_at is not None and self.lock_cooling_off_ends_at <= (now or timezone.now())

    @property
    def lock_state(self) -> str:
        """ "unlocked", "cooling_off" (locked, can still be unlocked) or "binding"."""
        if not self.locked:
            return "unlocked"
        return "binding" if self.lock_binding() else "cooling_off"

    @property
    def origin(self) -> str:
        """What the deletions it proposes carry as their origin."""
        return f"policy:{self.pk}"

    def snapshot(self) -> dict:
        """The audited state: before and after of every change."""
        return {
            "name": self.name,
            "team_id": self.team_id,
            "run_id": self.run_id,
            "keep_last": self.keep_last,
            "keep_every": self.keep_every,
            "keep_milestones": self.keep_milestones,
            "keep_critical": self.keep_critical,
            "keep_stepless": self.keep_stepless,
            "enabled": self.enabled,
            "locked_at": self.locked_at.isoformat() if self.locked_at else None,
            "lock_cooling_off_ends_at": (
                self.lock_cooling_off_ends_at.isoformat() if self.lock_cooling_off_ends_at else None
            ),
        }


class TieringAction(models.TextChoices):
    MOVE = "move", "Move checkpoints to a colder storage class"
    FREE_HOST = "free_host", "Free host copies that have a verified object copy"


class TieringPolicy(models.Model):
    """A tiering rule that acts: on its schedule it asks for moves (``promotion.moves.request_move``) or
    schedules the deletion of host copies (``actions.services.schedule_deletion``), never doing either itself.

    "Checkpoints of runs ended 7 days ago, except milestones and the newest complete one, go to Glacier
    Instant Retrieval in bucket X" is ``action=move``, ``run_ended_days=7``, ``target_*``. "NVMe copies older
    than 24 h that have a verified object copy are freed" is ``action=free_host``, ``min_age_hours=24``.
    Held, pinned, disputed and leased checkpoints and each run's newest complete checkpoint are never acted on.
    Scope: one team, one run, or (neither) every team. Edited only through ``retention.tiering_policies``.
    """

    name = models.CharField(max_length=200)
    team = models.ForeignKey("catalog.Team", on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    run = models.ForeignKey("catalog.Run", on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    action = models.CharField(max_length=12, choices=TieringAction.choices, default=TieringAction.MOVE)
    source_tier = models.CharField(
        max_length=32, blank=True, help_text="Only copies on this tier (nvme, pfs, object, ...); empty: any."
    )
    target_location = models.ForeignKey(
        "fleet.StorageLocation", on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    target_storage_class = models.CharField(max_length=32, blank=True)
    run_ended_days = models.PositiveIntegerField(
        null=True, blank=True, help_text="Only runs ended (finished, failed, abandoned) at least N days ago."
    )
    min_age_hours = models.PositiveIntegerField(default=0, help_text="Only copies whose newest file is this old.")
    except_milestones = models.BooleanField(default=True)
    except_critical = models.BooleanField(default=True)
    enabled = models.BooleanField(default=False)
    every_hours = models.PositiveIntegerField(default=24)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    created_label = models.CharField(max_length=200)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    last_run_at = models.DateTimeField(null=True, blank=True)
    last_run_summary = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["name", "pk"]
        verbose_name_plural = "tiering policies"
        constraints = [
            models.CheckConstraint(condition=~Q(name=""), name="tieringpolicy_has_name"),
            models.CheckConstraint(
                condition=Q(team__isnull=True) | Q(run__isnull=True), name="tieringpolicy_one_scope"
            ),
            models.CheckConstraint(
                condition=~Q(action="move") | Q(target_location__isnull=False), name="tieringpolicy_move_has_target"
            ),
            models.CheckConstraint(
                condition=Q(every_hours__gte=1) & Q(every_hours__lte=24 * 31), name="tieringpolicy_every_in_range"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.scope_label})"

    @property
    def scope_label(self) -> str:
        if self.run_id:
            return f"run {self.run}"
        if self.team_id:
            return f"team {self.team}"
        return "every team"

    @property
    def origin(self) -> str:
        """What the deletions and moves it asks for carry as their origin (a policy's: a second person approves)."""
        return f"policy:tiering-{self.pk}"

    def snapshot(self) -> dict:
        return {
            "name": self.name,
            "team_id": self.team_id,
            "run_id": self.run_id,
            "action": self.action,
            "source_tier": self.source_tier,
            "target_location_id": self.target_location_id,
            "target_storage_class": self.target_storage_class,
            "run_ended_days": self.run_ended_days,
            "min_age_hours": self.min_age_hours,
            "except_milestones": self.except_milestones,
            "except_critical": self.except_critical,
            "enabled": self.enabled,
            "every_hours": self.every_hours,
        }

    def describe(self) -> str:
        parts = []
        if self.run_ended_days is not None:
            parts.append(f"runs ended {self.run_ended_days} d ago or more")
        if self.min_age_hours:
            parts.append(f"copies older than {self.min_age_hours} h")
        if self.source_tier:
            from fleet.choices import Tier

            parts.append(f"on {Tier(self.source_tier).label if self.source_tier in Tier.values else self.source_tier}")
        excepts = [w for w, on in (("milestones", self.except_milestones), ("critical", self.except_critical)) if on]
        excepts.append("the newest complete checkpoint")
        what = ", ".join(parts) or "every checkpoint"
        if self.action == TieringAction.MOVE:
            target = f"{self.target_storage_class or 'its class'} in {self.target_location}"
            return f"{what}, except {', '.join(excepts)}: move to {target}"
        return f"{what}, except {', '.join(excepts)}: free host copies that have a verified object copy"
