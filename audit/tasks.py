"""Periodic work of the audit trail, scheduled by beat (ckptfleet/celery.py): anchoring the chain, verifying it."""

from __future__ import annotations

from celery import shared_task

from audit.anchors import anchor_write
from audit.choices import VerificationTrigger
from audit.verify import verify_and_record


@shared_task(acks_late=True)
def anchor_audit_chain() -> list[int]:
    """Write the chain head to every configured anchor store; running it twice writes two true anchors."""
    return [anchor.pk for anchor in anchor_write()]


@shared_task(acks_late=True)
def verify_audit_scheduled() -> dict:
    """Verify the chain against its anchors and keep the result; read-only but for the result it records."""
    result = verify_and_record(trigger=VerificationTrigger.SCHEDULE)
    return {"verification": result.pk, "ok": result.ok, "events": result.events_checked}
