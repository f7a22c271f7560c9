"""Writing the append-only audit trail. Every action calls ``audit`` (or ``audit_record``) in its own transaction."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from audit.actor import Actor
from audit.models import AuditChainHead, AuditEvent
from audit.selectors import REFUSED_TASK

GENESIS = "0" * 64


def _digest(prev_hash: str, fields: dict[str, Any]) -> str:
    body = json.dumps(fields, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(f"{prev_hash}\n{body}".encode()).hexdigest()


def event_fields(event: AuditEvent) -> dict[str, Any]:
    """The fields a hash covers; ``verify_audit`` recomputes it from the stored row."""
    return {
        "at": event.at.isoformat(),
        "actor_kind": event.actor_kind,
        "actor_id": event.actor_id,
        "actor_label": event.actor_label,
        "source": event.source,
        "action": event.action,
        "target_type": event.target_type,
        "target_id": event.target_id,
        "target_label": event.target_label,
        "reason": event.reason,
        "case_ref": event.case_ref,
        "before": event.before,
        "after": event.after,
        "request_id": event.request_id,
    }


def audit_record(
    *,
    actor_kind: str,
    actor_label: str,
    source: str,
    action: str,
    target_type: str,
    target_id: int | None = None,
    target_label: str = "",
    actor=None,
    reason: str = "",
    case_ref: str = "",
    before: dict | None = None,
    after: dict | None = None,
    request_id: str = "",
) -> AuditEvent:
    """Append one event to the chain. Must run inside the transaction that makes the change."""
    if not connection.in_atomic_block:
        raise RuntimeError("audit_record must be called inside the transaction of the change it records")
    head, _ = AuditChainHead.objects.select_for_update().get_or_create(pk=1, defaults={"last_hash": GENESIS})
    event = AuditEvent(
        at=timezone.now(),
        actor_kind=actor_kind,
        actor=actor,
        actor_label=actor_label,
        source=source,
        action=action,
        target_type=target_type,
        target_id=target_id,
        target_label=target_label[:500],
        reason=reason,
        case_ref=case_ref,
        before=before,
        after=after,
        request_id=request_id,
        prev_hash=head.last_hash,
    )
    # JSON fields are hashed as they will read back from the database.
    event.before = json.loads(json.dumps(before, default=str)) if before is not None else None
    event.after = json.loads(json.dumps(after, default=str)) if after is not None else None
    event.hash = _digest(head.last_hash, event_fields(event))
    event.save(force_insert=True)
    AuditChainHead.objects.filter(pk=1).update(last_hash=event.hash, count=head.count + 1)
    return event


def audit(
    actor: Actor,
    action: str,
    *,
    target_type: str,
    target_id: int | None = None,
    target_label: str = "",
    reason: str = "",
    case_ref: str = "",
    before: dict | None = None,
    after: dict | None = None,
    request_id: str = "",
) -> AuditEvent:
    """Record that ``actor`` did ``action`` to the target: the one call every service makes."""
    return audit_record(
        actor_kind=actor.kind,
        actor=actor.user,
        actor_label=actor.label,
        source=actor.source,
        action=action,
        target_type=target_type,
        target_id=target_id,
        target_label=target_label,
        reason=reason,
        case_ref=case_ref,
        before=before,
        after=after,
        request_id=request_id,
    )


def audit_verify() -> tuple[int, AuditEvent | None, str]:
    """Walk the chain oldest first. Returns (events checked, first broken event or None, why)."""
    prev = GENESIS
    checked = 0
    for event in AuditEvent.objects.order_by("id").iterator(chunk_size=2000):
        if event.prev_hash != prev:
            return checked, event, "its prev_hash does not match the hash of the event before it"
        if _digest(prev, event_fields(event)) != event.hash:
            return checked, event, "its content does not match its hash (edited after it was written)"
        prev = event.hash
        checked += 1
    head = AuditChainHead.objects.filter(pk=1).first()
    if head and head.last_hash != prev:
        return checked, None, "the newest events are missing (the chain head does not match the last event)"
    return checked, None, ""


def audit_refused_delivery(*, task_name: str, task_id: str, deliveries: int) -> AuditEvent:
    """Record that a task's message was refused after too many deliveries (ckptfleet.deliveries).

    The refusal changes nothing else, so the event is its own transaction."""
    with transaction.atomic():
        return audit(
            Actor.system("delivery guard"),
            REFUSED_TASK,
            target_type="task",
            target_label=f"{task_name}[{task_id}]",
            reason=(
                f"delivered {deliveries} times; each earlier run took its worker down, "
                "so the message was acknowledged without running"
            ),
            after={"task": task_name, "task_id": task_id, "deliveries": deliveries},
        )
