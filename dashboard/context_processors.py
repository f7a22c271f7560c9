"""What every page's header needs: the number beside "Approvals" in the navigation.

Only an approver sees a number (only they can act on what waits); it is counted at most once per request,
and only when a template reads it.
"""

from __future__ import annotations

from django.utils.functional import SimpleLazyObject

from access.roles import Role, has_role
from access.scoping import restrict
from actions.models import DeletionJob, DeletionState
from approvals.selectors import awaiting


def waiting_for_approval(user) -> int:
    """Deletions and change requests awaiting a second person, of those this person may see."""
    deletions = restrict(DeletionJob.objects.filter(state=DeletionState.AWAITING_APPROVAL), user).count()
    return deletions + awaiting(user).count()


def approvals(request) -> dict:
    def count() -> int:
        cached = getattr(request, "_approvals_waiting", None)
        if cached is None:
            user = getattr(request, "user", None)
            ok = user is not None and user.is_authenticated and has_role(user, Role.APPROVER)
            cached = waiting_for_approval(user) if ok else 0
            request._approvals_waiting = cached
        return cached

    return {"approvals_waiting": SimpleLazyObject(count)}
