"""Writes of approvals: ask for a change, and approve, reject or cancel it; each audited in its own transaction.

The two-person rule, as for deletions (``actions.services.approve``): a change that can delete (see each
owner's rule, e.g. ``retention.services.deletes_more``) is not applied by the person who asks for it.
It waits here until a *different* person with the approver role approves it; the approval applies it in
the same transaction, after the owner has checked it afresh (the target may have changed, or been
locked, since it was asked for). The apply event names both people: its actor is the approver, its
``after`` carries ``requested_by`` and ``approved_by``, and its reason says both.

Only people ask for and decide changes. Workers, beat and management commands act for the product and
are not asked for a second person (as they need no role); the owner decides whether they may change
a target at all.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from access.refusals import Refusal, note_refusal
from access.roles import Role, has_role, require_role
from approvals.choices import ChangeState
from approvals.models import ChangeRequest
from approvals.registry import kind_of
from audit.actor import Actor
from audit.choices import ActorKind
from audit.services import audit
from ckptfleet.errors import DomainError, PermissionRefused

MAX_REASON = 2000


def same_person(actor: Actor, user_id: int | None, label: str) -> bool:
    """Whether ``actor`` is the person with ``user_id`` (or, without one, the same label)."""
    if actor.user is not None and user_id is not None and getattr(actor.user, "pk", None) == user_id:
        return True
    return actor.label == label


def _reason(value, *, required: bool, what: str = "a reason") -> str:
    if value is None:
        value = ""
    if not isinstance(value, str):
        raise DomainError(f"{what} must be text")
    text = value.strip()
    if required and not text:
        raise DomainError(f"{what} is required", code="required")
    if len(text) > MAX_REASON:
        raise DomainError(f"{what} is longer than {MAX_REASON} characters")
    return text


def _person(actor: Actor, doing: str) -> None:
    if actor.kind != ActorKind.USER or actor.user is None:
        raise PermissionRefused(f"{doing} is for a signed-in person")


def _audit(change: ChangeRequest, actor: Actor, action: str, *, reason: str = "", request_id: str = "", **extra):
    audit(
        actor,
        action,
        target_type=change.target_type,
        target_id=change.target_id,
        target_label=change.target_label,
        reason=reason,
        before=change.change.get("before"),
        after={**(change.change.get("after") or {}), "change_request": change.pk, **extra},
        request_id=(request_id or "")[:64],
    )


def expires_at(change: ChangeRequest):
    return change.requested_at + timedelta(days=settings.CHANGE_REQUEST_EXPIRY_DAYS)


def request_change(
    *,
    kind: str,
    target_id: int,
    target_label: str,
    before: dict,
    after: dict,
    actor: Actor,
    reason: str = "",
    request_id: str = "",
) -> ChangeRequest:
    """File a change for a second person, with one audit event; call it inside the owner's transaction,
    with the target locked, so that ``before`` is what the target holds."""
    if not connection.in_atomic_block:
        raise RuntimeError("request_change must be called inside the transaction that read the target")
    registered = kind_of(kind)
    _person(actor, "asking for a change")
    if not after or set(after) != set(before):
        raise DomainError("a change request names each field it changes, before and after")
    change = ChangeRequest.objects.create(
        kind=kind,
        target_type=registered.target_type,
        target_id=target_id,
        target_label=target_label[:500],
        change={"before": before, "after": after},
        reason=_reason(reason, required=False),
        requested_by=actor.user,
        requested_label=actor.label,
        requested_at=timezone.now(),
    )
    _audit(change, actor, "change_request.create", reason=change.reason, request_id=request_id)
    return change


def _own(actor: Actor, change: ChangeRequest) -> str:
    return (
        f"{actor.label} asked for change request {change.pk}, so another person must approve it (separation of duties)"
    )


def _refuse_own(actor: Actor, doing: str, change: ChangeRequest) -> None:
    """Separation of duties: audit the refusal (outside the transaction, like a missing role) and raise."""
    why = _own(actor, change)
    note_refusal(
        Refusal(
            user=actor.user,
            doing=doing,
            why=why,
            source=actor.source,
            target_type=change.target_type,
            target_id=change.target_id,
            target_label=change.target_label,
        )
    )
    raise PermissionRefused(why)


def _lock(change: ChangeRequest) -> ChangeRequest:
    return ChangeRequest.objects.select_for_update(of=("self",)).get(pk=change.pk)


def _not_awaiting(change: ChangeRequest) -> DomainError:
    return DomainError(
        f"change request {change.pk} is {change.get_state_display().lower()}, not awaiting approval",
        code="not_awaiting_approval",
    )


def _expire_if_due(change: ChangeRequest) -> None:
    """An old request is not approved: what it was asked for may no longer be what anyone wants. Marked
    expired (audited, by the product) in its own transaction, then refused."""
    now = timezone.now()
    if not change.awaiting or expires_at(change) > now:
        return
    with transaction.atomic():
        current = _lock(change)
        if current.awaiting:
            current.state = ChangeState.EXPIRED
            current.decided_at = now
            current.decided_label = "expiry"
            current.decision_note = f"not decided within {settings.CHANGE_REQUEST_EXPIRY_DAYS} days"
            current.save(update_fields=["state", "decided_at", "decided_label", "decision_note"])
            _audit(
                current, Actor.system("change request expiry"), "change_request.expire", reason=current.decision_note
            )
    raise DomainError(
        f"change request {change.pk} expired: it was not decided within {settings.CHANGE_REQUEST_EXPIRY_DAYS} "
        "days; ask again if it is still wanted",
        code="expired",
    )


def _describe_people(change: ChangeRequest, approver: Actor) -> str:
    why = f": {change.reason}" if change.reason else ""
    return f"change request {change.pk}, requested by {change.requested_label}{why}; approved by {approver.label}"


def approve_change(*, change: ChangeRequest, actor: Actor, request_id: str = "") -> ChangeRequest:
    """Approve and apply a change: a person with the approver role, never the one who asked for it."""
    _person(actor, "approving a change")
    require_role(
        actor.user,
        Role.APPROVER,
        doing="approving a change",
        source=actor.source,
        target_type=change.target_type,
        target_id=change.target_id,
        target_label=change.target_label,
    )
    if change.awaiting and same_person(actor, change.requested_by_id, change.requested_label):
        _refuse_own(actor, "approving a change", change)
    _expire_if_due(change)
    kind = kind_of(change.kind)
    with transaction.atomic():
        current = _lock(change)
        if not current.awaiting:
            raise _not_awaiting(current)
        if same_person(actor, current.requested_by_id, current.requested_label):
            raise PermissionRefused(_own(actor, current))
        applied = kind.apply(current, actor)
        now = timezone.now()
        current.state = ChangeState.APPLIED
        current.decided_by = actor.user
        current.decided_label = actor.label
        current.decided_at = now
        current.save(update_fields=["state", "decided_by", "decided_label", "decided_at"])
        audit(
            actor,
            applied.action,
            target_type=current.target_type,
            target_id=current.target_id,
            target_label=applied.target_label,
            reason=_describe_people(current, actor),
            before=applied.before,
            after={
                **applied.after,
                "change_request": current.pk,
                "requested_by": current.requested_label,
                "approved_by": actor.label,
            },
            request_id=(request_id or "")[:64],
        )
    return current


def reject_change(*, change: ChangeRequest, actor: Actor, reason: str, request_id: str = "") -> ChangeRequest:
    """Turn a change down, with a reason: a person with the approver role other than the requester (who
    cancels instead)."""
    reason = _reason(reason, required=True)
    _person(actor, "rejecting a change")
    require_role(
        actor.user,
        Role.APPROVER,
        doing="rejecting a change",
        source=actor.source,
        target_type=change.target_type,
        target_id=change.target_id,
        target_label=change.target_label,
    )
    if change.awaiting and same_person(actor, change.requested_by_id, change.requested_label):
        raise DomainError("this is your own change request: cancel it instead", code="own_request")
    return _decide(change, actor, ChangeState.REJECTED, "change_request.reject", reason, request_id)


def cancel_change(*, change: ChangeRequest, actor: Actor, reason: str = "", request_id: str = "") -> ChangeRequest:
    """Withdraw a change before it is decided: the person who asked for it, or an admin."""
    reason = _reason(reason, required=False)
    _person(actor, "cancelling a change")
    if not same_person(actor, change.requested_by_id, change.requested_label) and not has_role(actor.user, Role.ADMIN):
        raise PermissionRefused("only the person who asked for a change (or an admin) cancels it")
    return _decide(change, actor, ChangeState.CANCELLED, "change_request.cancel", reason, request_id)


def _decide(change: ChangeRequest, actor: Actor, state: str, action: str, reason: str, request_id: str):
    with transaction.atomic():
        current = _lock(change)
        if not current.awaiting:
            raise _not_awaiting(current)
        current.state = state
        current.decided_by = actor.user
        current.decided_label = actor.label
        current.decided_at = timezone.now()
        current.decision_note = reason
        current.save(update_fields=["state", "decided_by", "decided_label", "decided_at", "decision_note"])
        _audit(
            current,
            actor,
            action,
            reason=reason,
            request_id=request_id,
            requested_by=current.requested_label,
            decided_by=actor.label,
        )
    return current
