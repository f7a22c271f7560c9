"""Building audit chains for the audit tests: events as the product writes them, and as it wrote them before keys."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from audit.models import AuditChainHead, AuditEvent
from audit.services import GENESIS, UNKEYED, audit_record, event_fields, event_hash


def record(action: str = "test.action", **kwargs) -> AuditEvent:
    with transaction.atomic():
        return audit_record(
            actor_kind="system",
            actor_label="tests",
            source="command",
            action=action,
            target_type="host",
            target_id=1,
            target_label="gpu-a01",
            **kwargs,
        )


def record_unkeyed(action: str = "legacy.action") -> AuditEvent:
    """An event hashed with plain SHA-256, as every event was before the chain was keyed (audit 0002)."""
    with transaction.atomic():
        head, _ = AuditChainHead.objects.select_for_update().get_or_create(pk=1, defaults={"last_hash": GENESIS})
        event = AuditEvent(
            at=timezone.now(),
            actor_kind="system",
            actor_label="before keys",
            source="command",
            action=action,
            target_type="host",
            prev_hash=head.last_hash,
            alg=UNKEYED,
        )
        event.hash = event_hash(head.last_hash, event_fields(event), UNKEYED)
        event.save(force_insert=True)
        AuditChainHead.objects.filter(pk=1).update(last_hash=event.hash, count=head.count + 1)
        return event
