"""The approver's inbox in numbers: what awaits a second person, for the navigation's badge and the overview.

Deletions (of checkpoints, of copies, orphan clean-ups, and the sources of moves) come from ``actions``; change
requests (policies enabled or loosened, governance holds to release, soft-delete windows shortened) from
``approvals``. A person counts only what they may see (team scoping); "for you" is what this person may decide:
an approver, on what someone else asked for and they have not approved already.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from django.db.models import Count, Q, Sum

from access.roles import Role, has_role
from access.scoping import restrict
from actions.models import DeletionJob, DeletionScope, DeletionState
from approvals.registry import kind_of
from approvals.selectors import awaiting


@dataclass
class InboxRow:
    label: str
    count: int
    bytes: int | None = None


@dataclass
class Inbox:
    rows: list[InboxRow] = field(default_factory=list)
    total: int = 0
    for_you: int = 0  # what this person may approve or reject now
    is_approver: bool = False


def inbox_of(user) -> Inbox:
    """Counts of everything awaiting approval that ``user`` may see: three queries for deletions, one for changes."""
    if not getattr(user, "is_authenticated", False):
        return Inbox()
    approver = has_role(user, Role.APPROVER)
    waiting = restrict(DeletionJob.objects.filter(state=DeletionState.AWAITING_APPROVAL), user)
    move = Q(origin__startswith="move:")
    sums = waiting.aggregate(
        checkpoints=Count("pk", filter=~Q(scope=DeletionScope.ORPHANS) & ~move),
        checkpoint_bytes=Sum("bytes_total", filter=~Q(scope=DeletionScope.ORPHANS) & ~move),
        orphans=Count("pk", filter=Q(scope=DeletionScope.ORPHANS)),
        orphan_bytes=Sum("bytes_total", filter=Q(scope=DeletionScope.ORPHANS)),
        moves=Count("pk", filter=move),
        move_bytes=Sum("bytes_total", filter=move),
        for_you=Count(
            "pk",
            filter=~Q(requested_by_id=user.pk) & (Q(approved_by__isnull=True) | ~Q(approved_by_id=user.pk)),
        ),
    )
    changes = list(awaiting(user).values_list("kind", "requested_by_id"))
    by_kind = Counter(kind for kind, _ in changes)
    rows = [
        InboxRow("Checkpoint deletions", sums["checkpoints"], sums["checkpoint_bytes"] or 0),
        InboxRow("Orphan clean-ups", sums["orphans"], sums["orphan_bytes"] or 0),
        InboxRow("Sources of moves to free", sums["moves"], sums["move_bytes"] or 0),
        *(InboxRow(kind_of(kind).label, n) for kind, n in sorted(by_kind.items())),
    ]
    total = sums["checkpoints"] + sums["orphans"] + sums["moves"] + len(changes)
    for_you = 0
    if approver:
        for_you = sums["for_you"] + sum(1 for _, by in changes if by != user.pk)
    return Inbox(rows=[r for r in rows if r.count], total=total, for_you=for_you, is_approver=approver)


def inbox(request) -> dict:
    """Context processor: ``inbox`` on every page, computed once per request and only when a template reads it."""
    cached: dict[str, Inbox] = {}

    def get() -> Inbox:
        if "value" not in cached:
            cached["value"] = inbox_of(request.user)
        return cached["value"]

    return {"inbox": _Lazy(get)}


class _Lazy:
    """Attribute access computes the inbox on first use (templates read ``inbox.for_you``, ``inbox.rows``)."""

    def __init__(self, get) -> None:
        self._get = get

    def __getattr__(self, name: str):
        return getattr(self._get(), name)
