"""Reads of approvals: the change requests a person may see, and each in words."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Q, QuerySet
from django.utils import timezone

from access.roles import Role, has_role
from approvals.choices import ChangeState
from approvals.models import ChangeRequest
from approvals.registry import kind_of, kinds
from approvals.services import expires_at, same_person
from audit.actor import Actor


def restrict_changes(queryset: QuerySet[ChangeRequest], user) -> QuerySet[ChangeRequest]:
    """Change requests of targets ``user`` may see (each kind's owner says which: team scoping)."""
    visible = Q()
    for kind in kinds().values():
        ids = kind.visible_ids(user)
        visible |= Q(kind=kind.name) if ids is None else Q(kind=kind.name, target_id__in=ids)
    return queryset.filter(visible) if visible else queryset.none()


def awaiting(user) -> QuerySet[ChangeRequest]:
    return restrict_changes(ChangeRequest.objects.filter(state=ChangeState.AWAITING_APPROVAL), user).order_by(
        "requested_at", "pk"
    )


def for_target(target_type: str, target_id: int, user, *, limit: int = 20) -> list[ChangeRequest]:
    """The newest requests about one target (awaiting first)."""
    rows = ChangeRequest.objects.filter(target_type=target_type, target_id=target_id)
    rows = restrict_changes(rows, user).order_by("-requested_at", "-pk")[:limit]
    return sorted(rows, key=lambda c: not c.awaiting)


@dataclass(frozen=True)
class ChangeView:
    """A request as a page shows it: the change in words, where its target is, and what this person may do."""

    change: ChangeRequest
    lines: tuple[str, ...]
    kind_label: str
    target_url: str
    may_decide: bool  # approve or reject: an approver who did not ask for it
    may_cancel: bool  # the person who asked (or an admin)
    expires_at: datetime
    expired: bool  # past its expiry, not yet marked (an approval marks it and is refused)


def view_of(change: ChangeRequest, user) -> ChangeView:
    kind = kind_of(change.kind)
    actor_is_requester = same_person(
        Actor(kind="user", label=user.get_username(), source="ui", user=user),
        change.requested_by_id,
        change.requested_label,
    )
    ends = expires_at(change)
    expired = change.awaiting and ends <= timezone.now()
    return ChangeView(
        change=change,
        expires_at=ends,
        expired=expired,
        lines=tuple(kind.describe(change.change)),
        kind_label=kind.label,
        target_url=kind.target_url(change.target_id),
        may_decide=change.awaiting and not expired and has_role(user, Role.APPROVER) and not actor_is_requester,
        may_cancel=change.awaiting and (actor_is_requester or has_role(user, Role.ADMIN)),
    )
