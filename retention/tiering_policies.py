"""Tiering policies that act: which checkpoints a policy selects, its preview, and its scheduled runs.

A tiering policy never moves or deletes anything itself. On its schedule (``run_due``, from beat) or when an
operator runs it now, ``policy_run`` asks for what its rule selects through the same paths as a person:

- ``action=move``: ``promotion.moves.request_move``, whose jobs copy, verify the new copy and only then free
  the source through a two-phase deletion (which, with a policy's origin, waits for a second person);
- ``action=free_host``: ``actions.services.schedule_deletion`` of a host copy whose checkpoint has a verified,
  complete copy in object storage that stays.

What is never selected, and is named in the preview: held, pinned and disputed checkpoints, those with an
open deletion, those the product cannot positively identify (promise 12), and each run's newest complete
checkpoint. Milestones and critical checkpoints are left out when the policy says so. ``transient``
checkpoints come first. Creating and disabling a policy apply at once; enabling it, and any change to an
enabled policy, is a change request a second person with the approver role applies (``approvals``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from access.roles import Role, require_role
from actions import services as actions_services
from actions.leases import leased_ids
from actions.models import DeletionJob
from actions.promises import unidentified_ids
from actions.protection import OPEN_DELETION_STATES, protected_ids
from approvals import services as approvals
from approvals.registry import Applied
from audit.actor import Actor
from audit.choices import ActorKind
from audit.services import audit
from catalog.choices import ENDED_STATUSES, CopyState, Importance, Verification
from catalog.models import Checkpoint, CheckpointCopy, Run, Team
from catalog.recovery import disputed_checkpoints
from ckptfleet.errors import DomainError
from fleet.choices import LocationKind
from fleet.models import StorageLocation
from retention.models import TieringAction, TieringPolicy
from retention.services import policy_name
from retention.tiering import TARGET_CLASSES

log = logging.getLogger(__name__)

HOST_KINDS = (LocationKind.NVME, LocationKind.PFS)
RULE_FIELDS = (
    "action",
    "source_tier",
    "target_location",
    "target_storage_class",
    "run_ended_days",
    "min_age_hours",
    "except_milestones",
    "except_critical",
    "every_hours",
)
EDITABLE = ("name", *RULE_FIELDS, "enabled")
PREVIEW_LIMIT = 500  # checkpoints planned in a preview; a run acts on everything it selects
ORDER = {Importance.TRANSIENT: 0, Importance.ROUTINE: 1, Importance.MILESTONE: 2, Importance.CRITICAL: 3}


def policy_actor(policy: TieringPolicy) -> Actor:
    return Actor.system(f"tiering policy {policy.pk}")


def _authorise(actor: Actor, doing: str) -> None:
    if actor.kind == ActorKind.USER:
        require_role(actor.user, Role.OPERATOR, doing=doing)


# --- values ----------------------------------------------------------------------------------------


def _whole(value, what: str, *, low: int, high: int, none_ok: bool = False):
    if value is None and none_ok:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise DomainError(f"{what} must be a whole number from {low} to {high:,}")
    return value


def _clean(values: dict) -> dict:
    """Check and normalise the fields of a policy; a DomainError names the first bad one."""
    out = dict(values)
    unknown = set(out) - set(EDITABLE)
    if unknown:
        raise DomainError(f"a tiering policy has no field {', '.join(sorted(unknown))}")
    if "name" in out:
        out["name"] = policy_name(out["name"])
    if "action" in out and out["action"] not in TieringAction.values:
        raise DomainError(f"action must be one of {', '.join(TieringAction.values)}")
    if "source_tier" in out:
        out["source_tier"] = (out["source_tier"] or "").strip().lower()
        if len(out["source_tier"]) > 32:
            raise DomainError("the source tier is at most 32 characters")
    if "target_storage_class" in out:
        out["target_storage_class"] = (out["target_storage_class"] or "").strip().upper()
        if out["target_storage_class"] and out["target_storage_class"] not in TARGET_CLASSES:
            raise DomainError(f"the target storage class must be one of {', '.join(TARGET_CLASSES)}")
    if "target_location" in out and out["target_location"] is not None:
        target = out["target_location"]
        if not isinstance(target, StorageLocation):
            target = StorageLocation.objects.filter(pk=target).first() if isinstance(target, int) else None
            if target is None:
                raise DomainError("no such target location")
        if target.kind in HOST_KINDS:
            raise DomainError(f"{target} is a host location: a tiering move goes to object storage")
        out["target_location"] = target
    if "run_ended_days" in out:
        out["run_ended_days"] = _whole(out["run_ended_days"], "run ended days", low=0, high=3650, none_ok=True)
    if "min_age_hours" in out:
        out["min_age_hours"] = _whole(out["min_age_hours"], "minimum age in hours", low=0, high=24 * 3650)
    if "every_hours" in out:
        out["every_hours"] = _whole(out["every_hours"], "the schedule (every N hours)", low=1, high=24 * 31)
    for key in ("except_milestones", "except_critical", "enabled"):
        if key in out and not isinstance(out[key], bool):
            raise DomainError(f"{key.replace('_', ' ')} must be true or false")
    return out


def _check_whole(values: dict) -> None:
    """Rules that span fields, on the policy as it would be."""
    if values["action"] == TieringAction.MOVE and values.get("target_location") is None:
        raise DomainError("a move policy needs a target location (a bucket)")
    if values["action"] == TieringAction.FREE_HOST and values.get("target_location") is not None:
        raise DomainError(
            "a free-host-copies policy has no target: it frees host copies where a verified object copy exists"
        )


def _audit(
    policy: TieringPolicy, *, actor: Actor, action: str, before: dict | None, reason: str, request_id: str
) -> None:
    audit(
        actor,
        action,
        target_type="tiering_policy",
        target_id=policy.pk,
        target_label=str(policy),
        reason=reason,
        before=before,
        after=policy.snapshot(),
        request_id=(request_id or "")[:64],
    )


# --- writes ----------------------------------------------------------------------------------------


def policy_create(
    *,
    actor: Actor,
    name: str,
    team: Team | None = None,
    run: Run | None = None,
    action: str = TieringAction.MOVE,
    source_tier: str = "",
    target_location: StorageLocation | None = None,
    target_storage_class: str = "",
    run_ended_days: int | None = None,
    min_age_hours: int = 0,
    except_milestones: bool = True,
    except_critical: bool = True,
    every_hours: int = 24,
    enabled: bool = False,
    reason: str = "",
    request_id: str = "",
) -> TieringPolicy:
    """A new tiering policy, created disabled; one transaction, one audit event. A person who asks for it
    enabled gets a change request to enable it, which a second person with the approver role applies."""
    _authorise(actor, "creating a tiering policy")
    if team is not None and run is not None:
        raise DomainError("a policy is for one team, one run, or every team: not a team and a run")
    values = _clean(
        dict(
            name=name,
            action=action,
            source_tier=source_tier,
            target_location=target_location,
            target_storage_class=target_storage_class,
            run_ended_days=run_ended_days,
            min_age_hours=min_age_hours,
            except_milestones=except_milestones,
            except_critical=except_critical,
            every_hours=every_hours,
            enabled=enabled,
        )
    )
    _check_whole(values)
    wants_enabled = values["enabled"] and actor.kind == ActorKind.USER
    if wants_enabled:
        values["enabled"] = False
    now = timezone.now()
    with transaction.atomic():
        policy = TieringPolicy.objects.create(
            team=team,
            run=run,
            **values,
            created_by=actor.user,
            created_label=actor.label,
            created_at=now,
            updated_at=now,
        )
        _audit(policy, actor=actor, action="tiering_policy.create", before=None, reason=reason, request_id=request_id)
        if wants_enabled:
            _request(policy, {"enabled": True}, actor=actor, reason=reason, request_id=request_id)
    return policy


@dataclass(frozen=True)
class PolicyEdit:
    policy: TieringPolicy
    change_request: object | None = None
    changed: tuple[str, ...] = ()


def _lock(policy_id: int) -> TieringPolicy:
    policy = TieringPolicy.objects.select_for_update(of=("self",)).filter(pk=policy_id).first()
    if policy is None:
        raise DomainError("no such tiering policy", code="not_found", http_status=404)
    return policy


def _wire(values: dict) -> dict:
    """Field values as JSON (a change request stores them): the target location by id."""
    return {
        ("target_location_id" if k == "target_location" else k): (v.pk if isinstance(v, StorageLocation) else v)
        for k, v in values.items()
    }


def _request(policy: TieringPolicy, after_values: dict, *, actor: Actor, reason: str, request_id: str):
    before = policy.snapshot()
    after = {**before, **_wire(after_values)}
    return approvals.request_change(
        kind="tiering_policy.enable" if set(after_values) == {"enabled"} else "tiering_policy.update",
        target_id=policy.pk,
        target_label=str(policy),
        before=before,
        after=after,
        actor=actor,
        reason=reason,
        request_id=request_id,
    )


def _write(policy: TieringPolicy, values: dict) -> None:
    for key, value in values.items():
        setattr(policy, key, value)
    policy.updated_at = timezone.now()
    policy.save()


def _action_name(changed: list[str], policy: TieringPolicy) -> str:
    if changed == ["enabled"]:
        return "tiering_policy.enable" if policy.enabled else "tiering_policy.disable"
    return "tiering_policy.update"


def policy_update(*, policy_id: int, actor: Actor, reason: str = "", request_id: str = "", **changes) -> PolicyEdit:
    """Change a policy. Disabling, and any change to a disabled policy, applies at once; enabling it, or changing
    an enabled one, is filed whole as a change request for a second person (what a policy acts on grows)."""
    _authorise(actor, "editing a tiering policy")
    values = _clean(changes)
    with transaction.atomic():
        policy = _lock(policy_id)
        before = policy.snapshot()
        changed = [k for k, v in values.items() if getattr(policy, k) != v]
        if not changed:
            return PolicyEdit(policy)
        current = {k: getattr(policy, k) for k in EDITABLE}
        _check_whole({**current, **values})
        stricter = changed == ["enabled"] and values["enabled"] is False
        if actor.kind == ActorKind.USER and not stricter and (policy.enabled or values.get("enabled")):
            change = _request(
                policy, {k: values[k] for k in changed}, actor=actor, reason=reason, request_id=request_id
            )
            return PolicyEdit(policy, change, tuple(changed))
        _write(policy, {k: values[k] for k in changed})
        _audit(
            policy,
            actor=actor,
            action=_action_name(changed, policy),
            before=before,
            reason=reason,
            request_id=request_id,
        )
    return PolicyEdit(policy, None, tuple(changed))


def apply_change(change, approver: Actor) -> Applied:
    """Apply an approved change request (``approvals.registry``): refused when the policy changed since."""
    policy = _lock(change.target_id)
    before = policy.snapshot()
    asked = change.change
    moved = [k for k, v in asked["before"].items() if before.get(k) != v]
    if moved:
        raise DomainError(
            f"tiering policy {policy.name!r} changed since this was asked for ({', '.join(moved)}). "
            "Reject this request and ask again",
            code="stale",
            http_status=409,
        )
    after = {k: v for k, v in asked["after"].items() if before.get(k) != v}
    if "target_location_id" in after:
        after["target_location"] = after.pop("target_location_id")
    values = _clean(after)
    _check_whole({**{k: getattr(policy, k) for k in EDITABLE}, **values})
    changed = list(values)
    _write(policy, values)
    return Applied(
        action=_action_name(changed, policy), target_label=str(policy), before=before, after=policy.snapshot()
    )


def describe_change(change: dict) -> list[str]:
    before, after = change.get("before", {}), change.get("after", {})
    lines = []
    for key, value in after.items():
        if before.get(key) != value:
            lines.append(f"{key.replace('_', ' ')}: {before.get(key)!r} -> {value!r}")
    return lines or ["no field changes"]


# --- selection -------------------------------------------------------------------------------------


@dataclass
class Selected:
    """One checkpoint a policy acts on: for a move, the checkpoint; for free_host, its host copy too."""

    checkpoint: Checkpoint
    copy: CheckpointCopy | None = None
    keeps: CheckpointCopy | None = None  # free_host: the verified object copy that stays


@dataclass
class Selection:
    policy: TieringPolicy
    selected: list[Selected] = field(default_factory=list)
    skipped: list[tuple[Checkpoint, str]] = field(default_factory=list)

    @property
    def bytes(self) -> int:
        if self.policy.action == TieringAction.FREE_HOST:
            return sum(s.copy.bytes for s in self.selected if s.copy is not None)
        return sum(s.checkpoint.present_bytes for s in self.selected)  # type: ignore[attr-defined]


def _runs(policy: TieringPolicy, now: datetime):
    runs = Run.objects.select_related("team")
    if policy.run_id:
        runs = runs.filter(pk=policy.run_id)
    elif policy.team_id:
        runs = runs.filter(team_id=policy.team_id)
    if policy.run_ended_days is not None:
        cutoff = now - timedelta(days=policy.run_ended_days)
        # Ended at least N days ago: by when its status last changed (a run ended before statuses had a time
        # counts as ended long ago).
        runs = runs.filter(
            Q(status__in=ENDED_STATUSES), Q(status_changed_at__lte=cutoff) | Q(status_changed_at__isnull=True)
        )
    return list(runs)


def _newest_complete_ids(run_ids: list[int]) -> set[int]:
    """Each run's newest checkpoint with a present complete copy: it stays where it is."""
    rows = (
        CheckpointCopy.objects.filter(
            checkpoint__run_id__in=run_ids, gone_at__isnull=True, state=CopyState.COMPLETE, temporary=False
        )
        .values_list("checkpoint__run_id", "checkpoint_id", "checkpoint__step", "checkpoint__first_seen_at")
        .distinct()
    )
    best: dict[int, tuple] = {}
    for run_id, checkpoint_id, step, seen in rows:
        key = (step is not None, step or 0, seen)
        if run_id not in best or key > best[run_id][0]:
            best[run_id] = (key, checkpoint_id)
    return {checkpoint_id for _, checkpoint_id in best.values()}


def _scheduled_ids(run_ids: list[int]) -> set[int]:
    return set(
        DeletionJob.objects.filter(state__in=OPEN_DELETION_STATES, checkpoint__run_id__in=run_ids).values_list(
            "checkpoint_id", flat=True
        )
    )


def select(policy: TieringPolicy, *, now: datetime | None = None) -> Selection:
    """What the policy would act on now, and what it leaves out with the reason, transient checkpoints first."""
    now = now or timezone.now()
    selection = Selection(policy)
    runs = _runs(policy, now)
    run_ids = [r.pk for r in runs]
    if not run_ids:
        return selection
    held, pinned = protected_ids(run_ids)
    leased = leased_ids(Checkpoint.objects.filter(run_id__in=run_ids).values_list("pk", flat=True), now=now)
    disputed = set(Checkpoint.objects.filter(disputed_checkpoints(), run_id__in=run_ids).values_list("pk", flat=True))
    unknown = unidentified_ids(run_ids, now=now)
    newest = _newest_complete_ids(run_ids)
    scheduled = _scheduled_ids(run_ids)
    copies = list(
        CheckpointCopy.objects.filter(
            checkpoint__run_id__in=run_ids, gone_at__isnull=True, state=CopyState.COMPLETE, temporary=False
        ).select_related("location", "checkpoint__run__team")
    )
    by_checkpoint: dict[int, list[CheckpointCopy]] = {}
    for c in copies:
        by_checkpoint.setdefault(c.checkpoint_id, []).append(c)
    age_cutoff = now - timedelta(hours=policy.min_age_hours)
    checkpoints = sorted(
        {c.checkpoint_id: c.checkpoint for c in copies}.values(),
        key=lambda c: (ORDER.get(c.importance, 1), c.run_id, c.step if c.step is not None else -1),
    )
    for checkpoint in checkpoints:
        pk = checkpoint.pk
        reason = ""
        if pk in held:
            reason = "held: nothing held is moved or freed, by anyone"
        elif pk in pinned:
            reason = "pinned: an operator keeps it where it is"
        elif pk in leased:
            reason = "leased: a job is using it; it waits until the lease ends"
        elif pk in disputed:
            reason = "disputed: its copies disagree and nothing says which is right"
        elif pk in unknown:
            reason = (
                "cannot be positively identified (a stale or failed inventory, or an unknown layout): "
                "take a fresh inventory"
            )
        elif pk in newest:
            reason = "the run's newest complete checkpoint: it stays where it is"
        elif pk in scheduled:
            reason = "already scheduled for deletion"
        elif policy.except_milestones and checkpoint.importance == Importance.MILESTONE:
            reason = "a milestone (the policy leaves milestones)"
        elif policy.except_critical and checkpoint.importance == Importance.CRITICAL:
            reason = "critical (the policy leaves critical checkpoints)"
        present = by_checkpoint.get(pk, [])
        sources = [
            c
            for c in present
            if (not policy.source_tier or c.location.tier == policy.source_tier)
            and (policy.action != TieringAction.FREE_HOST or c.location.kind in HOST_KINDS)
        ]
        if not reason and not sources:
            continue  # nothing of it where the policy looks: not a candidate, not worth a line
        if not reason and policy.min_age_hours and all(_copy_age_origin(c, checkpoint) > age_cutoff for c in sources):
            reason = f"younger than {policy.min_age_hours} h"
        if reason:
            if sources or reason.startswith("held"):
                selection.skipped.append((checkpoint, reason))
            continue
        if policy.action == TieringAction.FREE_HOST:
            keeps = next(
                (c for c in present if c.location.kind not in HOST_KINDS and c.verification == Verification.VERIFIED),
                None,
            )
            if keeps is None:
                selection.skipped.append((checkpoint, "no verified copy in object storage yet: the host copy stays"))
                continue
            for c in sources:
                if _copy_age_origin(c, checkpoint) <= age_cutoff:
                    selection.selected.append(Selected(checkpoint, copy=c, keeps=keeps))
            continue
        target = policy.target_location
        already = [
            c
            for c in present
            if c.location_id == policy.target_location_id
            and (not policy.target_storage_class or _copy_class(c) == policy.target_storage_class)
        ]
        if already:
            continue  # already where the policy wants it
        verified = [c for c in sources if c.verification == Verification.VERIFIED]
        if not verified:
            selection.skipped.append((checkpoint, "no verified copy to move from: a policy moves only verified copies"))
            continue
        checkpoint.present_bytes = max(c.bytes for c in verified)  # type: ignore[attr-defined]
        selection.selected.append(Selected(checkpoint, copy=_hottest(verified, target)))
    return selection


def _copy_age_origin(copy, checkpoint):
    """How old a copy is: its newest file's time (mtime, LastModified), else its checkpoint's saved time, and its
    first sighting only when neither is known (``catalog.ages``)."""
    return copy.newest_mtime or checkpoint.saved_at or copy.first_seen_at


def _copy_class(copy: CheckpointCopy) -> str:
    classes = set(copy.files.filter(gone_at__isnull=True).values_list("storage_class", flat=True)[:50])
    return classes.pop().upper() if len(classes) == 1 else ""


def _hottest(sources: list[CheckpointCopy], target) -> CheckpointCopy:
    """The copy a move starts from: a verified one first, then one already in object storage (server-side copy)."""
    return sorted(
        sources,
        key=lambda c: (c.verification != Verification.VERIFIED, c.location.kind in HOST_KINDS, c.pk),
    )[0]


# --- preview and runs ------------------------------------------------------------------------------


@dataclass
class Preview:
    selection: Selection
    plan: object | None = None  # promotion.moves.MovePlan for a move policy
    frees: list[dict] = field(default_factory=list)  # free_host: per copy, bytes and money freed
    monthly_saving: Decimal | None = None
    currency: str = ""


def preview(policy: TieringPolicy, *, now: datetime | None = None) -> Preview:
    """What a run would ask for now, with the money: changes nothing."""
    selection = select(policy, now=now)
    result = Preview(selection)
    chosen = selection.selected[:PREVIEW_LIMIT]
    if policy.action == TieringAction.MOVE:
        if chosen:
            from promotion import moves  # promotion sits below retention

            result.plan = moves.move_plan(
                checkpoints=[s.checkpoint for s in chosen],
                target_location=policy.target_location,
                target_storage_class=policy.target_storage_class,
            )
        return result
    total = Decimal(0)
    priced = True
    for s in chosen:
        assert s.copy is not None
        p = actions_services.preview(checkpoint=s.checkpoint, copy=s.copy, origin=policy.origin)
        result.currency = p.currency or result.currency
        money = p.monthly_cost
        if money is None:
            priced = False
        else:
            total += money
        result.frees.append(
            {
                "checkpoint": s.checkpoint,
                "copy": s.copy,
                "keeps": s.keeps,
                "bytes": s.copy.bytes,
                "monthly": money,
                "refusal": p.refusal or "",
            }
        )
    result.monthly_saving = total if priced else None
    return result


@dataclass
class RunSummary:
    policy_id: int
    asked: list[int] = field(default_factory=list)  # move job ids, or deletion job ids
    skipped: dict[int, str] = field(default_factory=dict)  # checkpoint id -> why

    def as_dict(self) -> dict:
        return {"asked": len(self.asked), "job_ids": self.asked[:200], "skipped": len(self.skipped)}


def policy_run(*, policy_id: int, actor: Actor | None = None, reason: str = "", request_id: str = "") -> RunSummary:
    """One pass of a policy: ask for what it selects, through the same services a person uses. Safe to run
    twice: a checkpoint with an open move or deletion is refused by those services and counted as skipped.

    A person may run an enabled policy now (operator role); the request is audited as ``tiering_policy.run``
    and the moves and deletions it asks for carry the policy's own actor and origin."""
    if actor is not None:
        _authorise(actor, "running a tiering policy")
    policy = TieringPolicy.objects.select_related("team", "run", "target_location").filter(pk=policy_id).first()
    if policy is None:
        raise DomainError("no such tiering policy", code="not_found", http_status=404)
    summary = RunSummary(policy_id=policy.pk)
    if not policy.enabled:
        if actor is not None:
            raise DomainError("the policy is disabled: enable it (a second person approves) before it runs")
        return summary
    if actor is not None:
        with transaction.atomic():
            _audit(policy, actor=actor, action="tiering_policy.run", before=None, reason=reason, request_id=request_id)
    selection = select(policy)
    for checkpoint, why in selection.skipped:
        summary.skipped[checkpoint.pk] = why
    own = policy_actor(policy)
    why_text = f"tiering policy {policy.name!r} (#{policy.pk}): {policy.describe()}"[:2000]
    if policy.action == TieringAction.MOVE:
        from promotion import moves

        for s in selection.selected:
            try:
                jobs = moves.request_move(
                    checkpoints=[s.checkpoint],
                    target_location=policy.target_location,
                    target_storage_class=policy.target_storage_class,
                    actor=own,
                    reason=why_text,
                    origin=policy.origin,
                )
            except DomainError as exc:
                summary.skipped[s.checkpoint.pk] = exc.message
                continue
            summary.asked.extend(j.pk for j in jobs)
    else:
        for s in selection.selected:
            try:
                job = actions_services.schedule_deletion(
                    checkpoint=s.checkpoint, copy=s.copy, reason=why_text, actor=own, origin=policy.origin
                )
            except DomainError as exc:
                summary.skipped[s.checkpoint.pk] = exc.message
                continue
            summary.asked.append(job.pk)
    TieringPolicy.objects.filter(pk=policy.pk).update(last_run_at=timezone.now(), last_run_summary=summary.as_dict())
    log.info("tiering policy %s asked for %d jobs, skipped %d", policy.pk, len(summary.asked), len(summary.skipped))
    return summary


def due_policy_ids(now: datetime | None = None) -> list[int]:
    """Enabled policies whose schedule has come round."""
    now = now or timezone.now()
    due = []
    for pk, every, last in TieringPolicy.objects.filter(enabled=True).values_list("pk", "every_hours", "last_run_at"):
        if last is None or last + timedelta(hours=every) <= now:
            due.append(pk)
    return due
