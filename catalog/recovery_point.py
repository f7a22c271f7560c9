"""Recovery point: how much training a run would lose if it had to restore now, in hours, steps and GPU-hours.

Per run:

- the checkpoint it would restore from: ``catalog.recovery.newest_restorable`` (verified first);
- when that was saved: the earliest ``newest_mtime`` of its restorable copies (the save itself; a later copy
  is an offload of the same bytes), else when the catalog first saw it;
- the recovery point, hours: now minus that save;
- what a restore throws away: steps (the highest step seen of the run minus the restorable step), wall hours
  (until now for an active run, until its last save for an ended one: ``catalog.lifecycle.last_saved``), and
  GPU-hours (wall hours times its GPUs);
- its GPUs, with the source: the number an operator set, else the sidecar's ``gpus``, else the world size its
  newest checkpoint was saved with (``catalog.reshard.layout_of``), else the GPUs registered for the hosts holding
  its copies (``Host.gpus``, ``fleet_host add --gpus``);
- its objective (RPO), hours: the run's own, else its team's, else ``DEFAULT_RPO_HOURS``.

A run with no restorable checkpoint has lost everything since it started: the recovery point counts from its
first checkpoint (or the run's creation) and every step seen is lost.

Setting GPUs and objectives goes through ``run_gpus_set``, ``run_rpo_set`` and ``team_rpo_set``: the operator
role, the row locked, one audit event (``run.gpus``, ``run.rpo``, ``team.rpo``) in the same transaction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.db.models import F, Max, Min, OuterRef, Q, Subquery, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone

from access.roles import Role, require_role
from audit.actor import Actor
from audit.choices import ActorKind
from audit.services import audit
from catalog.ages import saved_or_seen
from catalog.choices import ENDED_STATUSES, Verification
from catalog.models import Checkpoint, CheckpointCopy, Run, Team
from catalog.recovery import newest_restorable, restorable_copies
from catalog.reshard import layout_of, layouts_of
from ckptfleet.errors import DomainError
from fleet.models import Host

DEFAULT_RPO_HOURS = 24.0
MAX_RPO_HOURS = 24.0 * 366 * 10
MAX_GPUS = 1_000_000
FLEET_LIMIT = 500


class GpuSource:
    SIDECAR = "sidecar"
    WORLD_SIZE = "world size"
    OPERATOR = "operator"
    HOSTS = "hosts"
    NONE = ""

    LABELS = {
        SIDECAR: "the run's ckptfleet.json (gpus)",
        WORLD_SIZE: "the world size its newest checkpoint was saved with",
        OPERATOR: "set by an operator",
        HOSTS: "the GPUs registered for the hosts holding its checkpoints (fleet_host --gpus)",
        NONE: "unknown: no sidecar gpus, no world size, no host GPUs registered, none set",
    }


@dataclass
class RecoveryPoint:
    run: Run
    checkpoint: Checkpoint | None
    verified: bool
    saved_at: datetime | None
    hours: float | None  # since the restorable save (or since the run began, when none is restorable)
    highest_step: int | None
    lost_steps: int | None
    lost_hours: float | None
    gpus: int | None
    gpus_source: str
    objective_hours: float
    objective_source: str  # "run", "team" or "default"
    active: bool
    last_saved_at: datetime | None = None  # the run's newest save (catalog.lifecycle.last_saved's rule)

    @property
    def gpu_hours(self) -> float | None:
        if self.lost_hours is None or self.gpus is None:
            return None
        return self.lost_hours * self.gpus

    @property
    def over(self) -> bool:
        return self.hours is not None and self.hours > self.objective_hours

    @property
    def gpus_source_label(self) -> str:
        return GpuSource.LABELS[self.gpus_source]

    @property
    def objective_source_label(self) -> str:
        return {
            "run": "this run's own objective",
            "team": f"team {self.run.team.name}'s default",
            "default": f"the product default ({DEFAULT_RPO_HOURS:g} h)",
        }[self.objective_source]


def objective_of(run: Run) -> tuple[float, str]:
    if run.rpo_hours is not None:
        return run.rpo_hours, "run"
    if run.team.rpo_hours is not None:
        return run.team.rpo_hours, "team"
    return DEFAULT_RPO_HOURS, "default"


def gpus_of(run: Run) -> tuple[int | None, str]:
    """The run's GPUs and where the number comes from (``GpuSource``): an operator's number first (a person's
    word for this run overrides what was inferred), then the job's own sidecar, then the world size its newest
    checkpoint was saved with."""
    if run.operator_gpus:
        return run.operator_gpus, GpuSource.OPERATOR
    if run.sidecar_gpus:
        return run.sidecar_gpus, GpuSource.SIDECAR
    newest = _newest_copy(run)
    if newest is not None:
        world = layout_of(newest).world_size
        if world:
            return world, GpuSource.WORLD_SIZE
    # The hosts it trained on, as their registration says: those holding a present copy of it on their drives.
    hosts = CheckpointCopy.objects.filter(
        checkpoint__run=run, gone_at__isnull=True, location__host__isnull=False
    ).values("location__host_id")
    registered = Host.objects.filter(pk__in=hosts, gpus__gt=0).aggregate(total=Sum("gpus"))["total"]
    if registered:
        return registered, GpuSource.HOSTS
    return None, GpuSource.NONE


def _newest_copy(run: Run) -> CheckpointCopy | None:
    """The present copy of the run's highest step (the newest of them), else of its step-less checkpoints. The
    highest step is found through the (run, step) index, stopping at the first with a present copy; ordering the
    run's copies by ``step DESC NULLS LAST`` sorted all of them (15 ms for a run of 5,000 checkpoints)."""
    present = CheckpointCopy.objects.filter(checkpoint__run=run, gone_at__isnull=True).select_related("checkpoint")
    top = (
        Checkpoint.objects.filter(run=run, step__isnull=False, copies__gone_at__isnull=True)
        .order_by("-step")
        .values_list("step", flat=True)
        .first()
    )
    if top is not None:
        return present.filter(checkpoint__step=top).order_by("-pk").first()
    return present.order_by("-pk").first()


def _run_stats(run: Run, *, need_first: bool) -> dict:
    """The run's highest step (through the (run, step) index), and only when they are used: its first checkpoint
    (no restorable one) and its last save (an ended run). One aggregate over every copy of a run of 5,000
    checkpoints took ~9 ms."""
    checkpoints = Checkpoint.objects.filter(run=run)
    highest = checkpoints.filter(step__isnull=False).order_by("-step").values_list("step", flat=True).first()
    first = checkpoints.aggregate(t=Min(saved_or_seen()))["t"] if need_first else None
    last = None
    if run.status in ENDED_STATUSES:
        last = CheckpointCopy.objects.filter(checkpoint__run=run).aggregate(t=Max("newest_mtime"))["t"]
    return {"highest": highest, "first": first, "last": last}


def _hours(later: datetime, earlier: datetime) -> float:
    return max(0.0, (later - earlier).total_seconds() / 3600.0)


def recovery_point_of(run: Run, *, now: datetime | None = None) -> RecoveryPoint:
    now = now or timezone.now()
    checkpoint, verified = newest_restorable(run)
    stats = _run_stats(run, need_first=checkpoint is None)
    saved_at = None
    if checkpoint is not None:
        saved_at = CheckpointCopy.objects.filter(restorable_copies(), checkpoint=checkpoint).aggregate(
            t=Min("newest_mtime")
        )["t"]
    return _point(run, checkpoint, verified=verified, stats=stats, saved_at=saved_at, gpus=gpus_of(run), now=now)


def _point(
    run: Run,
    checkpoint: Checkpoint | None,
    *,
    verified: bool,
    stats: dict,
    saved_at: datetime | None,
    gpus: tuple[int | None, str],
    now: datetime,
) -> RecoveryPoint:
    """The recovery point from what was read: the restorable checkpoint, the run's checkpoint stats (highest step,
    first seen, last save) and the earliest save of the checkpoint's restorable copies."""
    highest = stats["highest"]
    active = run.status not in ENDED_STATUSES
    if checkpoint is not None:
        saved_at = checkpoint.saved_at or saved_at or checkpoint.first_seen_at  # catalog.ages
        start = saved_at
        lost_steps = (highest - checkpoint.step) if highest is not None and checkpoint.step is not None else None
    else:
        start = stats["first"] or run.created_at
        lost_steps = highest
    end = now if active else max(filter(None, [stats["last"], start]))
    hours = _hours(now, start)
    gpus_n, source = gpus
    objective, objective_source = objective_of(run)
    return RecoveryPoint(
        run=run,
        checkpoint=checkpoint,
        verified=verified,
        saved_at=saved_at,
        hours=hours,
        highest_step=highest,
        lost_steps=lost_steps,
        lost_hours=_hours(end, start),
        gpus=gpus_n,
        gpus_source=source,
        objective_hours=objective,
        objective_source=objective_source,
        active=active,
        last_saved_at=stats["last"],
    )


def _newest_checkpoint(*, verified: bool) -> Coalesce:
    """``newest_restorable``'s choice for the run of the outer row, as a subquery (its id): the highest step with a
    restorable copy, walking the (run, step) index backwards and stopping at the first, else the greatest tag of
    the step-less ones (``NEWEST_STEP_FIRST, "-tag"``), rather than sorting every checkpoint of the run."""
    wanted = restorable_copies("copies__")
    if verified:
        wanted &= Q(copies__verification=Verification.VERIFIED)
    rows = Checkpoint.objects.filter(wanted, run=OuterRef("pk"))
    stepped = rows.filter(step__isnull=False).order_by("-step").values("pk")[:1]
    unstepped = rows.filter(step__isnull=True).order_by("-tag").values("pk")[:1]
    return Coalesce(Subquery(stepped), Subquery(unstepped))


def recovery_points_of(runs, *, now: datetime | None = None, only_over: bool = False) -> list[RecoveryPoint]:
    """``recovery_point_of`` for every run of the queryset ``runs``, in its order, in at most seven queries whatever
    the number of runs, checkpoints and copies (the fleet list of /recovery/points/). ``only_over``: only the runs
    over their objective, and the files of the others' newest copies (their GPUs) are not read."""
    now = now or timezone.now()
    runs = list(
        runs.select_related("team").annotate(
            verified_id=_newest_checkpoint(verified=True),
            restorable_id=_newest_checkpoint(verified=False),
        )
    )
    if not runs:
        return []
    stats = {
        row["run_id"]: row
        for row in Checkpoint.objects.filter(run__in=[r.pk for r in runs])
        .values("run_id")
        .annotate(highest=Max("step"), first=Min(saved_or_seen()), last=Max("copies__newest_mtime"))
        .order_by()
    }
    chosen = {r.pk: r.verified_id or r.restorable_id for r in runs}
    checkpoints = Checkpoint.objects.in_bulk([pk for pk in chosen.values() if pk])
    saved = dict(
        CheckpointCopy.objects.filter(restorable_copies(), checkpoint_id__in=list(checkpoints))
        .values("checkpoint_id")
        .annotate(t=Min("newest_mtime"))
        .order_by()
        .values_list("checkpoint_id", "t")
    )
    points = []
    for run in runs:
        checkpoint = checkpoints.get(chosen[run.pk]) if chosen[run.pk] else None
        if run.operator_gpus:
            gpus: tuple[int | None, str] = (run.operator_gpus, GpuSource.OPERATOR)
        elif run.sidecar_gpus:
            gpus = (run.sidecar_gpus, GpuSource.SIDECAR)
        else:
            gpus = (None, GpuSource.NONE)  # the world size of its newest copy, read below
        point = _point(
            run,
            checkpoint,
            verified=bool(run.verified_id),
            stats=stats.get(run.pk, {"highest": None, "first": None, "last": None}),
            saved_at=saved.get(checkpoint.pk) if checkpoint is not None else None,
            gpus=gpus,
            now=now,
        )
        if point.over or not only_over:
            points.append(point)
    _world_sizes([p for p in points if p.gpus is None])
    _host_gpus([p for p in points if p.gpus is None])
    return points


def _host_gpus(points: list[RecoveryPoint]) -> None:
    """``gpus_of``'s fallback for these points: the GPUs registered for the hosts holding each run's present copies
    (``Host.gpus``), one query for all of them."""
    if not points:
        return
    pairs = (
        CheckpointCopy.objects.filter(
            checkpoint__run_id__in=[p.run.pk for p in points], gone_at__isnull=True, location__host__gpus__gt=0
        )
        .values_list("checkpoint__run_id", "location__host_id", "location__host__gpus")
        .order_by()
        .distinct()
    )
    totals: dict[int, int] = {}
    for run_id, _host, gpus in pairs:
        totals[run_id] = totals.get(run_id, 0) + gpus
    for point in points:
        if totals.get(point.run.pk):
            point.gpus, point.gpus_source = totals[point.run.pk], GpuSource.HOSTS


def _world_sizes(points: list[RecoveryPoint]) -> None:
    """``gpus_of``'s last source for these points: the world size of each run's newest present copy (its checkpoint's
    step, then the copy's id), from its files; two queries for all of them."""
    if not points:
        return
    newest_copy = (
        CheckpointCopy.objects.filter(checkpoint__run=OuterRef("pk"), gone_at__isnull=True)
        .order_by(F("checkpoint__step").desc(nulls_last=True), "-pk")
        .values("pk")[:1]
    )
    newest_of = dict(
        Run.objects.filter(pk__in=[p.run.pk for p in points])
        .annotate(newest=Subquery(newest_copy))
        .values_list("pk", "newest")
    )
    copies = CheckpointCopy.objects.in_bulk([pk for pk in newest_of.values() if pk])
    layouts = layouts_of(copies.values())
    for point in points:
        layout = layouts.get(newest_of.get(point.run.pk))
        if layout is not None and layout.world_size:
            point.gpus, point.gpus_source = layout.world_size, GpuSource.WORLD_SIZE


def over_objective(runs, *, now: datetime | None = None, limit: int = FLEET_LIMIT) -> list[RecoveryPoint]:
    """Active runs among ``runs`` whose recovery point exceeds their objective, most GPU-hours at risk first
    (an unknown GPU count after every known one, then by hours). A constant number of queries
    (``recovery_points_of``), however many runs, checkpoints and copies."""
    now = now or timezone.now()
    active = runs.exclude(status__in=ENDED_STATUSES).order_by("pk")[:limit]
    points = recovery_points_of(active, now=now, only_over=True)
    points.sort(key=lambda p: (p.gpu_hours is None, -(p.gpu_hours or 0.0), -(p.hours or 0.0), p.run.pk))
    return points


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


def resume_cost(point: RecoveryPoint, checkpoint: Checkpoint, *, now: datetime | None = None) -> ResumeCost:
    """The cost of resuming from ``checkpoint`` instead, with the run's recovery point ``point`` already known
    (its GPUs and highest step): one query for the checkpoint's save time."""
    now = now or timezone.now()
    saved = (
        checkpoint.saved_at  # catalog.ages: the sidecar's word first
        or CheckpointCopy.objects.filter(checkpoint=checkpoint, newest_mtime__isnull=False).aggregate(
            t=Min("newest_mtime")
        )["t"]
        or checkpoint.first_seen_at
    )
    end = now if point.active else max(saved, point.last_saved_at or saved)
    steps = (
        point.highest_step - checkpoint.step if point.highest_step is not None and checkpoint.step is not None else None
    )
    return ResumeCost(steps, _hours(end, saved), point.gpus, point.gpus_source)


def resume_costs(point: RecoveryPoint, checkpoints, *, now: datetime | None = None) -> dict[int, ResumeCost]:
    """``resume_cost`` for many checkpoints of the run in one query (the ladder's rungs)."""
    now = now or timezone.now()
    checkpoints = list(checkpoints)
    saved = dict(
        CheckpointCopy.objects.filter(checkpoint__in=checkpoints, newest_mtime__isnull=False)
        .values("checkpoint_id")
        .annotate(t=Min("newest_mtime"))
        .order_by()  # grouped by the checkpoint alone, not by the model's ordering (a join to every run's name)
        .values_list("checkpoint_id", "t")
    )
    out = {}
    for checkpoint in checkpoints:
        at = checkpoint.saved_at or saved.get(checkpoint.pk) or checkpoint.first_seen_at
        end = now if point.active else max(at, point.last_saved_at or at)
        steps = (
            point.highest_step - checkpoint.step
            if point.highest_step is not None and checkpoint.step is not None
            else None
        )
        out[checkpoint.pk] = ResumeCost(steps, _hours(end, at), point.gpus, point.gpus_source)
    return out
