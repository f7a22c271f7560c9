"""Writes of retention: creating and editing policies (each audited), and a policy's proposals of deletions.

A policy never deletes anything itself. ``policy_propose`` schedules, through
``actions.services.schedule_deletion``, the checkpoints the policy's rules drop; those deletions
wait for a second person's approval and the grace period, and are re-checked when they execute.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import cast

from django.db import IntegrityError, transaction
from django.utils import timezone

from access.roles import Role, require_role
from actions import services as actions_services
from audit.actor import Actor
from audit.choices import ActorKind
from audit.services import audit
from catalog.choices import Importance
from catalog.models import Checkpoint, Run, Team
from catalog.recovery import disputed_checkpoints, newest_restorable_ids
from ckptfleet.errors import DomainError
from retention.models import RetentionPolicy
from retention.rules import KeepRules
from retention.selectors import Scope, simulate

log = logging.getLogger(__name__)

EDITABLE = ("name", "keep_last", "keep_every", "keep_milestones", "keep_critical", "keep_stepless", "enabled")


def _authorise(actor: Actor, doing: str) -> None:
    if actor.kind == ActorKind.USER:
        require_role(actor.user, Role.OPERATOR, doing=doing)


def _clean(values: dict) -> dict:
    out = dict(values)
    if "name" in out:
        out["name"] = (out["name"] or "").strip()
        if not out["name"]:
            raise DomainError("a policy needs a name")
        if len(out["name"]) > 200:
            raise DomainError("a policy's name is at most 200 characters")
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
    """A new policy for one team or one run; one transaction, one audit event."""
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
    with transaction.atomic():
        scope = {"team": team} if team is not None else {"run": run}
        if RetentionPolicy.objects.select_for_update().filter(**scope).exists():
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
    return policy


def policy_update(
    *, policy_id: int, actor: Actor, reason: str = "", request_id: str = "", **changes
) -> RetentionPolicy:
    """Change a policy's name, rules or whether it is enabled; one transaction, one audit event.

    Nothing is written (and nothing audited) when nothing changes.
    """
    _authorise(actor, "editing a retention policy")
    values = _clean(changes)
    with transaction.atomic():
        try:
            policy = (
                RetentionPolicy.objects.select_for_update(of=("self",))
                .select_related("team", "run__team")
                .get(pk=policy_id)
            )
        except RetentionPolicy.DoesNotExist:
            raise DomainError("no such retention policy", code="not_found", http_status=404) from None
        before = policy.snapshot()
        changed = [k for k, v in values.items() if getattr(policy, k) != v]
        if not changed:
            return policy
        for key in changed:
            setattr(policy, key, values[key])
        policy.updated_at = timezone.now()
        policy.save(update_fields=[*changed, "updated_at"])
        action = "retention_policy.update"
        if changed == ["enabled"]:
            action = "retention_policy.enable" if policy.enabled else "retention_policy.disable"
        _audit(policy, actor=actor, action=action, before=before, reason=reason, request_id=request_id)
    return policy


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
        return "disputed: its copies disagree and nothing independent says which is right (promise 12)"
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
    candidates = [(r, d) for r in sim.runs for d in r.plan.dropped]
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
