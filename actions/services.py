"""Operator actions: pin, unpin, hold, release, schedule deletion, approve, cancel; and the deletion preview.

Each action is one function that, in one transaction, locks the run row and then the checkpoint
row (always in that order, so that two actions on one run queue up instead of deadlocking; the
deletion executor locks the same way), checks its preconditions, changes state and writes exactly
one audit event. Pages, the API, the management command and tasks all call these; none
re-implements a check. Bad input raises ``DomainError`` before anything is written.

Roles: a person (``Actor.kind == "user"``) needs the operator role to act and the approver role to
approve; workers and beat act for policies and need none. The promises are checked for everyone:
an admin gets no bypass, whichever way in.

Holds have a mode (``HoldMode``): legal, governance (the approver role releases it, with a case
reference) and compliance (nobody releases it before ``retain_until``, which is only ever extended;
``actions.holdguard``'s triggers refuse the same in the database).

Object Lock: a hold placed or released on checkpoints with objects in an Object-Lock bucket is
mirrored onto those objects as legal holds (and GOVERNANCE or COMPLIANCE retention for those modes)
after the hold commits (``actions.objectlock``). The
catalog's hold is what every promise reads and it stands whatever the store answers; a refusal is
recorded on the hold (``mirror_state``) and in the mirror's own audit event.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import cast

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Exists, OuterRef, Sum
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from access.refusals import Refusal as AccessRefusal
from access.refusals import note_refusal
from access.roles import Role, has_role, require_role
from actions import keepers, promises
from actions.models import (
    DeletionItem,
    DeletionJob,
    DeletionScope,
    DeletionState,
    Hold,
    HoldMode,
    ItemState,
    MirrorState,
    Pin,
)
from actions.objectlock import mirror_hold_task
from actions.promises import Refusal
from actions.protection import OPEN_DELETION_STATES, active_holds
from approvals import services as approvals
from approvals.choices import ChangeState
from approvals.models import ChangeRequest
from approvals.registry import Applied
from approvals.services import same_person as _same_person
from audit.actor import Actor
from audit.choices import ActorKind
from audit.services import audit
from catalog.choices import Importance
from catalog.early_deletion import early_deletion_by_copy
from catalog.lineage import child_runs
from catalog.models import Checkpoint, CheckpointCopy, CopyTierUsage, Run, ShardFile
from catalog.recovery import newest_restorable, newest_restorable_ids
from ckptfleet.errors import DomainError, PermissionRefused
from ckptfleet.units import bytes_iec
from fleet.choices import LocationKind
from fleet.early_deletion import EarlyDeletion
from fleet.models import Bucket, StorageLocation
from fleet.pricebook import GIB, PriceBook, utc_today
from fleet.s3 import RESTORE_CLASSES

MAX_REASON = 2000
MAX_CASE_REF = 200
ITEM_BATCH = 5000
SAMPLE_ITEMS = 20
_POLICY_ORIGIN = re.compile(r"^policy:[A-Za-z0-9_.-]{1,40}$")
# A move frees its source copy through a deletion once the new copy verified (``promotion.moves``).
_MOVE_ORIGIN = re.compile(r"^move:[0-9]{1,14}$")
APPROVAL_IMPORTANCE = (Importance.MILESTONE, Importance.CRITICAL)


# --- small shared checks --------------------------------------------------------------------------


def _text(value, what: str, *, limit: int = MAX_REASON) -> str:
    text = (value or "").strip() if isinstance(value, str) or value is None else None
    if text is None:
        raise DomainError(f"{what} must be text")
    if not text:
        raise DomainError(f"{what} is required", code="required")
    if len(text) > limit:
        raise DomainError(f"{what} is longer than {limit} characters")
    return text


def _target(target) -> dict:
    if target is None:
        return {}
    return {"target_type": "run" if isinstance(target, Run) else "checkpoint", "target_id": target.pk}


def _person_role(actor: Actor, role: str, *, doing: str, target=None) -> None:
    """A person needs ``role``; workers and beat act for policies and are trusted to.

    Called before the action's transaction, so that a refusal is audited (``access.refusals``).
    """
    if actor.kind == ActorKind.USER:
        if actor.user is None:
            raise DomainError(f"{doing} by a person needs the signed-in user", code="not_authenticated")
        require_role(actor.user, role, doing=doing, source=actor.source, **_target(target))


def require_reason(value) -> str:
    """A reason, stripped and within its limit, or ``DomainError``: the check every action with a reason makes."""
    return _text(value, "a reason")


def require_person_role(actor: Actor, role: str, *, doing: str) -> None:
    """A person needs ``role`` for ``doing`` (workers and beat are trusted to); an action on no run or checkpoint."""
    _person_role(actor, role, doing=doing)


def _refuse(actor: Actor, doing: str, why: str, target) -> None:
    """Separation of duties, a compliance hold's date: audit the refusal (outside the transaction, like a missing
    role) and raise."""
    note_refusal(
        AccessRefusal(
            user=actor.user,
            doing=doing,
            why=why,
            source=actor.source,
            **_target(target),
            target_label=str(target) if target is not None else "",
        )
    )
    raise PermissionRefused(why)


def _audit(actor: Actor, action: str, *, target, request_id: str = "", **fields) -> None:
    if isinstance(target, Run):
        target_type, label = "run", str(target)
    else:
        target_type, label = "checkpoint", str(target)
    audit(
        actor,
        action,
        target_type=target_type,
        target_id=target.pk,
        target_label=label,
        request_id=(request_id or "")[:64],
        **fields,
    )


def lock_run(run_id: int) -> Run:
    """Lock a run's row for the rest of the transaction and return it (with its team).

    ``FOR NO KEY UPDATE``, as every lock on a run or a checkpoint (and ``StorageLocation.objects.locked()``): it
    excludes every other action's lock on the row, but not the key-share lock of a foreign key to it, so a scan that
    adds a checkpoint or a copy to the run does not wait for the action (nor deadlock with it at commit)."""
    try:
        run = Run.objects.select_for_update(of=("self",), no_key=True).select_related("team").get(pk=run_id)
    except Run.DoesNotExist:
        raise DomainError(f"run {run_id} does not exist", code="not_found", http_status=404) from None
    return run


def lock_checkpoint(checkpoint_id: int) -> Checkpoint:
    """Lock the checkpoint's run, then the checkpoint, and return the checkpoint (``.run`` set)."""
    run_id = Checkpoint.objects.filter(pk=checkpoint_id).values_list("run_id", flat=True).first()
    if run_id is None:
        raise DomainError(f"checkpoint {checkpoint_id} does not exist", code="not_found", http_status=404)
    run = lock_run(run_id)
    checkpoint = Checkpoint.objects.select_for_update(of=("self",), no_key=True).get(pk=checkpoint_id)
    checkpoint.run = run
    return checkpoint


def _has_object_lock_files(checkpoint_ids=None, *, run_id: int) -> bool:
    files = ShardFile.objects.filter(
        gone_at__isnull=True, copy__gone_at__isnull=True, location__bucket__object_lock=True
    )
    if checkpoint_ids is not None:
        files = files.filter(copy__checkpoint_id__in=list(checkpoint_ids))
    else:
        files = files.filter(copy__checkpoint__run_id=run_id)
    return files.exists()


def _mirror_after_commit(hold: Hold) -> None:
    if hold.mirror_state == MirrorState.PENDING:
        transaction.on_commit(lambda: mirror_hold_task.delay(hold.pk))


# --- pins ------------------------------------------------------------------------------------------


def pin(*, checkpoint: Checkpoint, reason: str, actor: Actor, request_id: str = "") -> Pin:
    """Pin a checkpoint: while pinned it cannot be scheduled for deletion (promise 2)."""
    reason = _text(reason, "a reason")
    _person_role(actor, Role.OPERATOR, doing="pinning a checkpoint", target=checkpoint)
    with transaction.atomic():
        checkpoint = lock_checkpoint(checkpoint.pk)
        current = Pin.objects.filter(checkpoint=checkpoint, unpinned_at__isnull=True).first()
        if current is not None:
            raise DomainError(
                f"{checkpoint} is already pinned by {current.pinned_label} "
                f"since {current.pinned_at:%Y-%m-%d %H:%M} UTC",
                code="already_pinned",
            )
        made = Pin.objects.create(
            checkpoint=checkpoint,
            reason=reason,
            pinned_by=actor.user,
            pinned_label=actor.label,
            pinned_at=timezone.now(),
        )
        open_jobs = list(
            DeletionJob.objects.filter(checkpoint=checkpoint, state__in=OPEN_DELETION_STATES).values_list(
                "pk", flat=True
            )
        )
        _audit(
            actor,
            "checkpoint.pin",
            target=checkpoint,
            reason=reason,
            before={"pinned": False},
            after={"pinned": True, "pin": made.pk, "open_deletions_now_blocked": open_jobs},
            request_id=request_id,
        )
    return made


def unpin(
    *,
    actor: Actor,
    pin: Pin | None = None,
    checkpoint: Checkpoint | None = None,
    reason: str = "",
    request_id: str = "",
) -> Pin:
    """Remove the active pin of a checkpoint (given the pin or the checkpoint): its own audited action."""
    if (pin is None) == (checkpoint is None):
        raise DomainError("name the pin or the checkpoint to unpin, not both")
    reason = (reason or "").strip()[:MAX_REASON]
    _person_role(actor, Role.OPERATOR, doing="unpinning a checkpoint", target=checkpoint)
    # One of the two, as checked above.
    checkpoint_id = pin.checkpoint_id if pin is not None else cast(Checkpoint, checkpoint).pk
    with transaction.atomic():
        locked = lock_checkpoint(checkpoint_id)
        active = Pin.objects.select_for_update(of=("self",)).filter(checkpoint=locked, unpinned_at__isnull=True)
        if pin is not None:
            active = active.filter(pk=pin.pk)
        current = active.first()
        if current is None:
            which = " by that pin" if pin is not None else ""
            raise DomainError(f"{locked} is not pinned{which}", code="not_pinned")
        current.unpinned_by = actor.user
        current.unpinned_label = actor.label
        current.unpinned_at = timezone.now()
        current.save(update_fields=["unpinned_by", "unpinned_label", "unpinned_at"])
        _audit(
            actor,
            "checkpoint.unpin",
            target=locked,
            reason=reason,
            before={"pinned": True, "pin": current.pk, "pinned_by": current.pinned_label, "pin_reason": current.reason},
            after={"pinned": False},
            request_id=request_id,
        )
    return current


# --- holds -----------------------------------------------------------------------------------------


def _mode(value) -> str:
    mode = (value or HoldMode.LEGAL) if isinstance(value, str) or value is None else None
    if mode not in HoldMode.values:
        raise DomainError(f"the mode must be one of {', '.join(HoldMode.values)}, not {value!r}", code="invalid_mode")
    return mode


def _when(value, what: str) -> datetime:
    """A date (the start of that day, UTC) or an aware datetime, given as such or as ISO 8601 text."""
    if isinstance(value, str) and value.strip():
        text = value.strip()
        parsed = parse_datetime(text) if "T" in text or " " in text else None
        if parsed is None:
            try:
                day = parse_date(text)
            except ValueError:
                day = None
            if day is None:
                raise DomainError(f"{what} must be a date (YYYY-MM-DD) or a date and time, not {text[:40]!r}")
            value = day
        else:
            value = parsed
    if isinstance(value, datetime):
        if timezone.is_naive(value):
            raise DomainError(f"{what} needs a time zone (e.g. 2027-01-31T00:00:00Z) or a plain date")
        return value.astimezone(UTC)
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day, tzinfo=UTC)
    raise DomainError(f"{what} is required for a compliance hold", code="required")


def _retain_until(value, *, now: datetime, what: str = "the retain-until date") -> datetime:
    until = _when(value, what)
    if until <= now:
        raise DomainError(f"{what} must be in the future (it is {until:%Y-%m-%d %H:%M} UTC)")
    earliest = now + timedelta(days=settings.HOLD_COMPLIANCE_MIN_DAYS)
    if until < earliest:
        days = settings.HOLD_COMPLIANCE_MIN_DAYS
        raise DomainError(
            f"{what} must be at least {days} day{'s' if days != 1 else ''} ahead ({earliest:%Y-%m-%d %H:%M} UTC or "
            f"later, CKPTFLEET_HOLD_COMPLIANCE_MIN_DAYS), not {until:%Y-%m-%d %H:%M} UTC: a compliance hold that "
            "lapses sooner protects nothing; place a legal hold instead"
        )
    limit = now + timedelta(days=settings.HOLD_COMPLIANCE_MAX_DAYS)
    if until > limit:
        raise DomainError(
            f"{what} must be within {settings.HOLD_COMPLIANCE_MAX_DAYS} days ({limit:%Y-%m-%d}); "
            "a compliance hold cannot be shortened, so a mistaken date could never be undone"
        )
    return until


def hold(
    *,
    run: Run,
    reason: str,
    case_ref: str,
    actor: Actor,
    checkpoint: Checkpoint | None = None,
    mode: str = HoldMode.LEGAL,
    retain_until: datetime | date | str | None = None,
    request_id: str = "",
) -> Hold:
    """Place a hold on one checkpoint or (``checkpoint=None``) on every checkpoint of a run (promise 1).

    ``mode``: legal (another operator releases it), governance (another person with the approver role
    releases it, with a case reference) or compliance (nobody releases it before ``retain_until``).
    """
    reason = _text(reason, "a reason")
    case_ref = _text(case_ref, "a case reference", limit=MAX_CASE_REF)
    mode = _mode(mode)
    now = timezone.now()
    if mode == HoldMode.COMPLIANCE:
        until: datetime | None = _retain_until(retain_until, now=now)
    elif retain_until not in (None, ""):
        raise DomainError("only a compliance hold has a retain-until date", code="invalid")
    else:
        until = None
    if checkpoint is not None and checkpoint.run_id != run.pk:
        raise DomainError(f"{checkpoint} is not a checkpoint of run {run}")
    _person_role(actor, Role.OPERATOR, doing="placing a hold", target=checkpoint or run)
    with transaction.atomic():
        if checkpoint is not None:
            checkpoint = lock_checkpoint(checkpoint.pk)
            locked_run = checkpoint.run
        else:
            locked_run = lock_run(run.pk)
            # The deletion executor locks only the checkpoint of its job: a hold on the whole run
            # takes every checkpoint's lock too, so it waits for a batch in flight and then wins.
            list(
                Checkpoint.objects.select_for_update(of=("self",), no_key=True)
                .filter(run=locked_run)
                .order_by("pk")
                .values_list("pk")
            )
        same = Hold.objects.filter(run=locked_run, checkpoint=checkpoint, released_at__isnull=True, case_ref=case_ref)
        if same.exists():
            raise DomainError(f"case {case_ref} already holds {checkpoint or locked_run}", code="already_held")
        mirror = _has_object_lock_files(
            checkpoint_ids=[checkpoint.pk] if checkpoint is not None else None, run_id=locked_run.pk
        )
        made = Hold.objects.create(
            run=locked_run,
            checkpoint=checkpoint,
            mode=mode,
            retain_until=until,
            reason=reason,
            case_ref=case_ref,
            placed_by=actor.user,
            placed_label=actor.label,
            placed_at=timezone.now(),
            mirror_state=MirrorState.PENDING if mirror else MirrorState.NONE,
        )
        # Only jobs with something left to delete are stopped by the hold: one whose last batch already
        # deleted everything ends completed, and is not reported as blocked.
        open_jobs = DeletionJob.objects.filter(
            Exists(DeletionItem.objects.filter(job=OuterRef("pk"), state=ItemState.PENDING)),
            state__in=OPEN_DELETION_STATES,
            checkpoint__run=locked_run,
        )
        if checkpoint is not None:
            open_jobs = open_jobs.filter(checkpoint=checkpoint)
        _audit(
            actor,
            "hold.place",
            target=checkpoint or locked_run,
            reason=reason,
            case_ref=case_ref,
            before={"held": False},
            after={
                "held": True,
                "hold": made.pk,
                "mode": mode,
                "retain_until": until.isoformat() if until else None,
                "scope": "checkpoint" if checkpoint is not None else "run",
                "object_lock": "pending" if mirror else "none",
                "open_deletions_now_blocked": list(open_jobs.values_list("pk", flat=True)),
            },
            request_id=request_id,
        )
        _mirror_after_commit(made)
    return made


def _own_hold(actor: Actor, hold: Hold) -> str:
    return f"{actor.label} placed hold {hold.case_ref}, so another person must release it (separation of duties)"


def _retained(hold: Hold) -> str:
    until = hold.retain_until
    return (
        f"hold {hold.case_ref} is a compliance hold retained until {until:%Y-%m-%d %H:%M} UTC; nobody can release it "
        "before then, admins included"
    )


def may_release(user, hold: Hold, *, now: datetime | None = None) -> bool:
    """Whether ``user`` may release ``hold`` now: what the pages ask before offering the button."""
    if not hold.active or hold.retained(now or timezone.now()):
        return False
    if user is None or getattr(user, "pk", None) == hold.placed_by_id:
        return False
    return has_role(user, Role.APPROVER if hold.mode == HoldMode.GOVERNANCE else Role.OPERATOR)


def _lock_hold(hold: Hold) -> Hold:
    """Lock what ``hold`` covers (its checkpoint, or its run), then the hold: the order the deletions lock in."""
    if hold.checkpoint_id is not None:
        lock_checkpoint(hold.checkpoint_id)
    else:
        lock_run(hold.run_id)
    return Hold.objects.select_for_update(of=("self",)).select_related("run__team", "checkpoint").get(pk=hold.pk)


def _write_release(current: Hold, actor: Actor, *, reason: str, case_ref: str, mirror: bool, now: datetime) -> None:
    current.released_by = actor.user
    current.released_label = actor.label
    current.released_at = now
    current.release_reason = reason
    current.release_case_ref = case_ref
    current.mirror_state = MirrorState.PENDING if mirror else current.mirror_state
    current.save(
        update_fields=[
            "released_by",
            "released_label",
            "released_at",
            "release_reason",
            "release_case_ref",
            "mirror_state",
        ]
    )


def release(*, hold: Hold, reason: str, actor: Actor, case_ref: str = "", request_id: str = "") -> Hold:
    """Release a hold: a reason is required, and only a different person than the one who placed it may.

    A governance hold needs the approver role and a case reference for the release; a compliance hold
    cannot be released before its retain-until date, by anyone (the database refuses it too).
    """
    reason = _text(reason, "a reason for the release")
    target = hold.checkpoint if hold.checkpoint_id else hold.run
    if hold.mode == HoldMode.GOVERNANCE:
        release_case = _text(case_ref, "a case reference for releasing a governance hold", limit=MAX_CASE_REF)
        if actor.kind != ActorKind.USER:
            raise PermissionRefused("only a person with the approver role releases a governance hold")
        _person_role(actor, Role.APPROVER, doing="releasing a governance hold", target=target)
    else:
        release_case = (case_ref or "").strip()[:MAX_CASE_REF] if isinstance(case_ref, str) else ""
        _person_role(actor, Role.OPERATOR, doing="releasing a hold", target=target)
    if hold.released_at is None and hold.retained(timezone.now()):
        _refuse(actor, "releasing a compliance hold", _retained(hold), target)
    if hold.released_at is None and _same_person(actor, hold.placed_by_id, hold.placed_label):
        _refuse(actor, "releasing a hold", _own_hold(actor, hold), target)
    with transaction.atomic():
        current = _lock_hold(hold)
        if current.released_at is not None:
            raise DomainError(
                f"hold {current.case_ref} was already released by {current.released_label}", code="already_released"
            )
        now = timezone.now()
        if current.retained(now):
            raise PermissionRefused(_retained(current))
        if _same_person(actor, current.placed_by_id, current.placed_label):
            raise PermissionRefused(_own_hold(actor, current))
        mirror = _has_object_lock_files(
            checkpoint_ids=[current.checkpoint_id] if current.checkpoint_id else None, run_id=current.run_id
        )
        _write_release(current, actor, reason=reason, case_ref=release_case, mirror=mirror, now=now)
        target = current.checkpoint if current.checkpoint_id else current.run
        _audit(
            actor,
            "hold.release",
            target=target,
            reason=reason,
            case_ref=current.case_ref,
            before={
                "held": True,
                "hold": current.pk,
                "mode": current.mode,
                "retain_until": current.retain_until.isoformat() if current.retain_until else None,
                "placed_by": current.placed_label,
                "hold_reason": current.reason,
            },
            after={
                "hold": current.pk,
                "released": True,
                "release_case_ref": release_case,
                "object_lock": "pending" if mirror else "none",
            },
            request_id=request_id,
        )
        _mirror_after_commit(current)
    return current


def extend_hold(
    *, hold: Hold, retain_until: datetime | date | str, reason: str, actor: Actor, request_id: str = ""
) -> Hold:
    """Move a compliance hold's retain-until date later (never earlier): its own audited action.

    Anyone with the operator role may, the placer included: extending only makes the promise stronger.
    """
    reason = _text(reason, "a reason for the extension")
    target = hold.checkpoint if hold.checkpoint_id else hold.run
    _person_role(actor, Role.OPERATOR, doing="extending a compliance hold", target=target)
    until = _retain_until(retain_until, now=timezone.now(), what="the new retain-until date")
    with transaction.atomic():
        current = _lock_hold(hold)
        if current.mode != HoldMode.COMPLIANCE or current.retain_until is None:
            raise DomainError(
                f"hold {current.case_ref} is a {current.get_mode_display().lower()}; only a compliance hold has a "
                "retain-until date to extend",
                code="not_compliance",
            )
        if current.released_at is not None:
            raise DomainError(f"hold {current.case_ref} was released; it cannot be extended", code="already_released")
        before = current.retain_until
        if until <= before:
            raise DomainError(
                f"the new retain-until date ({until:%Y-%m-%d %H:%M} UTC) must be later than the current one "
                f"({before:%Y-%m-%d %H:%M} UTC): a compliance hold is extended, never shortened",
                code="not_later",
            )
        mirror = _has_object_lock_files(
            checkpoint_ids=[current.checkpoint_id] if current.checkpoint_id else None, run_id=current.run_id
        )
        current.retain_until = until
        fields = ["retain_until"]
        if mirror:
            current.mirror_state = MirrorState.PENDING
            fields.append("mirror_state")
        current.save(update_fields=fields)
        target = current.checkpoint if current.checkpoint_id else current.run
        _audit(
            actor,
            "hold.extend",
            target=target,
            reason=reason,
            case_ref=current.case_ref,
            before={"hold": current.pk, "mode": current.mode, "retain_until": before.isoformat()},
            after={
                "hold": current.pk,
                "mode": current.mode,
                "retain_until": until.isoformat(),
                "object_lock": "pending" if mirror else "none",
            },
            request_id=request_id,
        )
        _mirror_after_commit(current)
    return current


# --- the deletion preview and its checks -----------------------------------------------------------


@dataclass
class CopyPart:
    """One copy a deletion would take: its location, files, bytes and what it costs a month."""

    copy: CheckpointCopy
    files: int
    bytes: int
    monthly_cost: Decimal | None


@dataclass
class DeletionPreview:
    """What exactly a deletion would remove and what would remain, shown before a person confirms.

    ``refusal`` is the readable reason the deletion cannot be scheduled (``promise`` names the
    promise of PRODUCT.md that refuses it, when one does); None when it may go ahead.
    """

    checkpoint: Checkpoint
    copy: CheckpointCopy | None
    parts: list[CopyPart]
    files: int
    bytes: int
    monthly_cost: Decimal | None
    currency: str
    newest_before: Checkpoint | None
    newest_before_verified: bool
    newest_after: Checkpoint | None
    newest_after_verified: bool
    surviving_copies: list[CheckpointCopy]
    refusal: str | None = None
    refusal_code: str = ""
    promise: int | None = None
    approval_reasons: list[str] = field(default_factory=list)
    blast_reasons: list[str] = field(default_factory=list)  # above a blast-radius limit: two approvers
    grace_days: int = 7
    sample: list[dict] = field(default_factory=list)
    # What deleting objects younger than their storage class's minimum duration is billed (``fleet.early_deletion``).
    early_deletion: EarlyDeletion = field(default_factory=EarlyDeletion)
    # Runs that started from this checkpoint (catalog.lineage) when the deletion leaves no copy of it: scheduling
    # then needs ``confirm_children=True``.
    child_runs: list = field(default_factory=list)
    # At a bucket with a recovery window but no versioning, objects in GLACIER or DEEP_ARCHIVE cannot be copied to
    # the trash: the deletion leaves them in place (actions.trash). One line per such copy, said before scheduling.
    archived_stay: list[str] = field(default_factory=list)
    archived_stay_bytes: int = 0  # what of ``bytes`` those objects hold: not freed
    # The locked retention policies whose rules keep the checkpoint (``actions.keepers``), and how many approvals the
    # deletion needs for them: the quorum's when it leaves no present copy of the checkpoint, else 0 (it stays kept).
    kept_by: list[keepers.Keeper] = field(default_factory=list)
    kept_approvals: int = 0

    @property
    def allowed(self) -> bool:
        return self.refusal is None

    @property
    def freed_bytes(self) -> int:
        """What the deletion frees: ``bytes`` less the archived objects it leaves in place (``archived_stay``)."""
        return self.bytes - self.archived_stay_bytes

    @property
    def promise_text(self) -> str:
        return promises.PROMISES.get(self.promise, "") if self.promise else ""

    @property
    def needs_approval(self) -> bool:
        return bool(self.approval_reasons)

    @property
    def approvals_required(self) -> int:
        return max(2 if self.blast_reasons else 1 if self.approval_reasons else 0, self.kept_approvals)

    @property
    def whole(self) -> bool:
        return self.copy is None

    @property
    def execute_after(self) -> datetime:
        return timezone.now() + grace_period()

    @property
    def grace_text(self) -> str:
        return grace_text()

    @property
    def newest_changes(self) -> bool:
        return self.newest_before != self.newest_after


def newest_excluding(run_id: int, exclude_copy_ids: set[int]) -> tuple[int | None, bool]:
    """The run's newest restorable checkpoint once these copies are gone (``catalog.recovery``'s rule), and
    whether it is verified."""
    return newest_restorable_ids([run_id], excluding=exclude_copy_ids).get(run_id, (None, False))


def grace_days() -> int:
    days = settings.DELETION_GRACE_DAYS
    if days <= 0 and not settings.DEBUG:
        raise DomainError("the deletion grace period is zero, which only development settings allow")
    return max(days, 0)


def grace_period() -> timedelta:
    """How long a scheduled deletion waits before it may run: CKPTFLEET_DELETION_GRACE_DAYS, or in development
    (the demo) CKPTFLEET_DELETION_GRACE_MINUTES when set."""
    if settings.DEBUG and settings.DELETION_GRACE_MINUTES > 0:
        return timedelta(minutes=settings.DELETION_GRACE_MINUTES)
    return timedelta(days=grace_days())


def grace_text() -> str:
    """The grace period in words, as pages say it: "7 days", "3 minutes"."""
    if settings.DEBUG and settings.DELETION_GRACE_MINUTES > 0:
        minutes = settings.DELETION_GRACE_MINUTES
        return f"{minutes} minute{'s' if minutes != 1 else ''}"
    days = max(settings.DELETION_GRACE_DAYS, 0)
    return f"{days} day{'s' if days != 1 else ''}"


def _monthly_costs(
    copies: list[CheckpointCopy], staying: frozenset[int] = frozenset()
) -> tuple[dict[int, Decimal | None], str, Decimal | None]:
    """What each copy costs per month at today's prices, from its current tier usage (one query each kind), and
    what of that the archived objects of the ``staying`` copies cost (they stay: ``archived_left_in_place``)."""
    book = PriceBook.load()
    today = utc_today()
    usage: dict[int, list[tuple[str, str, int]]] = {c.pk: [] for c in copies}
    for row in CopyTierUsage.objects.filter(copy_id__in=list(usage)).values_list(
        "copy_id", "tier", "storage_class", "bytes"
    ):
        usage[row[0]].append(row[1:])
    costs: dict[int, Decimal | None] = {}
    stays: Decimal | None = Decimal(0)
    for copy in copies:
        parts = usage[copy.pk] or [(copy.location.tier, "", copy.bytes)]
        total = Decimal(0)
        for tier, storage_class, nbytes in parts:
            price = book.price(copy.location, tier, storage_class, today)
            if price is None:
                costs[copy.pk] = None
                break
            total += Decimal(nbytes) / GIB * price
            if copy.pk in staying and storage_class in RESTORE_CLASSES and stays is not None:
                stays += Decimal(nbytes) / GIB * price
        else:
            costs[copy.pk] = total.quantize(Decimal("0.01"))
        if costs[copy.pk] is None and copy.pk in staying:
            stays = None
    return costs, book.currency, None if stays is None else stays.quantize(Decimal("0.01"))


def _early_deletion(copies: list[CheckpointCopy], staying: frozenset[int] = frozenset()) -> EarlyDeletion:
    """The early-deletion charge of deleting ``copies`` today: each bucket object younger than its storage class's
    minimum duration is billed for the days left (``catalog.early_deletion``, as a move's plan and the retention
    simulator price it). The archived objects of the ``staying`` copies are not deleted, so not billed. One query,
    grouped by copy, class and day."""
    result = EarlyDeletion()
    left = {copy_id: RESTORE_CLASSES for copy_id in staying}
    for charge in early_deletion_by_copy(copies, left_in_place=left).values():
        result += charge
    return result


def _check_origin(origin: str) -> str:
    origin = (origin or "").strip()
    if origin != "manual" and not _POLICY_ORIGIN.match(origin) and not _MOVE_ORIGIN.match(origin):
        raise DomainError(f"origin {origin!r} is neither 'manual', 'policy:<id>' nor 'move:<id>'")
    return origin


def _assess(
    checkpoint: Checkpoint,
    copy: CheckpointCopy | None,
    origin: str,
    *,
    with_money: bool,
    actor: Actor | None = None,
    together: Together | None = None,
) -> DeletionPreview:
    """The checks of ``schedule_deletion``, without writing: shared by the preview and the service."""
    if copy is not None and copy.checkpoint_id != checkpoint.pk:
        raise DomainError(f"that copy is not a copy of {checkpoint}")
    present = list(
        CheckpointCopy.objects.filter(checkpoint=checkpoint, gone_at__isnull=True)
        .select_related("location", "location__host")
        .order_by("location__name", "path")
    )
    if copy is not None and copy.pk not in {c.pk for c in present}:
        raise DomainError(f"the copy at {copy.location} is no longer present, so there is nothing of it to delete")
    going = [c for c in present if copy is None or c.pk == copy.pk]
    going_ids = {c.pk for c in going}

    open_jobs = list(
        DeletionJob.objects.filter(checkpoint=checkpoint, state__in=OPEN_DELETION_STATES).only("pk", "copy_id")
    )
    already_going = {j.copy_id for j in open_jobs if j.copy_id is not None}
    surviving = [c for c in present if c.pk not in going_ids and c.pk not in already_going]

    counts = {
        row["copy_id"]: (row["files"], row["bytes"] or 0)
        for row in ShardFile.objects.filter(copy_id__in=list(going_ids), gone_at__isnull=True)
        .values("copy_id")
        .annotate(files=Count("pk"), bytes=Sum("size"))
        .order_by()
    }
    # Archived objects a trash without versioning cannot take stay where they are: not freed, still billed.
    staying = _trash_cannot_take_archived(going)
    stay_lines, stay_objects, stay_bytes = archived_left_in_place(going, staying)
    costs, currency, stays_cost = _monthly_costs(going, staying) if with_money else ({}, "", Decimal(0))
    parts = [CopyPart(c, *counts.get(c.pk, (0, 0)), costs.get(c.pk)) for c in going]
    monthly = None
    if with_money and stays_cost is not None and all(p.monthly_cost is not None for p in parts):
        monthly = sum((p.monthly_cost for p in parts if p.monthly_cost is not None), Decimal(0)) - stays_cost

    before, before_verified = newest_restorable(checkpoint.run)
    after_id, after_verified = newest_excluding(checkpoint.run_id, going_ids | already_going)
    after = None
    if after_id is not None:
        after = checkpoint if after_id == checkpoint.pk else Checkpoint.objects.get(pk=after_id)

    preview = DeletionPreview(
        checkpoint=checkpoint,
        copy=copy,
        parts=parts,
        files=sum(p.files for p in parts),
        bytes=sum(p.bytes for p in parts),
        monthly_cost=monthly,
        currency=currency,
        newest_before=before,
        newest_before_verified=before_verified,
        newest_after=after,
        newest_after_verified=after_verified,
        surviving_copies=surviving,
        grace_days=max(settings.DELETION_GRACE_DAYS, 0),
        archived_stay=stay_lines,
        archived_stay_bytes=stay_bytes,
    )
    if with_money:
        preview.early_deletion = _early_deletion(going, staying)

    overlapping = [j for j in open_jobs if copy is None or j.copy_id in (None, copy.pk)]
    refusal = (
        promises.held(checkpoint)
        or promises.pinned(checkpoint)
        or promises.leased(checkpoint)
        or _already_scheduled(checkpoint, copy, overlapping)
        or _no_copy(checkpoint, going)
        or promises.disputed_copy(copy)
        or promises.disputed_for_policy(checkpoint, origin)
        or promises.unidentified_for_policy(checkpoint, origin)
        or _no_files(preview.files)
        or _all_left_in_place_for_policy(origin, preview.files, stay_objects, stay_lines)
        or promises.last_verified_copy(checkpoint, copy, surviving)
        or promises.newest_restorable_for_policy(checkpoint, origin, before)
    )
    preview.kept_by = keepers.keepers([checkpoint.pk]).get(checkpoint.pk, [])
    if refusal is not None:
        preview.refusal, preview.refusal_code, preview.promise = refusal.message, refusal.code, refusal.promise
        return preview
    _approval_reasons(
        preview, checkpoint, copy, origin, newest_before=before, newest_after=after, actor=actor, together=together
    )
    return preview


def _already_scheduled(checkpoint: Checkpoint, copy: CheckpointCopy | None, overlapping: list) -> Refusal | None:
    """Promise 3: one frozen list per deletion; a second deletion of the same copies waits for the first."""
    if not overlapping:
        return None
    return Refusal(
        "already_scheduled",
        f"{checkpoint}{' at ' + str(copy.location) if copy else ''} is already scheduled for deletion "
        f"(deletion {overlapping[0].pk}); cancel that one first",
    )


def _no_copy(checkpoint: Checkpoint, going: list) -> Refusal | None:
    if going:
        return None
    return Refusal("nothing_to_delete", f"{checkpoint} has no present copy, so there is nothing to delete")


def _no_files(files: int) -> Refusal | None:
    if files:
        return None
    return Refusal("nothing_to_delete", "the copies to delete have no present files, so there is nothing to delete")


def _all_left_in_place_for_policy(origin: str, files: int, staying: int, lines: list[str]) -> Refusal | None:
    """A policy's deletion whose every object would stay (``archived_left_in_place``) would delete nothing, and
    the policy would schedule it again at each run: refused. A person may still schedule it (the preview says
    what stays): objects restored by the time it runs do go to the trash, which the catalog cannot see (a
    restore keeps the storage class), and a move frees its source only once restored."""
    if not origin.startswith("policy") or not staying or staying < files:
        return None
    return Refusal(
        "all_left_in_place",
        "a policy does not schedule a deletion that would delete nothing: "
        + " ".join(lines).rstrip(".")
        + "; restore them and delete it by hand",
    )


def _approval_reasons(
    preview: DeletionPreview,
    checkpoint: Checkpoint,
    copy: CheckpointCopy | None,
    origin: str,
    *,
    newest_before: Checkpoint | None,
    newest_after: Checkpoint | None,
    actor: Actor | None = None,
    together: Together | None = None,
) -> None:
    """Why a second person must approve (two-person rule): size, importance, a policy's proposal, the newest, a
    locked policy that keeps what it takes (its quorum)."""
    threshold = settings.DELETION_APPROVAL_BYTES
    reasons = preview.approval_reasons
    if preview.bytes > threshold:
        reasons.append(f"it frees more than the approval threshold of {threshold:,} bytes")
    if checkpoint.importance in APPROVAL_IMPORTANCE:
        reasons.append(f"the checkpoint is marked {checkpoint.get_importance_display().lower()}")
    if origin.startswith("policy:"):
        reasons.append(f"a retention policy proposed it ({origin})")
    is_newest = newest_before is not None and newest_before.pk == checkpoint.pk
    if is_newest and (copy is None or newest_after is None or newest_after.pk != checkpoint.pk):
        reasons.append("it removes the newest restorable checkpoint of the run")
    if preview.kept_by and not preview.surviving_copies:
        # Issue 27: a locked policy protects what it keeps, not only its own settings.
        reasons.append(keepers.approval_reason(str(checkpoint), preview.kept_by))
        preview.kept_approvals = keepers.quorum_approvals()
    preview.blast_reasons = blast_radius(
        preview.bytes, preview.files, checkpoint.run_id, actor=actor, together=together
    )
    if preview.blast_reasons:
        reasons.append(
            "its blast radius is above a limit, so two approvers (neither of them the person who asked) must approve "
            "it: " + "; ".join(preview.blast_reasons)
        )


@dataclass
class Together:
    """The deletions of one bulk call, which the blast radius counts as one request: their bytes and files in all
    and per run, and the jobs already made of them (so that the window does not count those twice)."""

    bytes: int = 0
    files: int = 0
    run_bytes: dict[int, int] = field(default_factory=dict)
    run_files: dict[int, int] = field(default_factory=dict)
    job_ids: list[int] = field(default_factory=list)

    def add(self, run_id: int | None, nbytes: int, files: int) -> None:
        self.bytes += nbytes
        self.files += files
        if run_id is not None:
            self.run_bytes[run_id] = self.run_bytes.get(run_id, 0) + nbytes
            self.run_files[run_id] = self.run_files.get(run_id, 0) + files


def blast_window() -> timedelta:
    return timedelta(hours=settings.BLAST_WINDOW_HOURS)


def _window_jobs(together: Together | None, now: datetime):
    """The deletions scheduled within the window that count towards the limits: every one but the cancelled and the
    restored from the trash (which took nothing for good) and those of this same bulk call (``together``)."""
    jobs = DeletionJob.objects.filter(requested_at__gte=now - blast_window()).exclude(
        state__in=[DeletionState.CANCELLED, DeletionState.RESTORED]
    )
    if together is not None and together.job_ids:
        jobs = jobs.exclude(pk__in=together.job_ids)
    return jobs


def _sums(jobs) -> tuple[int, int]:
    row = jobs.aggregate(b=Sum("bytes_total"), f=Sum("items_total"))
    return row["b"] or 0, row["f"] or 0


def blast_radius(
    nbytes: int,
    files: int,
    run_id: int | None,
    *,
    actor: Actor | None = None,
    together: Together | None = None,
    now: datetime | None = None,
) -> list[str]:
    """Why a deletion is larger than a single approver may let through, in words; [] when it is not.

    The limits (``CKPTFLEET_BLAST_MAX_BYTES``, ``_MAX_OBJECTS``, ``_MAX_RUN_PERCENT``) hold for the job, for the
    run and for the person who asks, over ``CKPTFLEET_BLAST_WINDOW_HOURS``: what this job deletes plus every
    deletion of the same run, and every deletion the same person asked for, scheduled within the window (not
    cancelled), whatever the number of jobs; a bulk call (``together``) is one request. The run's share is of its
    present bytes plus what the window's completed deletions of it already took. With no run (orphans that belong
    to none), the run is not asked.
    """
    now = now or timezone.now()
    window = f"in {settings.BLAST_WINDOW_HOURS} hours"
    this_bytes = max(nbytes, together.bytes if together else 0)
    this_files = max(files, together.files if together else 0)
    reasons = []
    if this_bytes > settings.BLAST_MAX_BYTES:
        reasons.append(f"{bytes_iec(this_bytes)} is more than the limit of {bytes_iec(settings.BLAST_MAX_BYTES)}")
    if this_files > settings.BLAST_MAX_OBJECTS:
        reasons.append(f"{this_files:,} objects and files is more than the limit of {settings.BLAST_MAX_OBJECTS:,}")
    recent = _window_jobs(together, now)
    if actor is not None:
        mine = (
            recent.filter(requested_by=actor.user)
            if actor.user is not None
            else recent.filter(requested_by__isnull=True, requested_label=actor.label)
        )
        done_bytes, done_files = _sums(mine)
        if done_bytes and done_bytes + this_bytes > settings.BLAST_MAX_BYTES:
            reasons.append(
                f"{actor.label} asks to delete {bytes_iec(done_bytes + this_bytes)} {window}, more than the limit of "
                f"{bytes_iec(settings.BLAST_MAX_BYTES)}"
            )
        if done_files and done_files + this_files > settings.BLAST_MAX_OBJECTS:
            reasons.append(
                f"{actor.label} asks to delete {done_files + this_files:,} objects and files {window}, more than the "
                f"limit of {settings.BLAST_MAX_OBJECTS:,}"
            )
    if run_id is None:
        return reasons
    run_going = max(nbytes, together.run_bytes.get(run_id, 0) if together else 0)
    run_going_files = max(files, together.run_files.get(run_id, 0) if together else 0)
    of_run = recent.filter(checkpoint__run_id=run_id)
    before_bytes, before_files = _sums(of_run)
    gone_bytes, _ = _sums(of_run.filter(state=DeletionState.COMPLETED))
    if before_bytes and before_bytes + run_going > settings.BLAST_MAX_BYTES:
        reasons.append(
            f"the run loses {bytes_iec(before_bytes + run_going)} {window}, more than the limit of "
            f"{bytes_iec(settings.BLAST_MAX_BYTES)}"
        )
    if before_files and before_files + run_going_files > settings.BLAST_MAX_OBJECTS:
        reasons.append(
            f"the run loses {before_files + run_going_files:,} objects and files {window}, more than the limit of "
            f"{settings.BLAST_MAX_OBJECTS:,}"
        )
    present = (
        CheckpointCopy.objects.filter(checkpoint__run_id=run_id, gone_at__isnull=True).aggregate(n=Sum("bytes"))["n"]
        or 0
    )
    run_bytes = present + gone_bytes
    going = run_going + before_bytes
    if run_bytes and going * 100 > run_bytes * settings.BLAST_MAX_RUN_PERCENT:
        share = going * 100 / run_bytes
        counted = "it takes" if going == nbytes else f"with the run's other deletions {window}, it takes"
        reasons.append(
            f"{counted} {share:.0f}% of the run's {bytes_iec(run_bytes)}, more than the limit of "
            f"{settings.BLAST_MAX_RUN_PERCENT}%"
        )
    return reasons


def preview(
    *,
    checkpoint: Checkpoint,
    copy: CheckpointCopy | None = None,
    origin: str = "manual",
    actor: Actor | None = None,
    together: Together | None = None,
) -> DeletionPreview:
    """What a deletion of ``checkpoint`` (or of one ``copy``) would remove, cost and leave, and whether it may.
    ``actor`` and ``together``: who would ask, and the bulk call it is part of (``blast_radius``)."""
    origin = _check_origin(origin)
    checkpoint = Checkpoint.objects.select_related("run__team").get(pk=checkpoint.pk)
    result = _assess(checkpoint, copy, origin, with_money=True, actor=actor, together=together)
    result.child_runs = _children_at_stake(checkpoint, result)
    prefixes = bucket_prefixes([p.copy.location_id for p in result.parts])
    sample = (
        ShardFile.objects.filter(copy_id__in=[p.copy.pk for p in result.parts], gone_at__isnull=True)
        .select_related("location")
        .order_by("location__name", "path")[:SAMPLE_ITEMS]
    )
    result.sample = [
        {
            "location": f.location.name,
            "path": prefixes.get(f.location_id, "") + f.path,
            "version_id": f.version_id,
            "size": f.size,
        }
        for f in sample
    ]
    return result


def archived_left_in_place(copies: list[CheckpointCopy], staying: frozenset[int]) -> tuple[list[str], int, int]:
    """Why some objects of these copies would stay after the deletion, how many and their bytes: they are in an
    archive storage class at a bucket whose deletions go to the trash without versioning (``staying``, from
    ``_trash_cannot_take_archived``), and S3 copies no unrestored archived object."""
    going = [c for c in copies if c.pk in staying]
    if not going:
        return [], 0, 0
    archived = {
        copy_id: (n, size or 0)
        for copy_id, n, size in ShardFile.objects.filter(
            copy_id__in=[c.pk for c in going], gone_at__isnull=True, storage_class__in=sorted(RESTORE_CLASSES)
        )
        .values("copy_id")
        .annotate(n=Count("pk"), size=Sum("size"))
        .order_by()
        .values_list("copy_id", "n", "size")
    }
    lines = []
    for c in going:
        n, size = archived.get(c.pk, (0, 0))
        if not n:
            continue
        lines.append(
            f"{n:,} object{'s' if n != 1 else ''} ({bytes_iec(size)}) at {c.location.name} "
            f"{'are' if n != 1 else 'is'} in GLACIER or DEEP_ARCHIVE, and deletions there go to a "
            f"{c.location.trash_days}-day trash in a bucket without versioning: S3 cannot copy an archived object "
            f"there until it is restored, so the deletion will leave {'them' if n != 1 else 'it'} in place unless "
            f"{'they are' if n != 1 else 'it is'} restored by the time it runs. Restore them first to delete them "
            "through the trash."
        )
    return lines, sum(n for n, _size in archived.values()), sum(size for _n, size in archived.values())


def _trash_cannot_take_archived(copies: list[CheckpointCopy]) -> frozenset[int]:
    """The copies whose archived objects a deletion leaves in place: at a bucket whose deletions go to a trash and
    whose versioning is not Enabled (actions.trash copies each object there, and S3 copies no unrestored archived
    object). A bucket whose versioning was never read counts as without: the preview then warns rather than
    promises; the executor asks the store itself."""
    soft = [c for c in copies if c.location.kind == LocationKind.BUCKET and c.location.trash_days > 0]
    if not soft:
        return frozenset()
    unversioned = set(
        Bucket.objects.filter(location_id__in={c.location_id for c in soft})
        .exclude(versioning="Enabled")
        .values_list("location_id", flat=True)
    )
    return frozenset(c.pk for c in soft if c.location_id in unversioned)


def bucket_prefixes(location_ids) -> dict[int, str]:
    """{location id: key prefix} of the bucket locations among ``location_ids`` (a key = prefix + path)."""
    prefixes = {}
    for location_id, prefix in Bucket.objects.filter(location_id__in=list(location_ids)).values_list(
        "location_id", "prefix"
    ):
        prefixes[location_id] = prefix if not prefix or prefix.endswith("/") else prefix + "/"
    return prefixes


# --- scheduling, approving, cancelling -------------------------------------------------------------


def schedule_deletion(
    *,
    checkpoint: Checkpoint,
    reason: str,
    actor: Actor,
    copy: CheckpointCopy | None = None,
    origin: str = "manual",
    request_id: str = "",
    confirm_children: bool = False,
    together: Together | None = None,
) -> DeletionJob:
    """Schedule the deletion of a whole checkpoint or one copy, freezing the exact list of objects and files.

    ``together``: the bulk call this deletion is part of, which the blast radius counts as one request; the job
    made is added to its ``job_ids``.

    When it leaves no copy of a checkpoint other runs started from (``catalog.lineage``), it is refused unless
    ``confirm_children`` is True; the refusal names the runs.

    Refused when the checkpoint is held or pinned, already scheduled, when it would delete the last
    verified copy while the checkpoint stays, and when a policy would delete the run's newest
    restorable checkpoint. It runs no sooner than the grace period from now; above the size
    threshold, for milestone and critical checkpoints and for policies a second person approves it.
    """
    reason = _text(reason, "a reason")
    origin = _check_origin(origin)
    _person_role(actor, Role.OPERATOR, doing="scheduling a deletion", target=checkpoint)
    grace = grace_period()
    with transaction.atomic():
        checkpoint = lock_checkpoint(checkpoint.pk)
        if copy is not None:
            copy = CheckpointCopy.objects.select_related("location").filter(pk=copy.pk).first()
            if copy is None:
                raise DomainError("that copy does not exist")
        assessed = _assess(checkpoint, copy, origin, with_money=False, actor=actor, together=together)
        if assessed.refusal:
            raise DomainError(assessed.refusal, code=assessed.refusal_code)
        children = _children_at_stake(checkpoint, assessed)
        if children and confirm_children is not True:
            raise DomainError(
                f"{children_text(children)} started from {checkpoint}: confirm that you mean to delete the "
                "checkpoint they were initialised from (confirm_children)",
                code="has_children",
            )
        now = timezone.now()
        job = DeletionJob.objects.create(
            scope=DeletionScope.COPY if copy is not None else DeletionScope.CHECKPOINT,
            checkpoint=checkpoint,
            copy=copy,
            state=DeletionState.AWAITING_APPROVAL if assessed.needs_approval else DeletionState.SCHEDULED,
            reason=reason,
            origin=origin,
            requested_by=actor.user,
            requested_label=actor.label,
            requested_at=now,
            needs_approval=assessed.needs_approval,
            approval_reasons=assessed.approval_reasons,
            approvals_required=assessed.approvals_required,
            execute_after=now + grace,
        )
        items, total_bytes = _freeze_items(job, [p.copy for p in assessed.parts])
        job.items_total, job.bytes_total = items, total_bytes
        job.save(update_fields=["items_total", "bytes_total"])
        if together is not None:
            together.job_ids.append(job.pk)
        _audit(
            actor,
            "deletion.schedule",
            target=checkpoint,
            reason=reason,
            before={"state": None},
            after={
                "deletion": job.pk,
                "state": job.state,
                "scope": "copy" if copy is not None else "checkpoint",
                "copies": [p.copy.pk for p in assessed.parts],
                "items": items,
                "bytes": total_bytes,
                "execute_after": job.execute_after.isoformat(),
                "needs_approval": job.needs_approval,
                "approvals_required": job.approvals_required,
                "approval_reasons": job.approval_reasons,
                "origin": origin,
                **({"child_runs": [str(r) for r in children]} if children else {}),
                **({"kept_by": [k.as_dict() for k in assessed.kept_by]} if assessed.kept_approvals else {}),
            },
            request_id=request_id,
        )
    return job


def _children_at_stake(checkpoint: Checkpoint, assessed: DeletionPreview) -> list:
    """Runs that started from ``checkpoint``, when the deletion would leave no present copy of it."""
    if assessed.surviving_copies:
        return []
    return child_runs(checkpoint.pk)


def children_text(runs) -> str:
    names = ", ".join(str(r) for r in runs)
    return f"run {names}" if len(runs) == 1 else f"{len(runs)} runs ({names})"


def _freeze_items(job: DeletionJob, copies: list[CheckpointCopy]) -> tuple[int, int]:
    """Copy the present files of ``copies`` into the job's items: full bucket keys with version and ETag."""
    files = ShardFile.objects.filter(copy_id__in=[c.pk for c in copies], gone_at__isnull=True)
    return freeze_files(job, files, location_ids={c.location_id for c in copies})


def freeze_files(job: DeletionJob, files, *, location_ids) -> tuple[int, int]:
    """Copy the rows of ``files`` (a ShardFile queryset at ``location_ids``) into the job's items, exactly: full
    bucket keys with version id, ETag, size and mtime. Returns (items, bytes)."""
    prefixes = bucket_prefixes(location_ids)
    rows = files.order_by("location_id", "path").values_list(
        "pk", "copy_id", "location_id", "path", "version_id", "etag", "size", "mtime"
    )
    count = total = 0
    batch: list[DeletionItem] = []
    for pk, copy_id, location_id, path, version_id, etag, size, mtime in rows.iterator(chunk_size=ITEM_BATCH):
        batch.append(
            DeletionItem(
                job=job,
                copy_id=copy_id,
                location_id=location_id,
                shard_file_id=pk,
                path=prefixes.get(location_id, "") + path,
                version_id=version_id,
                etag=etag,
                size=size,
                mtime=mtime,
            )
        )
        count += 1
        total += size
        if len(batch) >= ITEM_BATCH:
            DeletionItem.objects.bulk_create(batch)
            batch = []
    if batch:
        DeletionItem.objects.bulk_create(batch)
    return count, total


def _lock_job(job: DeletionJob) -> DeletionJob:
    """Lock the checkpoint (or, for an orphan clean-up, the location) and then the job."""
    if job.checkpoint_id is not None:
        lock_checkpoint(job.checkpoint_id)
    else:
        StorageLocation.objects.locked().filter(pk=cast(int, job.orphan_location_id)).first()
    return (
        DeletionJob.objects.select_for_update(of=("self",))
        .select_related("checkpoint__run__team", "orphan_location")
        .get(pk=job.pk)
    )


def audit_job_event(
    job: DeletionJob, actor: Actor, action: str, *, reason: str = "", before=None, after=None, request_id: str = ""
) -> None:
    """One event about a deletion job: on its checkpoint's history, or on its location's for an orphan clean-up."""
    target_id: int | None
    if job.checkpoint_id is not None:
        target_type, target_id, label = "checkpoint", job.checkpoint_id, str(job.checkpoint)
    else:
        target_type, target_id, label = "location", job.orphan_location_id, str(job.orphan_location)
    audit(
        actor,
        action,
        target_type=target_type,
        target_id=target_id,
        target_label=label,
        reason=reason,
        before=before,
        after=after,
        request_id=(request_id or "")[:64],
    )


def _job_target(job: DeletionJob) -> dict:
    if job.checkpoint_id is not None:
        return {"target_type": "checkpoint", "target_id": job.checkpoint_id}
    return {"target_type": "location", "target_id": job.orphan_location_id}


def _own_job(actor: Actor, job: DeletionJob) -> str:
    return f"{actor.label} scheduled deletion {job.pk}, so another person must approve it (separation of duties)"


def approve(*, job: DeletionJob, actor: Actor, request_id: str = "") -> DeletionJob:
    """Approve a deletion that needs it: an approver, never the person who scheduled it."""
    if actor.kind != ActorKind.USER or actor.user is None:
        raise PermissionRefused("only a person with the approver role approves a deletion")
    require_role(
        actor.user,
        Role.APPROVER,
        doing="approving a deletion",
        source=actor.source,
        **_job_target(job),
    )
    if job.state == DeletionState.AWAITING_APPROVAL and _same_person(actor, job.requested_by_id, job.requested_label):
        _refuse(actor, "approving a deletion", _own_job(actor, job), job.checkpoint)
    with transaction.atomic():
        current = _lock_job(job)
        if current.state != DeletionState.AWAITING_APPROVAL:
            raise DomainError(
                f"deletion {current.pk} is {current.get_state_display().lower()}, not awaiting approval",
                code="not_awaiting_approval",
            )
        if _same_person(actor, current.requested_by_id, current.requested_label):
            raise PermissionRefused(_own_job(actor, current))
        second = current.approvals_required >= 2 and current.approved_at is not None
        if second and _same_person(actor, current.approved_by_id, current.approved_label):
            raise PermissionRefused(
                f"{actor.label} approved deletion {current.pk} already; it needs a second, different approver "
                f"({'; '.join(current.approval_reasons)})"
            )
        checkpoint = current.checkpoint
        if checkpoint is not None and active_holds(checkpoint).exists():
            raise DomainError(f"{checkpoint} is under a legal hold; a held checkpoint's deletion is not approved")
        if checkpoint is not None and Pin.objects.filter(checkpoint=checkpoint, unpinned_at__isnull=True).exists():
            raise DomainError(f"{checkpoint} was pinned since the deletion was scheduled; cancel it or unpin first")
        now = timezone.now()
        if second:
            current.second_approved_by, current.second_approved_label, current.second_approved_at = (
                actor.user,
                actor.label,
                now,
            )
            fields = ["second_approved_by", "second_approved_label", "second_approved_at"]
        else:
            current.approved_by, current.approved_label, current.approved_at = actor.user, actor.label, now
            fields = ["approved_by", "approved_label", "approved_at"]
        if current.approvals_given >= max(current.approvals_required, 1):
            current.state = DeletionState.SCHEDULED
        current.save(update_fields=["state", *fields])
        audit_job_event(
            current,
            actor,
            "deletion.approve",
            reason="; ".join(current.approval_reasons),
            before={"deletion": current.pk, "state": DeletionState.AWAITING_APPROVAL},
            after={
                "deletion": current.pk,
                "state": current.state,
                "approvals": f"{current.approvals_given} of {max(current.approvals_required, 1)}",
                "approved_by": [label for label in (current.approved_label, current.second_approved_label) if label],
                "execute_after": current.execute_after.isoformat(),
            },
            request_id=request_id,
        )
    return current


def cancel(*, job: DeletionJob, reason: str, actor: Actor, request_id: str = "") -> DeletionJob:
    """Cancel a deletion until it starts running: an operator may; an approver may turn down (reject) one that
    awaits approval."""
    reason = _text(reason, "a reason")
    if actor.kind == ActorKind.USER:
        if actor.user is None:
            raise DomainError("cancelling a deletion needs the signed-in user", code="not_authenticated")
        rejecting = job.state == DeletionState.AWAITING_APPROVAL and has_role(actor.user, Role.APPROVER)
        if not (has_role(actor.user, Role.OPERATOR) or rejecting):
            require_role(
                actor.user,
                Role.OPERATOR,
                doing="cancelling a deletion",
                source=actor.source,
                **_job_target(job),
            )
    with transaction.atomic():
        current = _lock_job(job)
        if current.state not in (DeletionState.AWAITING_APPROVAL, DeletionState.SCHEDULED):
            raise DomainError(
                f"deletion {current.pk} is {current.get_state_display().lower()}; only a deletion that has not "
                "started can be cancelled",
                code="not_cancellable",
            )
        if (
            actor.kind == ActorKind.USER
            and not has_role(actor.user, Role.OPERATOR)
            and current.state != DeletionState.AWAITING_APPROVAL
        ):
            raise DomainError(
                f"deletion {current.pk} was approved meanwhile; only an operator can cancel it now",
                code="forbidden",
            )
        before = current.state
        now = timezone.now()
        current.state = DeletionState.CANCELLED
        current.cancelled_label = actor.label
        current.cancelled_at = now
        current.finished_at = now
        current.outcome = f"Cancelled by {actor.label}: {reason}"
        current.save(update_fields=["state", "cancelled_label", "cancelled_at", "finished_at", "outcome"])
        audit_job_event(
            current,
            actor,
            "deletion.cancel",
            reason=reason,
            before={"deletion": current.pk, "state": before},
            after={"deletion": current.pk, "state": current.state},
            request_id=request_id,
        )
    return current


# --- a governance hold's release asked for by an operator, approved by an approver (approvals) ---------

RELEASE_KIND = "hold.release"


def request_release(*, hold: Hold, reason: str, case_ref: str, actor: Actor, request_id: str = "") -> ChangeRequest:
    """An operator asks for a governance hold to be released: a change request that a person with the approver
    role, neither the one who asked nor the one who placed the hold, approves in the approvals inbox (issue 15,
    quorum). The release happens then, in the approval's transaction, with both people in its audit event."""
    reason = _text(reason, "a reason for the release")
    release_case = _text(case_ref, "a case reference for releasing a governance hold", limit=MAX_CASE_REF)
    target = hold.checkpoint if hold.checkpoint_id else hold.run
    _person_role(actor, Role.OPERATOR, doing="asking for a hold's release", target=target)
    if hold.mode != HoldMode.GOVERNANCE:
        raise DomainError("only a governance hold's release is asked of an approver; release this one directly")
    with transaction.atomic():
        current = Hold.objects.select_for_update(of=("self",)).select_related("run__team", "checkpoint").get(pk=hold.pk)
        if current.released_at is not None:
            raise DomainError(f"hold {current.case_ref} was already released by {current.released_label}")
        waiting = ChangeRequest.objects.filter(
            kind=RELEASE_KIND, target_id=current.pk, state=ChangeState.AWAITING_APPROVAL
        ).first()
        if waiting is not None:
            raise DomainError(
                f"the release of hold {current.case_ref} was already asked for by {waiting.requested_label} "
                f"(request {waiting.pk})",
                code="already_requested",
            )
        return approvals.request_change(
            kind=RELEASE_KIND,
            target_id=current.pk,
            target_label=f"{current.get_mode_display()} {current.case_ref} on {target}",
            before={"released": False, "release_reason": "", "release_case_ref": ""},
            after={"released": True, "release_reason": reason, "release_case_ref": release_case},
            actor=actor,
            reason=reason,
            request_id=request_id,
        )


def apply_release_change(change: ChangeRequest, approver: Actor) -> Applied:
    """Release the hold of an approved request (``approvals.registry``), in the approval's transaction; refused
    when the hold is released already, retained, or was placed by the approver."""
    asked = change.change["after"]
    hold = Hold.objects.filter(pk=change.target_id).first()
    if hold is None:
        raise DomainError("that hold no longer exists", code="stale", http_status=409)
    current = _lock_hold(hold)
    if current.released_at is not None:
        raise DomainError(
            f"hold {current.case_ref} was released since, by {current.released_label}", code="stale", http_status=409
        )
    now = timezone.now()
    if current.retained(now):
        raise PermissionRefused(_retained(current))
    if _same_person(approver, current.placed_by_id, current.placed_label):
        raise PermissionRefused(_own_hold(approver, current))
    mirror = _has_object_lock_files(
        checkpoint_ids=[current.checkpoint_id] if current.checkpoint_id else None, run_id=current.run_id
    )
    _write_release(
        current, approver, reason=asked["release_reason"], case_ref=asked["release_case_ref"], mirror=mirror, now=now
    )
    _mirror_after_commit(current)
    target = current.checkpoint if current.checkpoint_id else current.run
    return Applied(
        action="hold.release",
        target_label=f"{current.get_mode_display()} {current.case_ref} on {target}",
        before={"held": True, "hold": current.pk, "mode": current.mode, "placed_by": current.placed_label},
        after={
            "hold": current.pk,
            "released": True,
            "release_case_ref": asked["release_case_ref"],
            "object_lock": "pending" if mirror else "none",
        },
    )


def describe_release(change: dict) -> list[str]:
    after = change.get("after", {})
    return [
        "Release the governance hold",
        f"Why: {after.get('release_reason', '')}",
        f"Release case reference: {after.get('release_case_ref', '')}",
    ]
