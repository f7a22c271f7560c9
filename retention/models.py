"""Retention policies: keep rules for a team's runs or one run, applied by a periodic task as proposals."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

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

    class Meta:
        ordering = ["name", "pk"]
        verbose_name_plural = "retention policies"
        constraints = [
            models.CheckConstraint(
                condition=(Q(team__isnull=False) & Q(run__isnull=True)) | (Q(team__isnull=True) & Q(run__isnull=False)),
                name="retentionpolicy_one_scope",
            ),
            models.CheckConstraint(condition=~Q(name=""), name="retentionpolicy_has_name"),
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
        }
