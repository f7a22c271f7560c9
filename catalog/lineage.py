"""Lineage: the checkpoint a run was initialised or fine-tuned from, and the runs that started from a checkpoint.

Two ways in: the job's sidecar (``ckptfleet.json`` ``"parent": {"team"?, "run", "step"}``, applied by the
ingest, source "sidecar") and an operator (the run page, ``POST /api/v1/runs/<id>/parent/``,
``manage.py fleet_recovery parent``), source "operator". An operator's word is not replaced by a sidecar.
A sidecar's parent that is not in the catalog (yet) is kept as text (``parent_ref``) and resolved when the
sidecar is read again. Every change is audited as ``run.parent``.

Deleting a checkpoint that runs started from needs a confirmation naming them (``actions.services``).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction

from access.scoping import may_see_run, restrict_runs
from audit.actor import Actor
from audit.choices import ActorKind
from audit.services import audit
from catalog.models import Checkpoint, Run
from catalog.recovery_point import _operator, _reason
from ckptfleet.errors import DomainError

MAX_ANCESTORS = 20


def ref_text(team: str, run: str, step: int | None) -> str:
    return f"{team}/{run}@{step}" if step is not None else f"{team}/{run}"


def resolve(team: str, run: str, step: int) -> Checkpoint | None:
    return Checkpoint.objects.filter(run__team__name=team, run__name=run, step=step).select_related("run").first()


def _save(run: Run, checkpoint: Checkpoint | None, ref: str, source: str, actor: Actor, reason: str, request_id: str):
    before = {"checkpoint": run.parent_checkpoint_id, "ref": run.parent_ref, "source": run.parent_source}
    after = {"checkpoint": checkpoint.pk if checkpoint else None, "ref": ref, "source": source if ref else ""}
    if before == after:
        return False
    run.parent_checkpoint = checkpoint
    run.parent_ref = ref
    run.parent_source = after["source"]
    run.save(update_fields=["parent_checkpoint", "parent_ref", "parent_source"])
    audit(
        actor,
        "run.parent",
        target_type="run",
        target_id=run.pk,
        target_label=str(run),
        reason=reason,
        before=before,
        after=after,
        request_id=(request_id or "")[:64],
    )
    return True


def run_parent_set(*, run: Run, checkpoint_id, actor: Actor, reason: str = "", request_id: str = "") -> Run:
    """Name (or clear, with None) the checkpoint ``run`` started from, as an operator; audited as ``run.parent``.

    A person may name only a checkpoint of a run they can see; another team's checkpoint they cannot see is
    "not found", as it would be anywhere else. A run cannot start from its own checkpoint."""
    reason = _reason(reason)
    _operator(actor, "setting a run's parent checkpoint", "run", run)
    checkpoint = None
    if checkpoint_id not in (None, ""):
        text = str(checkpoint_id).strip()
        if isinstance(checkpoint_id, bool) or not text.isdigit() or len(text) > 18:
            raise DomainError(f"checkpoint must be a checkpoint id; got {checkpoint_id!r}", code="bad_parent")
        checkpoint = Checkpoint.objects.select_related("run__team").filter(pk=int(text)).first()
        user = actor.user if actor.kind == ActorKind.USER else None
        if checkpoint is None or (user is not None and not may_see_run(user, checkpoint.run)):
            raise DomainError(f"checkpoint {checkpoint_id} does not exist", code="bad_parent")
        if checkpoint.run_id == run.pk:
            raise DomainError("a run cannot start from one of its own checkpoints", code="bad_parent")
        if _descends_from(checkpoint.run, run):
            raise DomainError(f"{checkpoint.run} already descends from {run}: that would be a cycle", code="bad_parent")
    with transaction.atomic():
        locked = Run.objects.select_for_update(of=("self",), no_key=True).select_related("team").get(pk=run.pk)
        ref = ref_text(checkpoint.run.team.name, checkpoint.run.name, checkpoint.step) if checkpoint else ""
        if checkpoint is not None and checkpoint.step is None:
            ref = f"{checkpoint.run.team.name}/{checkpoint.run.name}:{checkpoint.tag}"
        _save(locked, checkpoint, ref, "operator", actor, reason, request_id)
    return locked


def _descends_from(run: Run, ancestor: Run) -> bool:
    seen = set()
    current = run
    while current is not None and current.pk not in seen and len(seen) < MAX_ANCESTORS:
        if current.pk == ancestor.pk:
            return True
        seen.add(current.pk)
        parent = current.parent_checkpoint
        current = parent.run if parent is not None else None
    return False


def sidecar_parents_apply(said: dict[int, dict], *, actor: Actor) -> list[int]:
    """Keep what sidecars said of runs' parents, ``{run id: {"team", "run", "step"}}`` (team None: the run's
    own), unless an operator named the parent. Called by the ingest in its transaction."""
    changed = []
    for run_id, parent in sorted(said.items()):
        run = Run.objects.select_for_update(of=("self",), no_key=True).select_related("team").filter(pk=run_id).first()
        if run is None or run.parent_source == "operator":
            continue
        team = parent.get("team") or run.team.name
        checkpoint = resolve(team, parent["run"], parent["step"])
        if checkpoint is not None and checkpoint.run_id == run.pk:
            checkpoint = None
        if _save(run, checkpoint, ref_text(team, parent["run"], parent["step"]), "sidecar", actor, "", ""):
            changed.append(run_id)
    return changed


@dataclass
class Lineage:
    parents: list[Checkpoint]  # the chain, nearest first, of checkpoints the person may see
    parent_ref: str  # what was said when the nearest parent is not in the catalog
    parent_source: str
    hidden_parent: bool  # the nearest parent is a checkpoint of a team the person cannot see
    children: list[Run]  # runs that started from a checkpoint of this run


def lineage_of(run: Run, user) -> Lineage:
    parents: list[Checkpoint] = []
    hidden = False
    current = run
    seen = {run.pk}
    while current.parent_checkpoint_id is not None and len(parents) < MAX_ANCESTORS:
        parent = Checkpoint.objects.select_related("run__team").get(pk=current.parent_checkpoint_id)
        if not may_see_run(user, parent.run):
            hidden = not parents
            break
        parents.append(parent)
        if parent.run_id in seen:
            break
        seen.add(parent.run_id)
        current = parent.run
    children = list(
        restrict_runs(Run.objects.filter(parent_checkpoint__run=run), user)
        .select_related("team", "parent_checkpoint")
        .order_by("team__name", "name")
    )
    return Lineage(parents, run.parent_ref, run.parent_source, hidden, children)


def child_runs(checkpoint_id: int) -> list[Run]:
    """Runs that started from the checkpoint ``checkpoint_id``, every team's (a deletion must name them all)."""
    return list(Run.objects.filter(parent_checkpoint_id=checkpoint_id).select_related("team").order_by("pk"))
