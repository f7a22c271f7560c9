"""The promises of PRODUCT.md that a deletion must keep, one rule function each.

Each rule returns None when its promise allows the deletion, else a ``Refusal``: a stable ``code`` (what the API
returns and the pages show), a ``message`` a person can act on, and the number of the ``promise`` it keeps. The
deletion preview and scheduling (``actions.services``) and the execution's re-check under locks
(``actions.execution.blocker``: promise 4, "every deletion re-checks ... at the moment it executes") call the
same functions, and retention policies, the pages, the API, the admin and the commands reach them through those.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from actions.models import HoldMode, Pin
from actions.protection import active_holds
from catalog.choices import CopyState, Verification
from catalog.formats import FORMAT_LABELS
from catalog.models import Checkpoint, CheckpointCopy
from catalog.recovery import disputed_checkpoints
from fleet.choices import InventoryStatus
from fleet.models import StorageLocation

# The promises of PRODUCT.md, by number.
PROMISE_HOLD = 1
PROMISE_PIN = 2
PROMISE_NEWEST_AND_LAST_VERIFIED = 5
PROMISE_VERIFIED_SURVIVOR = 6
PROMISE_DISPUTED = 10
PROMISE_LEASE = 11
PROMISE_FAIL_CLOSED = 12


# Why each rule exists, in the words of the people it protects, as the pages print it beside a refusal (the
# numbers are PRODUCT.md's; the pages do not show them).
PROMISES = {
    PROMISE_HOLD: "Nothing under a hold is deleted, by anyone, until a different person releases the hold",
    PROMISE_PIN: "A pinned checkpoint stays until someone unpins it",
    PROMISE_NEWEST_AND_LAST_VERIFIED: (
        "The newest checkpoint a run can restart from is never deleted by a policy, and the last verified copy of a "
        "checkpoint goes only with the whole checkpoint"
    ),
    PROMISE_VERIFIED_SURVIVOR: "A copy goes only once another copy that stays has been verified",
    PROMISE_DISPUTED: (
        "When copies disagree and nothing independent says which is right, neither is deleted as the bad one"
    ),
    PROMISE_LEASE: (
        "A checkpoint a job is using (resuming from it or evaluating it) stays until the job is done with it"
    ),
    PROMISE_FAIL_CLOSED: "A policy never deletes or moves what the fleet cannot positively identify",
}


@dataclass(frozen=True)
class Refusal:
    code: str
    message: str
    promise: int | None = None


def held(checkpoint: Checkpoint) -> Refusal | None:
    """Promise 1: a held checkpoint is never deleted, by anyone, admins included; a hold placed after scheduling
    wins (promise 4). Every mode counts: legal, governance and compliance holds alike."""
    holds = list(
        active_holds(checkpoint)
        .order_by("placed_at")
        .only("case_ref", "placed_label", "checkpoint_id", "mode", "retain_until")
    )
    if not holds:
        return None
    cases = ", ".join(sorted({h.case_ref for h in holds}))
    kinds = [label.lower() for mode, label in HoldMode.choices if any(h.mode == mode for h in holds)]
    retained = [h.retain_until for h in holds if h.mode == HoldMode.COMPLIANCE and h.retain_until is not None]
    until = f", retained at least until {max(retained):%Y-%m-%d %H:%M} UTC" if retained else ""
    return Refusal(
        "held",
        f"{checkpoint} is under a {' and a '.join(kinds)} (case {cases}{until}); nothing held is deleted, by anyone, "
        "until another person releases the hold",
        PROMISE_HOLD,
    )


def files_protected_elsewhere(job: Any) -> Refusal | None:
    """Promises 1, 2 and 11 for every frozen file, not only the job's checkpoint: a file or copy that an ingest,
    an admin or a shell re-linked since scheduling to another checkpoint that is held, pinned or leased now is
    under that checkpoint's protection (issue 26: protection follows the data, wherever it moved)."""
    from actions.models import DeletionItem, ItemState
    from actions.protection import protection_reasons

    pending = DeletionItem.objects.filter(job=job, state=ItemState.PENDING)
    owners = set(
        CheckpointCopy.objects.filter(
            Q(pk__in=pending.values("copy_id")) | Q(pk__in=pending.values("shard_file__copy_id"))
        )
        .exclude(checkpoint_id=job.checkpoint_id)
        .values_list("checkpoint_id", flat=True)
    )
    if not owners:
        return None
    why = protection_reasons(owners, open_deletions=False)
    if not why:
        return None
    named = "; ".join(f"checkpoint {pk}: {w}" for pk, w in sorted(why.items()))
    return Refusal(
        "protected_elsewhere",
        f"files of this deletion now belong to a protected checkpoint ({named}); they stay until that is settled",
        PROMISE_HOLD,
    )


def pinned(checkpoint: Checkpoint) -> Refusal | None:
    """Promise 2: a pinned checkpoint is not deleted; unpinning is its own audited action."""
    pin = Pin.objects.filter(checkpoint=checkpoint, unpinned_at__isnull=True).first()
    if pin is None:
        return None
    return Refusal(
        "pinned", f"{checkpoint} is pinned by {pin.pinned_label} ({pin.reason}); unpin it first", PROMISE_PIN
    )


def leased(checkpoint: Checkpoint) -> Refusal | None:
    """Promise 11: while a job holds a live lease on the checkpoint (resuming from it, evaluating it), nothing
    deletes it, by hand or by a policy; the deletion waits until the lease is released or lapses."""
    from actions.leases import describe, live

    lease = live([checkpoint.pk]).order_by("-expires_at").first()
    if lease is None:
        return None
    return Refusal(
        "leased",
        f"{checkpoint} is in use: {describe(lease)}; it can go once the lease is released or lapses",
        PROMISE_LEASE,
    )


def disputed_copy(copy: Any) -> Refusal | None:
    """Promise 10: a copy is never condemned on the word of another copy alone; a disputed copy is not deleted as
    the bad one."""
    if copy is None or copy.verification != Verification.DISPUTED:
        return None
    return Refusal(
        "disputed",
        f"the copy at {copy.location} is disputed: its checksums differ from another copy's and nothing independent "
        "says which is right, so it is not deleted as bad on the other copy's word. Settle it first "
        "(a checksum written at save time, a third copy, or the source's checksum from before the copy), or delete "
        "the whole checkpoint",
        PROMISE_DISPUTED,
    )


def disputed_for_policy(checkpoint: Checkpoint, origin: str) -> Refusal | None:
    """Promise 12, fail closed: a policy never deletes a checkpoint with a disputed copy."""
    if not origin.startswith("policy"):
        return None
    if not Checkpoint.objects.filter(disputed_checkpoints(), pk=checkpoint.pk).exists():
        return None
    return Refusal(
        "disputed",
        f"{checkpoint} has a disputed copy: a policy never deletes what it cannot positively identify as good or "
        "bad; settle the dispute first, or delete it by hand",
        PROMISE_FAIL_CLOSED,
    )


def last_verified_copy(checkpoint: Checkpoint, copy: Any, survivors: Iterable[Any]) -> Refusal | None:
    """Promises 5 and 6: the last verified copy of a checkpoint is never deleted unless the whole checkpoint is meant
    to go, and a complete copy goes only while another complete copy that stays is verified. ``survivors``: the
    present copies that stay (not this one, not one another open deletion takes)."""
    if copy is None or copy.state != CopyState.COMPLETE or copy.temporary:
        return None
    if any(c.state == CopyState.COMPLETE and c.verification == Verification.VERIFIED for c in survivors):
        return None
    verified = copy.verification == Verification.VERIFIED
    return Refusal(
        "last_verified_copy",
        f"the copy at {copy.location} is {'the last verified copy' if verified else 'a complete copy'} of "
        f"{checkpoint} and no other complete copy that stays has been verified; verify another copy first, or delete "
        "the whole checkpoint",
        PROMISE_NEWEST_AND_LAST_VERIFIED if verified else PROMISE_VERIFIED_SURVIVOR,
    )


def newest_restorable_for_policy(checkpoint: Checkpoint, origin: str, newest: Checkpoint | None) -> Refusal | None:
    """Promise 5: a policy never deletes the newest complete, verified (restorable) checkpoint of a run.
    ``newest``: the run's newest restorable checkpoint now (``catalog.recovery.newest_restorable``)."""
    if not origin.startswith("policy") or newest is None or newest.pk != checkpoint.pk:
        return None
    return Refusal(
        "newest_restorable",
        f"{checkpoint} is the newest restorable checkpoint of {checkpoint.run}; no policy deletes it",
        PROMISE_NEWEST_AND_LAST_VERIFIED,
    )


def evidence_cutoff(now: datetime | None = None) -> datetime:
    """A location whose newest applied inventory was taken before this is stale, for policies (promise 12)."""
    return (now or timezone.now()) - timedelta(hours=settings.POLICY_EVIDENCE_HOURS)


def _evidence_problem(location: StorageLocation, cutoff: datetime) -> str:
    """Why what ``location`` holds is not known well enough for a policy to act on, or ""."""
    last = location.last_inventory
    if last is not None and last.status == InventoryStatus.FAILED:
        when = (last.finished_at or last.received_at).strftime("%Y-%m-%d %H:%M UTC")
        return f"the last inventory of {location} failed ({when})"
    if location.last_applied_at is None:
        return f"{location} has no applied inventory yet"
    if location.last_applied_at < cutoff:
        hours = int((timezone.now() - location.last_applied_at).total_seconds() // 3600)
        return (
            f"the newest inventory of {location} is {hours:,} h old (a policy trusts one for "
            f"{settings.POLICY_EVIDENCE_HOURS} h)"
        )
    return ""


def unidentified_for_policy(checkpoint: Checkpoint, origin: str, *, now: datetime | None = None) -> Refusal | None:
    """Promise 12, fail closed: a policy deletes (or demotes) only what it positively identifies.

    A present copy in a layout no format of the registry knows, or at a location whose newest inventory
    failed, is missing or is stale, leaves the checkpoint's copies and their count unknown, so no policy
    acts on it. (A copy an applied inventory found gone is positive evidence, wherever it was.) A person
    may still delete it by hand, seeing the preview. ``unidentified_ids`` is the same rule for many runs.
    """
    if not origin.startswith("policy"):
        return None
    copies = list(
        CheckpointCopy.objects.filter(checkpoint=checkpoint, gone_at__isnull=True)
        .select_related("location", "location__last_inventory")
        .order_by("location__name")
    )
    problems: list[str] = []
    for copy in copies:
        if copy.format not in FORMAT_LABELS:
            problems.append(f"the copy at {copy.location} is in a layout no known format recognises ({copy.format!r})")
    cutoff = evidence_cutoff(now)
    seen: set[int] = set()
    for copy in copies:
        if copy.location_id in seen:
            continue
        seen.add(copy.location_id)
        problem = _evidence_problem(copy.location, cutoff)
        if problem:
            problems.append(problem)
    if not problems:
        return None
    return Refusal(
        "not_identified",
        f"{checkpoint} cannot be positively identified: {'; '.join(problems[:5])}. A policy never deletes or "
        "demotes what it cannot identify; take a fresh inventory, or delete it by hand",
        PROMISE_FAIL_CLOSED,
    )


def unidentified_ids(run_ids: Iterable[int], *, now: datetime | None = None) -> set[int]:
    """The checkpoints of these runs that ``unidentified_for_policy`` refuses, in one query."""
    cutoff = evidence_cutoff(now)
    unknown = (
        Q(last_applied_at__isnull=True)
        | Q(last_applied_at__lt=cutoff)
        | Q(last_inventory__status=InventoryStatus.FAILED)
    )
    bad = CheckpointCopy.objects.filter(gone_at__isnull=True, checkpoint__run_id__in=list(run_ids)).filter(
        Q(location__in=StorageLocation.objects.filter(unknown).values("pk")) | ~Q(format__in=list(FORMAT_LABELS))
    )
    return set(bad.values_list("checkpoint_id", flat=True).distinct())
