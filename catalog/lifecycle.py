"""A run's life: active, finished, failed, abandoned (or finished and deleted), and who said so.

Four ways in, one function: the training job's sidecar (``ckptfleet.json``'s ``status``, applied by the
ingest), the job's call to the API at its end (a person's or the host's token), an operator (the run page,
``manage.py fleet_run``), and inference (beat: no new checkpoint for ``CKPTFLEET_RUN_IDLE_DAYS``). Each
calls ``run_status_set``, which locks the run, changes it, and writes one ``run.status`` audit event with the
before and after in the same transaction; setting what is already there writes nothing.

Who wins: what the job or a person said (sidecar, api, operator) is never overridden by inference. An
inferred end is taken back automatically (to active, inferred) when a new checkpoint of the run appears. A
person who says "active" is believed for ``CKPTFLEET_RUN_IDLE_DAYS`` after saying it; after that, silence
ends the run again. A sidecar counts only when it was written after the run's status last changed, so an
operator's later word is not undone by re-reading an old sidecar.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Max, Q
from django.utils import timezone

from access.roles import Role, require_role
from audit.actor import Actor
from audit.choices import ActorKind
from audit.services import audit
from catalog import hooks
from catalog.ages import saved_or_seen
from catalog.choices import ENDED_STATUSES, EXPLICIT_SOURCES, RunStatus, RunStatusSource
from catalog.models import CheckpointCopy, Run
from ckptfleet.errors import DomainError, PermissionRefused

MAX_STATUS_REASON = 500
# What a training job may say about itself (sidecar, API): "deleted" is the product's word, not a job's.
JOB_STATUSES = (RunStatus.ACTIVE, RunStatus.FINISHED, RunStatus.FAILED, RunStatus.ABANDONED)
INFER_CHUNK = 500


def last_saved():
    """When a run last saved a checkpoint, as an annotation on runs: its newest checkpoint's saved time
    (``catalog.ages``: the sidecar's, else the files' own time as the host or the store recorded it), else when
    the catalog first saw it. First-seen alone would make every run look freshly saved on a new install, or after
    a location is added; a copy's own file time would count a later upload as a save."""
    return Max(saved_or_seen("checkpoints__"))


@dataclass(frozen=True)
class StatusChange:
    """The outcome of ``run_status_set``: the run as it now is, and whether anything changed."""

    run: Run
    changed: bool
    before: str


def idle_days() -> int:
    return settings.RUN_IDLE_DAYS


def status_clean(value, *, allowed=tuple(RunStatus.values)) -> str:
    """``value`` as a status, or a DomainError naming the statuses that are."""
    if not isinstance(value, str) or value.strip().lower() not in allowed:
        raise DomainError(f"status must be one of {', '.join(allowed)}; got {value!r}", code="bad_status")
    return value.strip().lower()


def reason_clean(value) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise DomainError("reason must be text", code="bad_reason")
    text = " ".join(value.split())
    if len(text) > MAX_STATUS_REASON:
        raise DomainError(f"reason is longer than {MAX_STATUS_REASON} characters", code="bad_reason")
    return text


def _may_set(actor: Actor, run: Run) -> None:
    """A person needs the operator role; a host may speak only for runs with a copy at one of its locations."""
    if actor.kind == ActorKind.USER:
        if actor.user is None:
            raise DomainError("setting a run's status by a person needs the signed-in user", code="not_authenticated")
        require_role(
            actor.user,
            Role.OPERATOR,
            doing="setting a run's status",
            target_type="run",
            target_id=run.pk,
            target_label=str(run),
            source=actor.source,
        )
    elif actor.kind == ActorKind.HOST:
        own = CheckpointCopy.objects.filter(
            checkpoint__run=run, gone_at__isnull=True, location__host__name=actor.label
        ).exists()
        if not own:
            raise PermissionRefused(
                f"host {actor.label} holds no copy of {run}: a host may set the status only of runs it stores"
            )


def _is_noop(run: Run, status: str, source: str) -> bool:
    if run.status != status:
        return False
    # The same status said again is nothing new, unless someone now confirms what was only inferred.
    return not (run.status_source == RunStatusSource.INFERRED and source in EXPLICIT_SOURCES)


def run_status_set(
    *,
    run: Run,
    status: str,
    actor: Actor,
    source: str,
    reason: str = "",
    request_id: str = "",
    written_at: datetime | None = None,
) -> StatusChange:
    """Set ``run``'s status as ``source`` says (sidecar, api, operator, inferred), audited as ``run.status``.

    ``written_at``: when the source said it (a sidecar's mtime); older than the run's last change, it is
    ignored. Inference never replaces an ended status someone said explicitly. Bad input raises
    ``DomainError`` before anything is written; a refused person or host raises ``PermissionRefused``.
    """
    status = status_clean(status)
    if source not in RunStatusSource.values or source == RunStatusSource.NONE:
        raise DomainError(f"source must be one of sidecar, api, operator, inferred; got {source!r}")
    reason = reason_clean(reason)
    _may_set(actor, run)
    with transaction.atomic():
        locked = Run.objects.select_for_update(of=("self",), no_key=True).select_related("team").get(pk=run.pk)
        before = locked.status
        stale = (
            written_at is not None and locked.status_changed_at is not None and written_at <= locked.status_changed_at
        )
        overrides_explicit = (
            source == RunStatusSource.INFERRED
            and locked.status_source in EXPLICIT_SOURCES
            and locked.status in ENDED_STATUSES
        )
        if stale or overrides_explicit or _is_noop(locked, status, source):
            return StatusChange(locked, False, before)
        before_fields = {"status": before, "source": locked.status_source, "reason": locked.status_reason}
        locked.status = status
        locked.status_source = source
        locked.status_reason = reason
        locked.status_changed_at = timezone.now()
        locked.status_by_label = actor.label[:150]
        locked.save(update_fields=["status", "status_source", "status_reason", "status_changed_at", "status_by_label"])
        audit(
            actor,
            "run.status",
            target_type="run",
            target_id=locked.pk,
            target_label=str(locked),
            reason=reason,
            before=before_fields,
            after={"status": status, "source": source, "reason": reason},
            request_id=(request_id or "")[:64],
        )
        hooks.run_status_changed(locked.pk, status)
    return StatusChange(locked, True, before)


def runs_reactivate(run_ids: Iterable[int], *, actor: Actor) -> list[int]:
    """Runs among ``run_ids`` that were only inferred ended and have a new checkpoint: active again (inferred).

    Called by the ingest, in its transaction, with the runs it created checkpoints for. One query when none
    of them was inferred ended, which is nearly always."""
    ids = sorted(set(run_ids))
    if not ids:
        return []
    back = []
    candidates = Run.objects.filter(
        pk__in=ids, status__in=ENDED_STATUSES, status_source=RunStatusSource.INFERRED
    ).order_by("pk")
    for run in candidates:
        change = run_status_set(
            run=run,
            status=RunStatus.ACTIVE,
            actor=actor,
            source=RunStatusSource.INFERRED,
            reason="a new checkpoint appeared after the run was inferred finished",
        )
        if change.changed:
            back.append(run.pk)
    return back


def _idle(runs, cutoff: datetime):
    """Active runs with no checkpoint first seen since ``cutoff``, and no explicit word since then either."""
    return (
        runs.filter(status=RunStatus.ACTIVE)
        .annotate(last_checkpoint_at=last_saved())
        .filter(Q(last_checkpoint_at__lt=cutoff) | Q(last_checkpoint_at__isnull=True, created_at__lt=cutoff))
        .exclude(status_source__in=EXPLICIT_SOURCES, status_changed_at__gte=cutoff)
    )


def runs_infer_ended(*, now: datetime | None = None, actor: Actor | None = None) -> list[int]:
    """Mark finished (source inferred) every active run idle for ``CKPTFLEET_RUN_IDLE_DAYS``; returns their ids.

    Idempotent: a second pass finds nothing. Each run is re-checked under its row lock, so a checkpoint
    that lands meanwhile keeps the run active."""
    days = idle_days()
    now = now or timezone.now()
    cutoff = now - timedelta(days=days)
    actor = actor or Actor.system("run lifecycle inference")
    ids = list(_idle(Run.objects.all(), cutoff).order_by("pk").values_list("pk", flat=True))
    ended = []
    for i in range(0, len(ids), INFER_CHUNK):
        for pk in ids[i : i + INFER_CHUNK]:
            with transaction.atomic():
                # Locked first, then asked again: FOR UPDATE does not go with the GROUP BY of the question.
                if not Run.objects.select_for_update(of=("self",), no_key=True).filter(pk=pk).exists():
                    continue
                run = _idle(Run.objects.filter(pk=pk), cutoff).first()
                if run is None:
                    continue
                last = run.last_checkpoint_at
                since = f"since {last:%Y-%m-%d} UTC" if last is not None else "ever"
                change = run_status_set(
                    run=run,
                    status=RunStatus.FINISHED,
                    actor=actor,
                    source=RunStatusSource.INFERRED,
                    reason=f"no new checkpoint for {days} days ({since})",
                )
                if change.changed:
                    ended.append(pk)
    return ended


def sidecar_statuses_apply(said: dict[int, tuple[str, str, datetime | None]], *, actor: Actor) -> list[int]:
    """Apply what sidecars said, ``{run id: (status, reason, written at)}``, as the ingest found them."""
    changed = []
    for run_id, (status, reason, written_at) in sorted(said.items()):
        run = Run.objects.filter(pk=run_id).first()
        if run is None:
            continue
        change = run_status_set(
            run=run,
            status=status,
            actor=actor,
            source=RunStatusSource.SIDECAR,
            reason=reason,
            written_at=written_at,
        )
        if change.changed:
            changed.append(run_id)
    return changed
