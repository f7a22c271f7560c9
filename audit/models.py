"""The audit trail's tables. They keep the names they had in catalog (``db_table``): the rows stayed where they
were when the models moved here, and the PostgreSQL triggers that make them append-only name those tables."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from audit.choices import ActorKind, AnchorOutcome, AnchorTarget, EventSource, VerificationTrigger


class AuditEventQuerySet(models.QuerySet):
    def update(self, **kwargs):
        raise PermissionError("audit events are append-only")

    def delete(self):
        raise PermissionError("audit events are append-only")


class AuditEvent(models.Model):
    """An append-only record of one action or job outcome: who, what, when, why, before and after.

    Each event carries the hash of the one before it, so a changed or removed event breaks the chain.
    """

    at = models.DateTimeField(db_index=True)
    actor_kind = models.CharField(max_length=8, choices=ActorKind.choices)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True)
    actor_label = models.CharField(max_length=200)
    source = models.CharField(max_length=8, choices=EventSource.choices)
    action = models.CharField(max_length=60, db_index=True)
    target_type = models.CharField(max_length=40)
    target_id = models.BigIntegerField(null=True, blank=True)
    target_label = models.CharField(max_length=500, blank=True)
    reason = models.TextField(blank=True)
    case_ref = models.CharField(max_length=200, blank=True)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    request_id = models.CharField(max_length=64, blank=True)
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64, unique=True)
    # How ``hash`` was made: "sha256" (events before the chain was keyed) or "hmac-sha256:<key id>".
    alg = models.CharField(max_length=40)

    objects = AuditEventQuerySet.as_manager()

    class Meta:
        db_table = "catalog_auditevent"
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["target_type", "target_id"], name="audit_target")]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor_label} {self.action} {self.target_label}"

    def save(self, *args, **kwargs):
        if self.pk is not None:
            raise PermissionError("audit events are append-only")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise PermissionError("audit events are append-only")


class AuditChainHead(models.Model):
    """A single row holding the newest audit hash; locking it serialises appends to the chain."""

    last_hash = models.CharField(max_length=64)
    count = models.BigIntegerField(default=0)

    class Meta:
        db_table = "catalog_auditchainhead"

    def __str__(self) -> str:
        return f"audit chain head after {self.count} events"


class AuditAnchor(models.Model):
    """One time the chain head was written outside the database (an anchor), or tried to be.

    The anchor itself, signed, lives in the file or the bucket; this row says where, so the verifier can tell an
    anchor that went missing from the outside store. The verifier trusts the outside copy, never this row alone.
    """

    at = models.DateTimeField(db_index=True)
    target = models.CharField(max_length=8, choices=AnchorTarget.choices)
    location = models.CharField(max_length=1000, blank=True)
    count = models.BigIntegerField()
    last_hash = models.CharField(max_length=64)
    outcome = models.CharField(max_length=8, choices=AnchorOutcome.choices)
    error = models.TextField(blank=True)
    retain_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.get_target_display()} anchor of {self.at:%Y-%m-%d %H:%M} at event {self.count}: {self.outcome}"


class AuditVerification(models.Model):
    """The result of one walk of the chain against its anchors: what the audit page, health and metrics report."""

    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(db_index=True)
    trigger = models.CharField(max_length=8, choices=VerificationTrigger.choices)
    ok = models.BooleanField()
    events_checked = models.BigIntegerField()
    anchors_checked = models.IntegerField()
    problem = models.TextField(blank=True)
    problems = models.IntegerField(default=0)

    class Meta:
        ordering = ["-finished_at", "-id"]

    def __str__(self) -> str:
        return f"audit verification of {self.finished_at:%Y-%m-%d %H:%M}: {'ok' if self.ok else 'FAILED'}"
