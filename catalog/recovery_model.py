"""The recovery model of a run: one answer to "what would we restore from now, and what would that lose", computed
once per request for a set of runs and read by every surface that answers it (the recovery page's headline, cards,
copies and "Pin and hold"; ``GET /api/v1/runs/<id>/recovery-point/`` and ``/api/v1/recovery/points/``; the resume
answer and the ladder; the overview's and the host page's "runs that lose their newest restorable checkpoint").

Its inputs, and the one place each rule lives:

- copy verdicts: a present, complete copy nothing says is wrong (``catalog.recovery.restorable_copies``), verified
  copies first (settled copies before unsettled ones);
- host health: the copy's host is not marked down nor silent and its latest restore drill did not fail
  (``catalog.recovery.reachable_copies``);
- the newest restorable checkpoint by those rules: the highest step with a verified reachable restorable copy, else
  the highest with any reachable restorable copy;
- its save time: ``Checkpoint.saved_at`` (``catalog.ages``: the sidecar's ``saved_at``, else the files' own time),
  else the earliest ``newest_mtime`` of its restorable copies, else when the catalog first saw it;
- what a restore throws away: steps (the run's highest step seen minus the chosen one), wall hours (until now for an
  active run, until its last save for an ended one), GPU-hours (wall hours x its GPUs); with nothing restorable, every
  step seen and every hour since the run's first save;
- its GPUs, with the source: what was said of this run (an operator's number, else the sidecar's ``gpus`` the job
  wrote), else the world size of its newest *complete* save (an interrupted save of 2 ranks says nothing of the 8
  GPUs that were training), else the GPUs registered for the hosts holding its copies (``Host.gpus``);
- its objective (RPO): the run's own, else its team's, else ``DEFAULT_RPO_HOURS``;
- ``if_up``: the same answer were every host reachable, when it differs: what a host marked down (or silent) costs.

The model is a plain data object (``RecoveryPoint``) built by ``recovery_points_of`` from a fixed number of queries
for any set of runs (issue 29: per-run facts that could be stored as a rollup). ``recovery_point_of`` is the same
function for one run, plus ``excluded``: the newer checkpoints passed over, each with why.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Exists, F, Max, Min, OuterRef, Q, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

from catalog.ages import saved_or_seen
from catalog.choices import ENDED_STATUSES, CopyState, Verification
from catalog.models import Checkpoint, CheckpointCopy, Run
from catalog.recovery import (
    SKIPPED_SHOWN,
    Recovery,
    Skipped,
    reachable_copies,
    recovery_for,
    restorable_copies,
    skipped_newer,
)
from catalog.reshard import layouts_of
from catalog.selectors import NEWEST_STEP_FIRST
from fleet.models import Host

DEFAULT_RPO_HOURS = 24.0
FLEET_LIMIT = 500


class GpuSource:
    SIDECAR = "sidecar"
    WORLD_SIZE = "world size"
    OPERATOR = "operator"
    HOSTS = "hosts"
    NONE = ""

    LABELS = {
        SIDECAR: "the run's ckptfleet.json (gpus)",
        WORLD_SIZE: "the world size its newest complete checkpoint was saved with",
        OPERATOR: "set by an operator",
        HOSTS: "the GPUs registered for the hosts holding its checkpoints (fleet_host --gpus)",
        NONE: "unknown: no sidecar gpus, no complete save with a world size, no host GPUs registered, none set",
    }


@dataclass
class RecoveryPoint:
    """The recovery model of one run (see the module's docstring)."""

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
    now: datetime = field(default_factory=timezone.now)  # the instant host health and hours were judged at
    if_up: RecoveryPoint | None = None  # the answer were every host reachable, when it names another checkpoint
    excluded: list[Skipped] = field(default_factory=list)  # newer checkpoints passed over and why (one run only)

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

    @property
    def down_steps(self) -> int | None:
        """The steps a down or silent host adds to what a restore loses (None: it adds nothing, or unknown)."""
        if self.if_up is None or self.lost_steps is None or self.if_up.lost_steps is None:
            return None
        return self.lost_steps - self.if_up.lost_steps

    @property
    def down_hours(self) -> float | None:
        if self.if_up is None or self.lost_hours is None or self.if_up.lost_hours is None:
            return None
        return max(0.0, self.lost_hours - self.if_up.lost_hours)

    @property
    def down_gpu_hours(self) -> float | None:
        hours = self.down_hours
        return hours * self.gpus if hours is not None and self.gpus is not None else None


def objective_of(run: Run) -> tuple[float, str]:
    if run.rpo_hours is not None:
        return run.rpo_hours, "run"
    if run.team.rpo_hours is not None:
        return run.team.rpo_hours, "team"
    return DEFAULT_RPO_HOURS, "default"


def _hours(later: datetime, earlier: datetime) -> float:
    return max(0.0, (later - earlier).total_seconds() / 3600.0)


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
    """The model from what was read: the chosen checkpoint, the run's checkpoint stats (highest step, first seen,
    last save) and the earliest save of the checkpoint's restorable copies."""
    highest = stats["highest"]
    active = run.status not in ENDED_STATUSES
    if checkpoint is not None:
        saved_at = checkpoint.saved_at or saved_at or checkpoint.first_seen_at  # catalog.ages: the sidecar's word first
        start = saved_at
        lost_steps = (highest - checkpoint.step) if highest is not None and checkpoint.step is not None else None
    else:
        start = stats["first"] or run.created_at
        lost_steps = highest
    end = now if active else max(filter(None, [stats["last"], start]))
    gpus_n, source = gpus
    objective, objective_source = objective_of(run)
    return RecoveryPoint(
        run=run,
        checkpoint=checkpoint,
        verified=verified,
        saved_at=saved_at,
        hours=_hours(now, start),
        highest_step=highest,
        lost_steps=lost_steps,
        lost_hours=_hours(end, start),
        gpus=gpus_n,
        gpus_source=source,
        objective_hours=objective,
        objective_source=objective_source,
        active=active,
        last_saved_at=stats["last"],
        now=now,
    )


def _newest_checkpoint(*, verified: bool, now: datetime | None) -> Coalesce:
    """The model's choice for the run of the outer row, as a subquery (its id): the highest step with a restorable
    copy (verified, when asked; at a reachable location at ``now``, unless ``now`` is None: every host up), walking
    the (run, step) index backwards and stopping at the first, else the greatest tag of the step-less ones."""
    copies = CheckpointCopy.objects.filter(restorable_copies(), checkpoint=OuterRef("pk"))
    if verified:
        copies = copies.filter(verification=Verification.VERIFIED)
    if now is not None:
        copies = copies.filter(reachable_copies(now))
    rows = Checkpoint.objects.filter(Exists(copies), run=OuterRef("pk"))
    stepped = rows.filter(step__isnull=False).order_by("-step").values("pk")[:1]
    unstepped = rows.filter(step__isnull=True).order_by("-tag").values("pk")[:1]
    return Coalesce(Subquery(stepped), Subquery(unstepped))


def recovery_points_of(
    runs, *, now: datetime | None = None, only_over: bool = False, with_excluded: bool = False
) -> list[RecoveryPoint]:
    """The recovery model of every run of the queryset ``runs``, in its order, in a fixed number of queries whatever
    the number of runs, checkpoints and copies. ``only_over``: only the runs over their objective (and the files of
    the others' saves, for their GPUs, are not read). ``with_excluded``: also why each newer checkpoint is passed
    over (two more queries; the pages of one run)."""
    now = now or timezone.now()
    runs = list(
        runs.select_related("team").annotate(
            verified_id=_newest_checkpoint(verified=True, now=now),
            restorable_id=_newest_checkpoint(verified=False, now=now),
            up_verified_id=_newest_checkpoint(verified=True, now=None),
            up_restorable_id=_newest_checkpoint(verified=False, now=None),
        )
    )
    if not runs:
        return []
    stats = {
        row["run_id"]: row
        for row in Checkpoint.objects.filter(run__in=[r.pk for r in runs])
        .values("run_id")
        # The run's first save (catalog.ages: the save's own time, else when the catalog first saw it): where a run
        # with nothing restorable starts losing.
        .annotate(
            highest=Max("step"),
            first=Min(saved_or_seen()),
            last=Max("copies__newest_mtime"),
        )
        .order_by()
    }
    chosen = {r.pk: r.verified_id or r.restorable_id for r in runs}
    if_up = {r.pk: r.up_verified_id or r.up_restorable_id for r in runs}
    checkpoints = Checkpoint.objects.in_bulk([pk for pk in {*chosen.values(), *if_up.values()} if pk])
    saved = dict(
        CheckpointCopy.objects.filter(restorable_copies(), checkpoint_id__in=list(checkpoints))
        .values("checkpoint_id")
        .annotate(t=Min("newest_mtime"))
        .order_by()
        .values_list("checkpoint_id", "t")
    )
    points = []
    for run in runs:
        run_stats = stats.get(run.pk, {"highest": None, "first": None, "last": None})
        gpus: tuple[int | None, str] = (None, GpuSource.NONE)  # the world size of its newest complete save, below
        if run.operator_gpus:
            gpus = (run.operator_gpus, GpuSource.OPERATOR)
        elif run.sidecar_gpus:
            gpus = (run.sidecar_gpus, GpuSource.SIDECAR)

        def point_for(checkpoint_id: int | None, verified: bool, run=run, run_stats=run_stats, gpus=gpus):
            checkpoint = checkpoints.get(checkpoint_id) if checkpoint_id else None
            at = saved.get(checkpoint.pk) if checkpoint is not None else None
            return _point(run, checkpoint, verified=verified, stats=run_stats, saved_at=at, gpus=gpus, now=now)

        point = point_for(chosen[run.pk], bool(run.verified_id))
        if if_up[run.pk] != chosen[run.pk]:
            point.if_up = point_for(if_up[run.pk], bool(run.up_verified_id))
        if point.over or not only_over:
            points.append(point)
    _world_sizes([p for p in points if p.gpus is None])
    _host_gpus([p for p in points if p.gpus is None])
    for point in points:
        if point.if_up is not None:
            point.if_up.gpus, point.if_up.gpus_source = point.gpus, point.gpus_source
    if with_excluded:
        _excluded(points, now)
    return points


def recovery_point_of(run: Run, *, now: datetime | None = None) -> RecoveryPoint:
    """The recovery model of one run, with the newer checkpoints it passed over and why."""
    [point] = recovery_points_of(Run.objects.filter(pk=run.pk), now=now, with_excluded=True)
    return point


def recovery_of(run: Run, *, now: datetime | None = None) -> tuple[RecoveryPoint, Recovery]:
    """The run's model and the recovery page's answer built on it (``catalog.recovery.recovery_for``)."""
    point = recovery_point_of(run, now=now)
    return point, recovery_for(
        run, checkpoint=point.checkpoint, verified=point.verified, skipped=point.excluded, now=point.now
    )


def _excluded(points: list[RecoveryPoint], now: datetime) -> None:
    """Each point's ``excluded``: its run's newest checkpoints above the chosen step (the newest present ones when
    none is chosen; at most ``SKIPPED_SHOWN``), each with why it is passed over (``catalog.recovery.skipped_newer``).
    One query of checkpoints per point and one of their copies: the pages of one run call it."""
    newer: dict[int, list[Checkpoint]] = {}
    for point in points:
        rows = Checkpoint.objects.filter(run=point.run, copies__gone_at__isnull=True).distinct()
        if point.checkpoint is None:
            newer[point.run.pk] = list(rows.order_by(NEWEST_STEP_FIRST, "-tag")[:SKIPPED_SHOWN])
        elif point.checkpoint.step is not None:
            newer[point.run.pk] = list(
                rows.filter(step__gt=point.checkpoint.step).order_by(NEWEST_STEP_FIRST)[:SKIPPED_SHOWN]
            )
    ids = [c.pk for found in newer.values() for c in found]
    copies = list(
        CheckpointCopy.objects.filter(checkpoint_id__in=ids, gone_at__isnull=True)
        .select_related("location", "location__host")
        .order_by("location__name", "path")
    )
    for point in points:
        point.excluded = skipped_newer(newer.get(point.run.pk, []), copies, now=now)


def _host_gpus(points: list[RecoveryPoint]) -> None:
    """The last source of GPUs for these points: the GPUs registered for the hosts holding each run's present copies
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


def newest_complete_save() -> Q:
    """The copies that say how many ranks saved: present, complete by the checkpoint's own manifest and not the
    left-over of an interrupted save. A save that lost ranks (partial) or never finished (temporary) counts fewer
    ranks than trained."""
    return Q(gone_at__isnull=True, state=CopyState.COMPLETE, temporary=False)


def _world_sizes(points: list[RecoveryPoint]) -> None:
    """The GPUs of these points from the world size of each run's newest complete save (its checkpoint's step, then
    the copy's id), from its files; two queries for all of them."""
    if not points:
        return
    newest_copy = (
        CheckpointCopy.objects.filter(newest_complete_save(), checkpoint__run=OuterRef("pk"))
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


def gpus_of(run: Run) -> tuple[int | None, str]:
    """The run's GPUs and where the number comes from (``GpuSource``), by the model's rule."""
    point = recovery_points_of(Run.objects.filter(pk=run.pk))[0]
    return point.gpus, point.gpus_source


def over_objective(runs, *, now: datetime | None = None, limit: int = FLEET_LIMIT) -> list[RecoveryPoint]:
    """Active runs among ``runs`` whose recovery point exceeds their objective, most GPU-hours at risk first
    (an unknown GPU count after every known one, then by hours). A constant number of queries
    (``recovery_points_of``), however many runs, checkpoints and copies."""
    now = now or timezone.now()
    active = runs.exclude(status__in=ENDED_STATUSES).order_by("pk")[:limit]
    points = recovery_points_of(active, now=now, only_over=True)
    points.sort(key=lambda p: (p.gpu_hours is None, -(p.gpu_hours or 0.0), -(p.hours or 0.0), p.run.pk))
    return points


@dataclass
class HostLoss:
    """A run that loses its newest restorable checkpoint because the hosts holding it are down or silent."""

    point: RecoveryPoint  # the model now; ``point.if_up``: with every host reachable
    hosts: list[Host]  # the hosts that hold that checkpoint's restorable copies: each is down or silent


def runs_losing_newest(runs, *, host: Host | None = None, now: datetime | None = None, limit: int = FLEET_LIMIT):
    """The runs among ``runs`` whose newest restorable checkpoint is only on hosts that are down or silent (only on
    ``host`` among them, when given), with how much more a restore now loses: the overview's and the host page's
    "host down" list. One query when every host is up; else the model's queries for the runs holding copies there."""
    now = now or timezone.now()
    away = CheckpointCopy.objects.filter(restorable_copies(), ~reachable_copies(now), checkpoint__run=OuterRef("pk"))
    if host is not None:
        away = away.filter(location__host=host)
    candidates = runs.filter(Exists(away)).order_by("pk")[:limit]
    points = [p for p in recovery_points_of(candidates, now=now) if p.if_up is not None]
    if not points:
        return []
    holders: dict[int, list[Host]] = {}
    rows = (
        CheckpointCopy.objects.filter(
            restorable_copies(),
            checkpoint_id__in=[p.if_up.checkpoint.pk for p in points if p.if_up and p.if_up.checkpoint],
            location__host__isnull=False,
        )
        .select_related("location__host")
        .order_by("location__host__name")
    )
    for copy in rows:
        found = holders.setdefault(copy.checkpoint_id, [])
        if copy.location.host not in found:
            found.append(copy.location.host)
    out = []
    for point in points:
        assert point.if_up is not None
        held = holders.get(point.if_up.checkpoint.pk, []) if point.if_up.checkpoint is not None else []
        if host is not None and host not in held:
            continue
        out.append(HostLoss(point, held))
    out.sort(key=lambda x: (-(x.point.down_gpu_hours or 0.0), -(x.point.down_steps or 0), x.point.run.pk))
    return out


def recovery_page(run: Run, *, now: datetime | None = None) -> Recovery:
    """The recovery page's answer for ``run`` on its model (``recovery_of`` without the model)."""
    return recovery_of(run, now=now)[1]
