"""Writes of retention: creating and editing policies (each audited), and a policy's proposals of deletions.

A policy never deletes anything itself. ``policy_propose`` schedules, through
``actions.services.schedule_deletion``, the checkpoints the policy's rules drop; those deletions
wait for a second person's approval and the grace period, and are re-checked when they execute.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import cast

from django.conf import settings
from django.db import DatabaseError, IntegrityError, transaction
from django.utils import timezone

from access.roles import Role, require_role
from actions import services as actions_services
from approvals import services as approvals
from approvals.models import ChangeRequest
from approvals.registry import Applied
from audit.actor import Actor
from audit.choices import ActorKind
from audit.services import audit
from catalog.choices import Importance
from catalog.models import Checkpoint, Run, Team
from catalog.recovery import disputed_checkpoints, newest_restorable_ids
from ckptfleet.errors import DomainError, PermissionRefused
from retention.models import RetentionPolicy
from retention.rules import KeepRules, loosenings
from retention.selectors import Scope, simulate

log = logging.getLogger(__name__)

RULE_FIELDS = ("keep_last", "keep_every", "keep_milestones", "keep_critical", "keep_stepless")
EDITABLE = ("name", *RULE_FIELDS, "enabled")


def _authorise(actor: Actor, doing: str) -> None:
    if actor.kind == ActorKind.USER:
        require_role(actor.user, Role.OPERATOR, doing=doing)


def policy_name(value) -> str:
    """A policy's name, stripped; a DomainError when it is empty or longer than 200 characters."""
    name = (value or "").strip()
    if not name:
        raise DomainError("a policy needs a name")
    if len(name) > 200:
        raise DomainError("a policy's name is at most 200 characters")
    return name


def _clean(values: dict) -> dict:
    out = dict(values)
    if "name" in out:
        out["name"] = policy_name(out["name"])
    for key in ("keep_last", "keep_every"):
        if key in out:
            value = out[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise DomainError(f"{key.replace('_', ' ')} must be a whole number, zero or more")
    if "keep_last" in out and out["keep_last"] < 1:
        raise DomainError("a policy keeps at least the newest checkpoint: keep last must be 1 or more")
    for key in ("keep_milestones", "keep_critical", "keep_stepless", "enabled"):
        if key in out and not isinstance(out[key], bool):
            raise DomainError(f"{key.replace('_', ' ')} must be true or false")
    unknown = set(out) - set(EDITABLE)
    if unknown:
        raise DomainError(f"a policy has no field {', '.join(sorted(unknown))}")
    return out


def _audit(
    policy: RetentionPolicy, *, actor: Actor, action: str, before: dict | None, reason: str = "", request_id: str = ""
) -> None:
    audit(
        actor,
        action,
        target_type="retention_policy",
        target_id=policy.pk,
        target_label=str(policy),
        reason=reason,
        before=before,
        after=policy.snapshot(),
        request_id=(request_id or "")[:64],
    )


def policy_create(
    *,
    actor: Actor,
    name: str,
    team: Team | None = None,
    run: Run | None = None,
    keep_last: int = 5,
    keep_every: int = 0,
    keep_milestones: bool = True,
    keep_critical: bool = True,
    keep_stepless: bool = True,
    enabled: bool = False,
    reason: str = "",
    request_id: str = "",
) -> RetentionPolicy:
    """A new policy for one team or one run; one transaction, one audit event.

    A person who creates it enabled gets it disabled, with a change request to enable it that a second
    person approves (``deletes_more``): a new enabled policy is the largest loosening there is. The page
    and the API show the request with the policy (``approvals.selectors.for_target``).
    """
    _authorise(actor, "creating a retention policy")
    if (team is None) == (run is None):
        raise DomainError("a policy is for one team or for one run: choose exactly one")
    values = _clean(
        dict(
            name=name,
            keep_last=keep_last,
            keep_every=keep_every,
            keep_milestones=keep_milestones,
            keep_critical=keep_critical,
            keep_stepless=keep_stepless,
            enabled=enabled,
        )
    )
    now = timezone.now()
    wants_enabled = values["enabled"] and actor.kind == ActorKind.USER
    if wants_enabled:
        values["enabled"] = False
    with transaction.atomic():
        scope = {"team": team} if team is not None else {"run": run}
        if RetentionPolicy.objects.select_for_update(of=("self",)).filter(**scope).exists():
            what = f"team {team}" if team is not None else f"run {run}"
            raise DomainError(f"{what} already has a retention policy: edit that one", code="exists")
        try:
            with transaction.atomic():
                policy = RetentionPolicy.objects.create(
                    **scope,
                    **values,
                    created_by=actor.user,
                    created_label=actor.label,
                    created_at=now,
                    updated_at=now,
                )
        except IntegrityError:
            raise DomainError("that team or run already has a retention policy", code="exists") from None
        _audit(policy, actor=actor, action="retention_policy.create", before=None, reason=reason, request_id=request_id)
        if wants_enabled:
            approvals.request_change(
                kind="retention_policy.enable",
                target_id=policy.pk,
                target_label=str(policy),
                before={"enabled": False, **{k: values[k] for k in RULE_FIELDS}},
                after={"enabled": True, **{k: values[k] for k in RULE_FIELDS}},
                actor=actor,
                reason=reason,
                request_id=request_id,
            )
    return policy


@dataclass(frozen=True)
class PolicyEdit:
    """What an edit did: applied at once (``change_request`` None), or filed for a second person."""

    policy: RetentionPolicy
    change_request: ChangeRequest | None = None
    changed: tuple[str, ...] = ()


def deletes_more(before: dict, after: dict) -> list[str]:
    """Why a policy as ``after`` may propose a deletion that the policy as ``before`` would not: the rule for
    which edits need a second person's approval (``approvals``). Empty: it cannot delete more.

    ``before`` and ``after`` are snapshots (``RetentionPolicy.snapshot``). A disabled policy proposes nothing,
    so creating a policy disabled, disabling one, and editing the rules of one that stays disabled need no
    second person; enabling one does (the approver sees its rules), and so does any rule of an enabled
    policy that keeps less than before (``retention.rules.loosenings``). Making a policy stricter, or only
    renaming it, applies at once.
    """
    if not after["enabled"]:
        return []
    if not before["enabled"]:
        return [f"enable it, so that it proposes deletions by its rules ({_rules(after).describe().lower()})"]
    return loosenings(_rules(before), _rules(after))


def lock_refusals(policy: RetentionPolicy, after: dict) -> list[str]:
    """Why a change to ``after`` is refused by the policy's lock: empty unless the lock is past its cooling-off
    and the change keeps less (``retention.rules.loosenings``), enables it, or moves it to another team or
    run. Disabling and renaming stay allowed: a disabled policy deletes nothing. The database refuses the
    same (the triggers of retention migration 0003)."""
    if not policy.lock_binding():
        return []
    before = policy.snapshot()
    out = loosenings(_rules(before), _rules(after))
    if after["enabled"] and not before["enabled"]:
        out.append("enable it")
    if (after["team_id"], after["run_id"]) != (before["team_id"], before["run_id"]):
        out.append("move it to another team or run")
    return out


def _rules(snapshot: dict) -> KeepRules:
    return KeepRules(**{k: snapshot[k] for k in RULE_FIELDS})


def _lock_policy(policy_id: int) -> RetentionPolicy:
    try:
        return (
            RetentionPolicy.objects.select_for_update(of=("self",))
            .select_related("team", "run__team")
            .get(pk=policy_id)
        )
    except (RetentionPolicy.DoesNotExist, ValueError, TypeError):
        raise DomainError("no such retention policy", code="not_found", http_status=404) from None


def _refuse_locked(policy: RetentionPolicy, refusals: list[str]) -> None:
    if refusals:
        raise DomainError(
            f"policy {policy.name!r} is locked (since {policy.locked_at:%Y-%m-%d %H:%M} UTC, past its cooling-off): "
            f"it can only be made stricter, and this would {'; '.join(refusals)}",
            code="locked",
            http_status=409,
        )


def _write(policy: RetentionPolicy, values: dict, changed: list[str]) -> None:
    for key in changed:
        setattr(policy, key, values[key])
    policy.updated_at = timezone.now()
    try:
        with transaction.atomic():
            policy.save(update_fields=[*changed, "updated_at"])
    except DatabaseError as exc:  # the lock's trigger, when the cooling-off ended between our check and the write
        raise DomainError(
            f"the database refused the change: {exc}".strip()[:500], code="locked", http_status=409
        ) from None


def _action(changed: list[str], policy: RetentionPolicy) -> str:
    if changed == ["enabled"]:
        return "retention_policy.enable" if policy.enabled else "retention_policy.disable"
    return "retention_policy.update"


def policy_update(*, policy_id: int, actor: Actor, reason: str = "", request_id: str = "", **changes) -> PolicyEdit:
    """Change a policy's name, rules or whether it is enabled; one transaction, one audit event.

    A person's change that can delete more (``deletes_more``) is not applied: it is filed, whole, as a
    change request for a different person with the approver role (``approvals.services``), who applies
    it. A locked policy past its cooling-off takes only stricter changes (``lock_refusals``), from anyone.
    Nothing is written (and nothing audited) when nothing changes.
    """
    _authorise(actor, "editing a retention policy")
    values = _clean(changes)
    with transaction.atomic():
        policy = _lock_policy(policy_id)
        before = policy.snapshot()
        changed = [k for k, v in values.items() if getattr(policy, k) != v]
        if not changed:
            return PolicyEdit(policy)
        after = {**before, **{k: values[k] for k in changed}}
        _refuse_locked(policy, lock_refusals(policy, after))
        if actor.kind == ActorKind.USER and deletes_more(before, after):
            # The request pins every rule, changed or not: the approver approves these rules, so a rule changed
            # since (even of a disabled policy, which applies at once) makes the request stale.
            pinned = [*changed, *(k for k in (*RULE_FIELDS, "enabled") if k not in changed)]
            change = approvals.request_change(
                kind="retention_policy.enable" if changed == ["enabled"] else "retention_policy.update",
                target_id=policy.pk,
                target_label=str(policy),
                before={k: before[k] for k in pinned},
                after={k: after[k] for k in pinned},
                actor=actor,
                reason=reason,
                request_id=request_id,
            )
            return PolicyEdit(policy, change, tuple(changed))
        _write(policy, values, changed)
        _audit(
            policy, actor=actor, action=_action(changed, policy), before=before, reason=reason, request_id=request_id
        )
    return PolicyEdit(policy, None, tuple(changed))


def apply_change(change, approver: Actor) -> Applied:
    """Apply an approved change request to its policy (``approvals.registry``), inside the approval's
    transaction: refused when the policy changed since it was asked for (the approver would be approving
    something else than what was shown), when the values no longer pass, or when the policy's lock now
    refuses it."""
    policy = _lock_policy(change.target_id)
    before = policy.snapshot()
    asked = change.change
    moved = [k for k, v in asked["before"].items() if before.get(k) != v]
    if moved:
        now = ", ".join(
            f"{_field_label(k)} is {_word(k, before.get(k))} (was {_word(k, asked['before'][k])})" for k in moved
        )
        raise DomainError(
            f"policy {policy.name!r} changed since this was asked for: {now}. Reject this request and ask again",
            code="stale",
            http_status=409,
        )
    values = _clean(asked["after"])
    after = {**before, **values}
    _refuse_locked(policy, lock_refusals(policy, after))
    changed = [k for k, v in values.items() if getattr(policy, k) != v]
    _write(policy, values, changed)
    return Applied(action=_action(changed, policy), target_label=str(policy), before=before, after=policy.snapshot())


FIELD_LABELS = {
    "name": "Name",
    "keep_last": "Keep the last N",
    "keep_every": "Keep every Mth step",
    "keep_milestones": "Keep milestones",
    "keep_critical": "Keep critical checkpoints",
    "keep_stepless": "Keep step-less exports",
    "enabled": "Enabled",
}


def _field_label(key: str) -> str:
    return FIELD_LABELS.get(key, key.replace("_", " "))


def _word(key: str, value) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if key == "keep_every" and value == 0:
        return "off"
    if isinstance(value, int):
        return f"{value:,}"
    return repr(value) if key == "name" else str(value)


def describe_change(change: dict) -> list[str]:
    """A change request in words, one line per field: "Keep the last N: 5 -> 3"."""
    before, after = change.get("before") or {}, change.get("after") or {}
    lines = [
        f"{_field_label(k)}: {_word(k, before.get(k))} → {_word(k, after[k])}"
        for k in after
        if after[k] != before.get(k)
    ]
    if after.get("enabled") and all(k in after for k in RULE_FIELDS):
        lines.append(f"Its rules then: {_rules(after).describe().lower()}")
    return lines


def _person_approver(actor: Actor, doing: str, policy_id: int) -> None:
    if actor.kind != ActorKind.USER or actor.user is None:
        raise PermissionRefused(f"{doing} is for a signed-in person with the approver role")
    require_role(actor.user, Role.APPROVER, doing=doing, target_type="retention_policy", target_id=policy_id)


def policy_lock(*, policy_id: int, actor: Actor, reason: str, request_id: str = "") -> RetentionPolicy:
    """Lock a policy (AWS Backup Vault Lock's model): for ``POLICY_LOCK_COOLING_OFF_HOURS`` a different approver
    can still unlock it; after that nobody can unlock or delete it, and it takes only stricter changes.

    A person with the approver role (admins hold it), with a reason; one transaction, one audit event.
    """
    reason = _required_reason(reason)
    _person_approver(actor, "locking a retention policy", policy_id)
    with transaction.atomic():
        policy = _lock_policy(policy_id)
        if policy.locked:
            raise DomainError(f"policy {policy.name!r} is already locked", code="already_locked", http_status=409)
        before = policy.snapshot()
        now = timezone.now()
        policy.locked_at = now
        policy.locked_by = actor.user
        policy.locked_label = actor.label
        policy.lock_cooling_off_ends_at = now + timedelta(hours=settings.POLICY_LOCK_COOLING_OFF_HOURS)
        policy.save(update_fields=["locked_at", "locked_by", "locked_label", "lock_cooling_off_ends_at"])
        _audit(policy, actor=actor, action="retention_policy.lock", before=before, reason=reason, request_id=request_id)
    return policy


def policy_unlock(*, policy_id: int, actor: Actor, reason: str, request_id: str = "") -> RetentionPolicy:
    """Undo a lock during its cooling-off: a person with the approver role *other than the one who locked it*
    (the second pair of eyes that every loosening gets), with a reason. Past the cooling-off: refused."""
    reason = _required_reason(reason)
    _person_approver(actor, "unlocking a retention policy", policy_id)
    with transaction.atomic():
        policy = _lock_policy(policy_id)
        if not policy.locked:
            raise DomainError(f"policy {policy.name!r} is not locked", code="not_locked", http_status=409)
        if policy.lock_binding():
            raise DomainError(
                f"policy {policy.name!r} is locked for good: its cooling-off ended "
                f"{policy.lock_cooling_off_ends_at:%Y-%m-%d %H:%M} UTC, so it can only be made stricter",
                code="locked",
                http_status=409,
            )
        if approvals.same_person(actor, policy.locked_by_id, policy.locked_label):
            raise PermissionRefused(
                f"{actor.label} locked policy {policy.name!r}, so another approver must unlock it "
                "(separation of duties)"
            )
        before = policy.snapshot()
        policy.locked_at = policy.locked_by = policy.lock_cooling_off_ends_at = None
        policy.locked_label = ""
        policy.save(update_fields=["locked_at", "locked_by", "locked_label", "lock_cooling_off_ends_at"])
        _audit(
            policy, actor=actor, action="retention_policy.unlock", before=before, reason=reason, request_id=request_id
        )
    return policy


def _required_reason(value) -> str:
    if not isinstance(value, str) or not value.strip():
        raise DomainError("a reason is required", code="required")
    if len(value.strip()) > 2000:
        raise DomainError("a reason is at most 2000 characters")
    return value.strip()


def policy_scope(policy: RetentionPolicy) -> tuple[Scope, frozenset[int]]:
    """The simulator's scope of a policy, and the runs it leaves to their own policies."""
    if policy.run_id is not None:
        return Scope(run_id=policy.run_id), frozenset()
    # Without a run, a policy has a team (the retentionpolicy_one_scope constraint).
    own = RetentionPolicy.objects.filter(run__team_id=cast(int, policy.team_id)).values_list("run_id", flat=True)
    return Scope(team_id=policy.team_id), frozenset(own)


def policy_dry_run(policy: RetentionPolicy, *, team_names: tuple[str, ...] | None = None, **kwargs):
    """What the policy would keep and propose now: the simulator on its rules and scope (``team_names``:
    only those teams' runs, for a person scoped to them)."""
    scope, exclude = policy_scope(policy)
    if team_names is not None:
        scope = replace(scope, team_names=team_names)
    return simulate(rules=policy.rules, scope=scope, exclude_run_ids=exclude, **kwargs)


@dataclass
class Proposal:
    """What one pass of a policy did: deletions scheduled, and checkpoints left alone with why."""

    policy_id: int
    scheduled: list[int] = field(default_factory=list)  # checkpoint ids
    skipped: dict[int, str] = field(default_factory=dict)


def policy_actor(policy: RetentionPolicy) -> Actor:
    return Actor.system(f"retention policy {policy.pk}")


def _refusal(decision, rules: KeepRules, newest: set[int], disputed: set[int]) -> str:
    """Why a dropped checkpoint must still not be proposed; '' when it may be. The engine already keeps
    these; this is the second check, on fresh facts, right before scheduling."""
    c = decision.checkpoint
    if c.held:
        return "held"
    if c.pinned:
        return "pinned"
    if c.scheduled:
        return "already scheduled for deletion"
    if c.newest_restorable or c.id in newest:
        return "the run's newest restorable checkpoint"
    if c.disputed or c.id in disputed:
        return "disputed: its copies disagree and nothing independent says which is right"
    if rules.keep_critical and c.importance == Importance.CRITICAL:
        return "critical"
    return ""


def policy_propose(*, policy_id: int, actor: Actor | None = None) -> Proposal:
    """Schedule the deletions a policy's rules call for, through the same path as a manual deletion.

    Never proposes a held, pinned or already scheduled checkpoint, a critical one under keep-critical,
    a disputed one, or a run's newest restorable checkpoint; ``schedule_deletion`` checks again under its lock, and
    the deletion itself once more when it executes. Safe to run twice: what is scheduled is skipped.
    """
    policy = RetentionPolicy.objects.select_related("team", "run").get(pk=policy_id)
    proposal = Proposal(policy_id=policy.pk)
    if not policy.enabled:
        return proposal
    actor = actor or policy_actor(policy)
    sim = policy_dry_run(policy)
    # Transient checkpoints first, fleet-wide (``retention.rules``): the first a policy offers to remove.
    candidates = sorted(
        ((r, d) for r in sim.runs for d in r.plan.dropped), key=lambda pair: not pair[1].checkpoint.transient
    )
    if candidates:
        # Fresh, right before scheduling: a checkpoint that became the newest restorable since the
        # simulation started is not proposed.
        run_ids = {r.run.pk for r, _ in candidates}
        newest = {ckpt for ckpt, _ in newest_restorable_ids(run_ids).values()}
        disputed = set(
            Checkpoint.objects.filter(disputed_checkpoints(), run_id__in=run_ids).values_list("pk", flat=True)
        )
        checkpoints = Checkpoint.objects.select_related("run__team").in_bulk([d.checkpoint.id for _, d in candidates])
    for _, decision in candidates:
        pk = decision.checkpoint.id
        refusal = _refusal(decision, policy.rules, newest, disputed)
        if refusal:
            proposal.skipped[pk] = refusal
            continue
        reason = f"retention policy {policy.name!r} (#{policy.pk}): {decision.why_dropped}"[:2000]
        try:
            actions_services.schedule_deletion(
                checkpoint=checkpoints[pk], copy=None, reason=reason, actor=actor, origin=policy.origin
            )
        except DomainError as exc:
            proposal.skipped[pk] = exc.message
            continue
        proposal.scheduled.append(pk)
    RetentionPolicy.objects.filter(pk=policy.pk).update(
        last_proposed_at=timezone.now(), last_proposed_count=len(proposal.scheduled)
    )
    log.info(
        "retention policy %s proposed %d deletions, skipped %d",
        policy.pk,
        len(proposal.scheduled),
        len(proposal.skipped),
    )
    return proposal
