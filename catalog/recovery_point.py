"""Recovery point: how much training a run would lose if it had to restore now, in hours, steps and GPU-hours, and
the operator's settings behind it.

The answer itself is the run's recovery model (``catalog.recovery_model``: the checkpoint, its save, the loss, the
GPUs and their source, the objective), re-exported here under the names the pages and the API import. A run with no
restorable checkpoint at a reachable location has lost everything since it started: the recovery point counts from
its first checkpoint (or the run's creation) and every step seen is lost.

Setting GPUs and objectives goes through ``run_gpus_set``, ``run_rpo_set`` and ``team_rpo_set``: the operator
role, the row locked, one audit event (``run.gpus``, ``run.rpo``, ``team.rpo``) in the same transaction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.db.models import Min

from access.roles import Role, require_role
from audit.actor import Actor
from audit.choices import ActorKind
from audit.services import audit
from catalog.models import Checkpoint, CheckpointCopy, Run, Team
from catalog.recovery import restorable_copies
from catalog.recovery_model import (
    DEFAULT_RPO_HOURS,
    FLEET_LIMIT,
    GpuSource,
    RecoveryPoint,
    gpus_of,
    objective_of,
    over_objective,
    recovery_point_of,
    recovery_points_of,
)
from ckptfleet.errors import DomainError

__all__ = [
    "DEFAULT_RPO_HOURS",
    "FLEET_LIMIT",
    "GpuSource",
    "RecoveryPoint",
    "gpus_of",
    "objective_of",
    "over_objective",
    "recovery_point_of",
    "recovery_points_of",
    "resume_cost",
    "resume_costs",
    "run_gpus_set",
    "run_rpo_set",
    "team_rpo_set",
]

MAX_RPO_HOURS = 24.0 * 366 * 10
MAX_GPUS = 1_000_000


def _hours(later: datetime, earlier: datetime) -> float:
    return max(0.0, (later - earlier).total_seconds() / 3600.0)


# --- setting GPUs and objectives --------------------------------------------------------------------------


def gpus_clean(value) -> int | None:
    """A GPU count from 1 to a million, or None (empty) to clear it; anything else is a DomainError."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, bool):
        raise DomainError("gpus must be a whole number from 1 to 1,000,000", code="bad_gpus")
    if isinstance(value, str):
        text = value.strip()
        value = int(text) if text.lstrip("-").isdigit() and len(text) <= 12 else text
    if not isinstance(value, int) or not 1 <= value <= MAX_GPUS:
        raise DomainError(f"gpus must be a whole number from 1 to 1,000,000; got {value!r}", code="bad_gpus")
    return value


def hours_clean(value) -> float | None:
    """An objective in hours, more than 0 and at most ten years, or None (empty) to clear it."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, bool):
        raise DomainError("the objective must be a number of hours above 0", code="bad_rpo")
    try:
        hours = float(value)
    except (TypeError, ValueError):
        raise DomainError(f"the objective must be a number of hours above 0; got {value!r}", code="bad_rpo") from None
    if not math.isfinite(hours) or hours <= 0 or hours > MAX_RPO_HOURS:
        raise DomainError(
            f"the objective must be above 0 and at most {MAX_RPO_HOURS:,.0f} hours; got {value!r}", code="bad_rpo"
        )
    return hours


def _operator(actor: Actor, doing: str, target_type: str, target) -> None:
    if actor.kind == ActorKind.USER:
        if actor.user is None:
            raise DomainError(f"{doing} by a person needs the signed-in user", code="not_authenticated")
        require_role(
            actor.user,
            Role.OPERATOR,
            doing=doing,
            target_type=target_type,
            target_id=target.pk,
            target_label=str(target),
            source=actor.source,
        )


def _reason(reason) -> str:
    if reason is not None and not isinstance(reason, str):
        raise DomainError("the reason must be text", code="bad_reason")
    text = " ".join((reason or "").split())
    if len(text) > 500:
        raise DomainError("the reason is longer than 500 characters", code="bad_reason")
    return text


def _set_run_field(run: Run, field: str, value, *, action: str, key: str, actor: Actor, reason: str, request_id: str):
    """Write one operator-set field of ``run`` under its row lock, with one audit event; nothing when unchanged."""
    with transaction.atomic():
        locked = Run.objects.select_for_update(of=("self",), no_key=True).select_related("team").get(pk=run.pk)
        before = getattr(locked, field)
        if before == value:
            return locked
        setattr(locked, field, value)
        locked.save(update_fields=[field])
        extra = {"source": "operator"} if key == "gpus" else {}
        audit(
            actor,
            action,
            target_type="run",
            target_id=locked.pk,
            target_label=str(locked),
            reason=reason,
            before={key: before, **extra},
            after={key: value, **extra},
            request_id=(request_id or "")[:64],
        )
    return locked


def run_gpus_set(*, run: Run, gpus, actor: Actor, reason: str = "", request_id: str = "") -> Run:
    """Set (or clear, with None) the GPU count an operator gives ``run``; audited as ``run.gpus``."""
    gpus = gpus_clean(gpus)
    reason = _reason(reason)
    _operator(actor, "setting a run's GPUs", "run", run)
    return _set_run_field(
        run, "operator_gpus", gpus, action="run.gpus", key="gpus", actor=actor, reason=reason, request_id=request_id
    )


def run_rpo_set(*, run: Run, hours, actor: Actor, reason: str = "", request_id: str = "") -> Run:
    """Set (or clear, with None: its team's applies) ``run``'s recovery point objective; audited as ``run.rpo``."""
    hours = hours_clean(hours)
    reason = _reason(reason)
    _operator(actor, "setting a run's recovery point objective", "run", run)
    return _set_run_field(
        run, "rpo_hours", hours, action="run.rpo", key="rpo_hours", actor=actor, reason=reason, request_id=request_id
    )


def team_rpo_set(*, team: Team, hours, actor: Actor, reason: str = "", request_id: str = "") -> Team:
    """Set (or clear) ``team``'s default recovery point objective; audited as ``team.rpo``."""
    hours = hours_clean(hours)
    reason = _reason(reason)
    _operator(actor, "setting a team's recovery point objective", "team", team)
    with transaction.atomic():
        locked = Team.objects.select_for_update(of=("self",)).get(pk=team.pk)
        if locked.rpo_hours == hours:
            return locked
        before = locked.rpo_hours
        locked.rpo_hours = hours
        locked.save(update_fields=["rpo_hours"])
        audit(
            actor,
            "team.rpo",
            target_type="team",
            target_id=locked.pk,
            target_label=str(locked),
            reason=reason,
            before={"rpo_hours": before},
            after={"rpo_hours": hours},
            request_id=(request_id or "")[:64],
        )
    return locked


def sidecar_gpus_apply(said: dict[int, int], *, actor: Actor) -> list[int]:
    """Keep what sidecars said of runs' GPUs, ``{run id: gpus}``, as the ingest found them; audited as
    ``run.gpus`` (source sidecar) when it changes."""
    changed = []
    for run_id, gpus in sorted(said.items()):
        run = Run.objects.select_for_update(of=("self",), no_key=True).select_related("team").filter(pk=run_id).first()
        if run is None or run.sidecar_gpus == gpus:
            continue
        before = run.sidecar_gpus
        run.sidecar_gpus = gpus
        run.save(update_fields=["sidecar_gpus"])
        audit(
            actor,
            "run.gpus",
            target_type="run",
            target_id=run.pk,
            target_label=str(run),
            before={"gpus": before, "source": "sidecar"},
            after={"gpus": gpus, "source": "sidecar"},
        )
        changed.append(run_id)
    return changed


@dataclass(frozen=True)
class ResumeCost:
    """What resuming ``run`` from one checkpoint throws away (for a rung of ``catalog.ladder``)."""

    lost_steps: int | None
    lost_hours: float
    gpus: int | None
    gpus_source: str

    @property
    def gpu_hours(self) -> float | None:
        return self.lost_hours * self.gpus if self.gpus is not None else None


def _saved_times(checkpoints: list[Checkpoint]) -> dict[int, datetime]:
    """When each checkpoint was saved, by the recovery model's rule: ``Checkpoint.saved_at`` (``catalog.ages``), else
    the earliest ``newest_mtime`` of its restorable copies, else of any copy, else when the catalog first saw it."""
    ids = [c.pk for c in checkpoints]
    rows = (
        CheckpointCopy.objects.filter(checkpoint_id__in=ids, newest_mtime__isnull=False)
        .values("checkpoint_id")
        .annotate(t=Min("newest_mtime"), restorable=Min("newest_mtime", filter=restorable_copies()))
        .order_by()  # grouped by the checkpoint alone, not by the model's ordering (a join to every run's name)
    )
    found = {row["checkpoint_id"]: row["restorable"] or row["t"] for row in rows}
    return {c.pk: c.saved_at or found.get(c.pk) or c.first_seen_at for c in checkpoints}


def resume_cost(point: RecoveryPoint, checkpoint: Checkpoint, *, now: datetime | None = None) -> ResumeCost:
    """The cost of resuming from ``checkpoint`` instead, with the run's recovery point ``point`` already known
    (its GPUs and highest step): one query for the checkpoint's save time."""
    return resume_costs(point, [checkpoint], now=now)[checkpoint.pk]


def resume_costs(point: RecoveryPoint, checkpoints, *, now: datetime | None = None) -> dict[int, ResumeCost]:
    """``resume_cost`` for many checkpoints of the run in one query (the ladder's rungs); the model's own checkpoint
    costs exactly what the model says it loses."""
    now = now or point.now
    checkpoints = list(checkpoints)
    saved = _saved_times(checkpoints)
    out = {}
    for checkpoint in checkpoints:
        if point.checkpoint is not None and checkpoint.pk == point.checkpoint.pk:
            out[checkpoint.pk] = ResumeCost(point.lost_steps, point.lost_hours or 0.0, point.gpus, point.gpus_source)
            continue
        at = saved[checkpoint.pk]
        end = now if point.active else max(at, point.last_saved_at or at)
        steps = (
            point.highest_step - checkpoint.step
            if point.highest_step is not None and checkpoint.step is not None
            else None
        )
        out[checkpoint.pk] = ResumeCost(steps, _hours(end, at), point.gpus, point.gpus_source)
    return out
