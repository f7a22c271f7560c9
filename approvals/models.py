"""A change that can delete, waiting for a second person: who asked, what exactly, and who decided."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from approvals.choices import ChangeState


class ChangeRequest(models.Model):
    """One proposed change to one target (a retention policy, ...), applied only when another person approves it.

    ``change`` holds the fields it changes, as ``{"before": {...}, "after": {...}}``: ``before`` is what the
    requester saw, and the approval is refused when the target no longer has those values (someone changed
    it since, so the approver would be approving something other than what is shown). The app that owns
    the target registers how to apply each ``kind`` (``approvals.registry``). Written only by
    ``approvals.services``, which audits every step.
    """

    kind = models.CharField(max_length=80)
    target_type = models.CharField(max_length=60)
    target_id = models.BigIntegerField()
    target_label = models.CharField(max_length=500)
    change = models.JSONField()
    reason = models.TextField(blank=True)
    state = models.CharField(max_length=20, choices=ChangeState.choices, default=ChangeState.AWAITING_APPROVAL)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    requested_label = models.CharField(max_length=200)
    requested_at = models.DateTimeField()
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    decided_label = models.CharField(max_length=200, blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_note = models.TextField(blank=True, help_text="Why it was rejected, cancelled or expired.")

    class Meta:
        ordering = ["-requested_at", "-pk"]
        indexes = [models.Index(fields=["target_type", "target_id", "state"], name="changerequest_target")]
        constraints = [
            models.CheckConstraint(
                condition=Q(state=ChangeState.AWAITING_APPROVAL, decided_at__isnull=True)
                | (~Q(state=ChangeState.AWAITING_APPROVAL) & Q(decided_at__isnull=False)),
                name="changerequest_decided_when_not_awaiting",
            ),
            models.CheckConstraint(condition=~Q(requested_label=""), name="changerequest_has_requester"),
        ]

    def __str__(self) -> str:
        return f"change request {self.pk}: {self.kind} of {self.target_label}"

    @property
    def awaiting(self) -> bool:
        return self.state == ChangeState.AWAITING_APPROVAL
