"""The fallback ladder: every checkpoint a job of a run could resume from, in the order to try them, and why.

The recovery page answers "which one"; the ladder answers "and if that fails": each recent checkpoint of the run
with its copies' state and verification, its fastest reachable copy and restore time, what resuming from it
throws away (steps and hours of training since it was saved), and why it ranks where it does. The order is
recovery's own rule (``catalog.recovery``): a complete copy nothing says is wrong, on a host that is not down or
silent; verified before unverified; newer before older. Checkpoints that cannot be resumed from are listed
after the candidates, each with the reason.

``resume_answer`` is what ``GET /api/v1/runs/<id>/resume/`` returns: the checkpoint, the copy, its path and the
commands to fetch it, the framework's pointer there and its fix, in one answer a restarting job can act on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Exists, OuterRef

from catalog.choices import CopyState, Verification
from catalog.models import Checkpoint, CheckpointCopy, Run
from catalog.pointers import Pointer, pointers_for_run, where
from catalog.recovery import RankedCopy, _buckets, _parts, _present, _rank, assumptions
from catalog.recovery_model import RecoveryPoint, recovery_point_of
from catalog.recovery_point import resume_costs
from catalog.reshard import layout_of

LADDER_LENGTH = 20


@dataclass
class Rung:
    checkpoint: Checkpoint
    position: int | None  # 1 for the checkpoint to try first; None: not a candidate
    why: str
    copies: list[RankedCopy] = field(default_factory=list)
    steps_lost: int | None = None
    hours_lost: float | None = None
    gpu_hours: float | None = None  # hours lost x the run's GPUs (catalog.recovery_point), when they are known
    gpus_source: str = ""

    @property
    def best(self) -> RankedCopy | None:
        good = [r for r in self.copies if r.usable and not r.unreachable]
        return good[0] if good else None

    @property
    def verified(self) -> bool:
        return any(r.verified for r in self.copies if r.usable and not r.unreachable)

    @property
    def saved_at(self) -> datetime | None:
        times = [r.copy.newest_mtime for r in self.copies if r.copy.newest_mtime]
        return max(times) if times else None

    def as_dict(self) -> dict:
        best = self.best
        return {
            "checkpoint": self.checkpoint.pk,
            "label": self.checkpoint.label,
            "step": self.checkpoint.step,
            "position": self.position,
            "why": self.why,
            "verified": self.verified,
            "copies": [
                {
                    "copy": r.copy.pk,
                    "location": r.copy.location.name,
                    "state": r.copy.state,
                    "verification": r.copy.verification,
                    "usable": r.usable,
                    "unreachable": r.unreachable or None,
                    "restore_seconds": round(r.seconds, 1),
                }
                for r in self.copies
            ],
            "best_copy": best.copy.pk if best else None,
            "restore_seconds": round(best.seconds, 1) if best else None,
            "steps_lost": self.steps_lost,
            "hours_lost": round(self.hours_lost, 2) if self.hours_lost is not None else None,
            "gpu_hours": round(self.gpu_hours, 1) if self.gpu_hours is not None else None,
            "gpus_source": self.gpus_source or None,
        }


def _why_not(copies: list[RankedCopy]) -> str:
    if not copies:
        return "no present copy"
    usable = [r for r in copies if r.usable]
    if usable:
        return "every restorable copy is on a host that is down or silent: " + usable[0].unreachable
    if any(r.copy.verification == Verification.DISPUTED for r in copies):
        return "disputed: its copies disagree and nothing independent says which is right"
    if any(r.copy.verification == Verification.MISMATCH for r in copies):
        return "its checksums disagree with another copy or the writer's record"
    states = sorted({r.copy.get_state_display().lower() for r in copies if r.copy.state != CopyState.COMPLETE})
    reasons = [str(x) for r in copies for x in (r.copy.reasons or [])][:1]
    return f"no complete copy ({', '.join(states) or 'not complete'}" + (f": {reasons[0]})" if reasons else ")")


def _newest_present(run: Run, limit: int) -> list[Checkpoint]:
    """The run's newest ``limit`` checkpoints with a present, non-temporary copy: the stepped ones newest first, then
    the step-less ones by tag (``NEWEST_STEP_FIRST, "-tag"``). Two queries that walk the (run, step) and (run, tag)
    indexes backwards and stop at ``limit``, rather than one DISTINCT over every copy of the run sorted whole (145 ms
    for a run of 5,000 checkpoints in bench/spend_bench.py's 10M-file fleet)."""
    present = Exists(CheckpointCopy.objects.filter(checkpoint=OuterRef("pk"), gone_at__isnull=True, temporary=False))
    rows = Checkpoint.objects.filter(present, run=run)
    stepped = list(rows.filter(step__isnull=False).order_by("-step")[:limit])
    unstepped = list(rows.filter(step__isnull=True).order_by("-tag")[:limit])
    return (stepped + unstepped)[:limit]


def ladder_for(run: Run, *, limit: int = LADDER_LENGTH, point: RecoveryPoint | None = None) -> list[Rung]:
    """The run's newest ``limit`` checkpoints as a ladder: candidates first, in the order to try them. ``point``:
    the run's recovery model, when the caller has it already (the recovery page shows it too). The first rung is
    the model's checkpoint, whatever the ladder's length: one rule of what to restore from."""
    point = point if point is not None else recovery_point_of(run)
    checkpoints = _newest_present(run, limit)
    if point.checkpoint is not None and point.checkpoint.pk not in {c.pk for c in checkpoints}:
        checkpoints = [point.checkpoint, *checkpoints[: limit - 1]]
    copies = [c for c in _present([c.pk for c in checkpoints]) if not c.temporary]
    ranked = _rank(copies, _parts(copies), _buckets(copies), assumptions(), point.now)
    by_checkpoint: dict[int, list[RankedCopy]] = {c.pk: [] for c in checkpoints}
    for r in ranked:
        by_checkpoint[r.copy.checkpoint_id].append(r)
    rungs = [Rung(c, None, "", by_checkpoint[c.pk]) for c in checkpoints]
    costs = resume_costs(point, checkpoints)
    for rung in rungs:
        # What resuming here throws away: the steps since it, and the hours (until now for a run still training)
        # times the run's GPUs, as the recovery point counts them.
        cost = costs[rung.checkpoint.pk]
        rung.steps_lost, rung.hours_lost = cost.lost_steps, cost.lost_hours
        rung.gpu_hours, rung.gpus_source = cost.gpu_hours, cost.gpus_source
    candidates = [r for r in rungs if r.best is not None]
    others = [r for r in rungs if r.best is None]
    chosen = point.checkpoint.pk if point.checkpoint is not None else None
    candidates.sort(
        key=lambda r: (
            r.checkpoint.pk == chosen,
            r.verified,
            r.checkpoint.step is not None,
            r.checkpoint.step or 0,
            r.checkpoint.tag,
        ),
        reverse=True,
    )
    newer_unverified = 0
    for position, rung in enumerate(candidates, start=1):
        rung.position = position
        best = rung.best
        assert best is not None
        if position == 1:
            parts = ["the newest " + ("verified" if rung.verified else "complete (unverified)") + " checkpoint"]
        elif rung.verified:
            parts = ["verified, older" + (" than a newer unverified one above" if newer_unverified else "")]
        else:
            parts = ["complete but not verified by checksums"]
        parts.append(f"fastest reachable copy on {best.copy.location.name}")
        if rung.steps_lost:
            parts.append(f"resuming here repeats {rung.steps_lost:,} steps")
        rung.why = "; ".join(parts)
        newer_unverified += 0 if rung.verified else 1
    for rung in others:
        rung.why = _why_not(rung.copies)
    return candidates + others


def _pointer_at(pointers: list[Pointer], location_id: int) -> Pointer | None:
    return next((p for p in pointers if p.location_id == location_id), None)


def _lost(point: RecoveryPoint) -> dict:
    return {
        "lost_steps": point.lost_steps,
        "lost_hours": round(point.lost_hours, 2) if point.lost_hours is not None else None,
        "lost_gpu_hours": round(point.gpu_hours, 1) if point.gpu_hours is not None else None,
    }


def resume_answer(run: Run) -> dict:
    """What a restarting job needs in one answer: the checkpoint, the copy and its path, how to fetch it, the
    framework pointer at that location with its fix, the layout it was saved with, what resuming there loses (the
    run's recovery model: the same checkpoint and loss as the recovery point), and the next rungs."""
    point = recovery_point_of(run)
    ladder = ladder_for(run, point=point)
    first = ladder[0] if ladder and ladder[0].position == 1 else None
    pointers = pointers_for_run(run)
    if first is None or first.best is None or point.checkpoint is None:
        return {
            "run": run.pk,
            "resume": None,
            "detail": "no checkpoint of this run has a complete copy on a reachable location",
            **_lost(point),
            "excluded": [{"checkpoint": s.checkpoint.pk, "kind": s.kind, "why": s.why} for s in point.excluded],
            "ladder": [r.as_dict() for r in ladder],
            "pointers": [p.as_dict() for p in pointers],
        }
    best = first.best
    pointer = _pointer_at(pointers, best.copy.location_id)
    return {
        "run": run.pk,
        "resume": {
            "checkpoint": first.checkpoint.pk,
            "label": first.checkpoint.label,
            "step": first.checkpoint.step,
            "verified": first.verified,
            "copy": best.copy.pk,
            "location": best.copy.location.name,
            "host": best.copy.location.host.name if best.copy.location.host_id else None,
            "path": where(best.copy.location, best.copy.path),
            "restore_seconds": round(best.seconds, 1),
            "commands": best.commands,
            "layout": layout_of(best.copy).as_dict(),
            "pointer": pointer.as_dict() if pointer else None,
            **_lost(point),
        },
        "why": first.why,
        "excluded": [{"checkpoint": s.checkpoint.pk, "kind": s.kind, "why": s.why} for s in point.excluded],
        "ladder": [r.as_dict() for r in ladder[1:]],
    }
