"""The approvals inbox: everything waiting for a second person, deletions and changes that can delete, in one list.

Deletions come from ``actions`` and change requests from ``approvals``; this page sits above both. A
person sees what they may see (team scoping), and the buttons they may use: an approver sees Approve and
Reject on what someone else asked for; the person who asked sees that it waits for someone else.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.urls import reverse

from access.roles import Role, has_role
from access.scoping import restrict
from actions.models import DeletionJob, DeletionState
from approvals.selectors import awaiting, view_of

SHOWN = 200  # of each kind; the counts are of all of them


@login_required
def inbox(request):
    user = request.user
    deletions = restrict(
        DeletionJob.objects.filter(state=DeletionState.AWAITING_APPROVAL).select_related(
            "checkpoint__run__team", "orphan_location"
        ),
        user,
    ).order_by("requested_at", "pk")
    changes = awaiting(user)
    return render(
        request,
        "approvals/inbox.html",
        {
            "deletions": list(deletions[:SHOWN]),
            "deletion_count": deletions.count(),
            "changes": [view_of(c, user) for c in changes[:SHOWN]],
            "change_count": changes.count(),
            "is_approver": has_role(user, Role.APPROVER),
            "shown": SHOWN,
            "back": reverse("approvals:inbox"),
        },
    )
