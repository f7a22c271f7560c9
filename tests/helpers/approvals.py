"""For tests of changes that wait for a second person: named people with roles, and approving what waits."""

from __future__ import annotations

from approvals import services
from approvals.choices import ChangeState
from approvals.models import ChangeRequest
from audit.actor import Actor
from audit.choices import EventSource


def person(django_user_model, name: str, *roles: str) -> Actor:
    """A new person ``name`` holding ``roles``, as an Actor of the web UI."""
    from tests.conftest import give_roles

    user = django_user_model.objects.create_user(username=name)
    give_roles(user, *roles)
    return Actor.person(user, EventSource.UI)


def approve_waiting(target_id: int, *, by: Actor, target_type: str = "retention_policy") -> list[ChangeRequest]:
    """Approve every change request waiting on the target, oldest first, as ``by``."""
    waiting = ChangeRequest.objects.filter(
        target_type=target_type, target_id=target_id, state=ChangeState.AWAITING_APPROVAL
    ).order_by("pk")
    return [services.approve_change(change=c, actor=by) for c in waiting]
