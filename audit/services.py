"""Writing the append-only audit trail. Every action calls ``audit`` (or ``audit_record``) in its own transaction."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from audit.actor import Actor
from audit.models import AuditChainHead, AuditEvent
from audit.selectors import REFUSED_TASK
from ckptfleet.celery import task

GENESIS = "0" * 64
# Events after which the chain is anchored at once (after the commit), not at the next periodic anchor: removing them
# (and rewinding the head) would otherwise go unseen until then, CKPTFLEET_AUDIT_ANCHOR_MINUTES (issue 26). These are
# the ones an intruder would most want gone: a hold placed, extended or released, a deletion scheduled, approved,
# executed, failed, purged or restored.
ANCHOR_AFTER = ("hold.", "deletion.")
# Events written before the chain was keyed; anyone could recompute these, so only what follows them is keyed.
UNKEYED = "sha256"
KEYED_PREFIX = "hmac-sha256:"


class UnknownAuditKey(Exception):
    """An event or anchor names a key that is neither the current audit key nor in the keyring."""

    def __init__(self, key_id: str) -> None:
        super().__init__(key_id)
        self.key_id = key_id


def current_alg() -> str:
    """What new events are hashed with: HMAC-SHA256 under the current key, named by its id (never the key)."""
    return f"{KEYED_PREFIX}{settings.AUDIT_KEY_ID}"


def audit_key(key_id: str) -> bytes:
    """The audit key with this id, from the current key or the keyring; raises UnknownAuditKey."""
    key = settings.AUDIT_KEYS.get(key_id)
    if key is None:
        raise UnknownAuditKey(key_id)
    return key.encode()


def event_hash(prev_hash: str, fields: dict[str, Any], alg: str) -> str:
    """The hash of an event with these fields after ``prev_hash``, made the way ``alg`` names.

    A keyed event's hash covers its ``alg`` too, so nobody can relabel it as unkeyed and recompute it."""
    if alg.startswith(KEYED_PREFIX):
        body = json.dumps({**fields, "alg": alg}, sort_keys=True, separators=(",", ":"), default=str)
        key = audit_key(alg.removeprefix(KEYED_PREFIX))
        return hmac.new(key, f"{prev_hash}\n{body}".encode(), hashlib.sha256).hexdigest()
    if alg == UNKEYED:
        body = json.dumps(fields, sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(f"{prev_hash}\n{body}".encode()).hexdigest()
    raise UnknownAuditKey(alg)


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
    head, _ = AuditChainHead.objects.select_for_update(of=("self",)).get_or_create(
        pk=1, defaults={"last_hash": GENESIS}
    )
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
    event.alg = current_alg()
    event.hash = event_hash(head.last_hash, event_fields(event), event.alg)
    event.save(force_insert=True)
    AuditChainHead.objects.filter(pk=1).update(last_hash=event.hash, count=head.count + 1)
    if action.startswith(ANCHOR_AFTER):
        anchor_after_commit()
    return event


def anchor_after_commit() -> None:
    """Anchor the chain once this transaction commits (once however many events it wrote); robust: a broker that is
    down costs this anchor, never the action, which has committed (the periodic anchor follows anyway)."""
    if any(entry[1] is _anchor_now for entry in connection.run_on_commit):
        return
    transaction.on_commit(_anchor_now, robust=True)


def _anchor_now() -> None:
    # By name: the task module imports the verifier, which imports this one (no import circle).
    task("audit.tasks.anchor_audit_chain").delay()


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


def audit_verify(on_event: Callable[[int, AuditEvent], None] | None = None) -> tuple[int, AuditEvent | None, str]:
    """Walk the chain oldest first. Returns (events checked, first broken event or None, why).

    ``on_event(position, event)`` sees each event that checked out, position 1 being the oldest: the anchors are
    compared there (audit.verify)."""
    prev = GENESIS
    checked = 0
    keyed = False
    for event in AuditEvent.objects.order_by("id").iterator(chunk_size=2000):
        if event.prev_hash != prev:
            return checked, event, "its prev_hash does not match the hash of the event before it"
        if keyed and event.alg == UNKEYED:
            return checked, event, "it is hashed without the key after keyed events (rewritten by someone without it)"
        try:
            expected = event_hash(prev, event_fields(event), event.alg)
        except UnknownAuditKey as exc:
            return (
                checked,
                event,
                (
                    f"it names audit key {exc.key_id!r}, which is neither the current key nor in the keyring "
                    "(CKPTFLEET_AUDIT_KEYRING_FILE)"
                ),
            )
        if expected != event.hash:
            return checked, event, "its content does not match its hash (edited after it was written)"
        keyed = keyed or event.alg != UNKEYED
        prev = event.hash
        checked += 1
        if on_event is not None:
            on_event(checked, event)
    head = AuditChainHead.objects.filter(pk=1).first()
    if head and head.last_hash != prev:
        return checked, None, "the newest events are missing (the chain head does not match the last event)"
    if head and head.count != checked:
        return checked, None, f"the chain head counts {head.count:,} events but the chain has {checked:,}"
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
