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
from typing import Any

from actions.models import HoldMode, Pin
from actions.protection import active_holds
from catalog.choices import CopyState, Verification
from catalog.models import Checkpoint
from catalog.recovery import disputed_checkpoints

# The promises of PRODUCT.md, by number.
PROMISE_HOLD = 1
PROMISE_PIN = 2
PROMISE_NEWEST_AND_LAST_VERIFIED = 5
PROMISE_VERIFIED_SURVIVOR = 6
PROMISE_DISPUTED = 10
PROMISE_FAIL_CLOSED = 12


# What each promise says, as the pages print it beside a refusal.
PROMISES = {
    PROMISE_HOLD: "a held checkpoint is never deleted, by anyone",
    PROMISE_PIN: "a pinned checkpoint cannot be scheduled for deletion",
    PROMISE_NEWEST_AND_LAST_VERIFIED: (
        "the newest restorable checkpoint is never deleted by a policy, and the last verified copy only with the "
        "whole checkpoint"
    ),
    PROMISE_VERIFIED_SURVIVOR: "a copy goes only after another copy that stays has been verified",
    PROMISE_DISPUTED: "a copy is never condemned on the word of another copy alone",
    PROMISE_FAIL_CLOSED: "what cannot be positively identified is never deleted by a policy",
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


def pinned(checkpoint: Checkpoint) -> Refusal | None:
    """Promise 2: a pinned checkpoint is not deleted; unpinning is its own audited action."""
    pin = Pin.objects.filter(checkpoint=checkpoint, unpinned_at__isnull=True).first()
    if pin is None:
        return None
    return Refusal(
        "pinned", f"{checkpoint} is pinned by {pin.pinned_label} ({pin.reason}); unpin it first", PROMISE_PIN
    )


def disputed_copy(copy: Any) -> Refusal | None:
    """Promise 10: a copy is never condemned on the word of another copy alone; a disputed copy is not deleted as
    the bad one."""
    if copy is None or copy.verification != Verification.DISPUTED:
        return None
    return Refusal(
        "disputed",
        f"the copy at {copy.location} is disputed: its checksums differ from another copy's and nothing independent "
        "says which is right, so it is not deleted as bad on the other copy's word (promise 10). Settle it first "
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
        "bad (promise 12)",
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
