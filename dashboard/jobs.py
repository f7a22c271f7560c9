"""Every job in one list: inventories and bucket scans, promotions and deletions, with progress and outcome.

Each kind keeps its own state in its own table; this module reads the newest of each (one query per
kind, bounded) and presents them as one shape for the jobs page and its live-progress endpoint.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Q
from django.urls import reverse

from access.scoping import RUN_PATHS, restrict
from actions.execution import last_progress
from actions.models import DeletionJob, DeletionState
from fleet.choices import InventorySource, InventoryStatus
from fleet.models import Inventory
from promotion.choices import OPEN_STATES as PROMOTION_OPEN
from promotion.choices import JobState
from promotion.models import PromotionJob

KINDS = {"scan": "Scans and inventories", "promotion": "Promotions and moves", "deletion": "Deletions"}
MOVE_VERBS = {"promote": "Promote", "demote": "Demote", "offload": "Offload"}
STATES = {"active": "Running or waiting", "ended": "Finished", "failed": "Failed or blocked"}

INVENTORY_ACTIVE = (InventoryStatus.RECEIVED, InventoryStatus.PROCESSING)
DELETION_ACTIVE = (DeletionState.AWAITING_APPROVAL, DeletionState.SCHEDULED, DeletionState.RUNNING)
FAILED = {InventoryStatus.FAILED, JobState.FAILED, DeletionState.FAILED, DeletionState.BLOCKED}


@dataclass
class Job:
    kind: str
    pk: int
    title: str
    url: str
    state: str
    state_label: str
    active: bool
    at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    done: int | None = None
    total: int | None = None
    unit: str = ""  # "bytes", "files", "items"
    outcome: str = ""
    by: str = ""

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.pk}"

    @property
    def failed(self) -> bool:
        return self.state in FAILED

    @property
    def percent(self) -> int | None:
        if not self.total or self.done is None:
            return None
        return min(100, int(self.done * 100 / self.total))

    def as_json(self) -> dict:
        return {
            "key": self.key,
            "state": self.state,
            "state_label": self.state_label,
            "active": self.active,
            "done": self.done,
            "total": self.total,
            "unit": self.unit,
            "percent": self.percent,
            "outcome": self.outcome,
        }


def _checksums(inv: Inventory) -> str:
    """A bucket scan's checksum phase in words: "checksums: N of M objects" (and how many failed)."""
    if not inv.checksums_total:
        return ""
    noun = "object" if inv.checksums_total == 1 else "objects"
    text = f"checksums: {inv.checksums_done:,} of {inv.checksums_total:,} {noun}"
    if inv.checksums_failed:
        text += f", {inv.checksums_failed:,} failed"
    return text


def _inventory(inv: Inventory) -> Job:
    source = InventorySource(inv.source).label if inv.source in InventorySource.values else inv.source
    done = inv.files_count if inv.status == InventoryStatus.APPLIED else None
    counts = f"{inv.files_added:,} added, {inv.files_changed:,} changed, {inv.files_gone:,} gone" if done else ""
    checksums = _checksums(inv) if done is not None else ""
    outcome = inv.error or counts
    if checksums and checksums not in outcome:
        outcome = f"{outcome}; {checksums}" if outcome else checksums
    running = inv.checksums_running
    return Job(
        kind="scan",
        pk=inv.pk,
        title=f"{source}: {inv.location.name}",
        url=reverse("fleet:inventory-detail", args=[inv.pk]),
        state=inv.status,
        state_label=f"{inv.get_status_display()}, fetching checksums" if running else inv.get_status_display(),
        # An applied scan whose checksums are still being fetched is followed like a running job.
        active=inv.status in INVENTORY_ACTIVE or running,
        at=inv.received_at,
        started_at=inv.started_at,
        finished_at=inv.finished_at,
        done=inv.checksums_done if running else done,
        total=(inv.checksums_total if running else inv.files_count) or None,
        unit="objects" if running else "files",
        outcome=outcome,
        by=inv.host.name if inv.host_id else "scheduled scan",
    )


def _checkpoint_job(
    job: PromotionJob | DeletionJob, *, kind: str, verb: str, what: str, url: str, active: tuple, **progress
) -> Job:
    """A promotion or a deletion: a job on one checkpoint, requested by someone; ``progress`` is its own
    (done, total, unit, outcome). Its title is "<verb> <team>/<run> <checkpoint> <what>"."""
    run = job.checkpoint.run
    return Job(
        kind=kind,
        pk=job.pk,
        title=f"{verb} {run.team.name}/{run.name} {job.checkpoint.label} {what}",
        url=reverse(url, args=[job.pk]),
        state=job.state,
        state_label=job.get_state_display(),
        active=job.state in active,
        at=job.requested_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
        by=job.requested_label,
        **progress,
    )


def _promotion(job: PromotionJob) -> Job:
    target = job.target_location.name + (f" ({job.target_storage_class})" if job.target_storage_class else "")
    return _checkpoint_job(
        job,
        kind="promotion",
        verb=MOVE_VERBS.get(job.direction, "Promote"),
        what=f"to {target}",
        url="promotion:job-detail",
        active=PROMOTION_OPEN,
        done=job.bytes_done,
        total=job.bytes_total or None,
        unit="bytes",
        outcome=job.error or job.source_outcome,
    )


def _deletion(job: DeletionJob) -> Job:
    scope = f"copy at {job.copy.location.name}" if job.copy_id else "every copy"
    return _checkpoint_job(
        job,
        kind="deletion",
        verb="Delete",
        what=f"({scope})",
        url="actions:deletion-detail",
        active=DELETION_ACTIVE,
        done=job.items_deleted + job.items_blocked,
        total=job.items_total or None,
        unit="items",
        outcome=job.outcome
        or (f"waits until {job.execute_after:%Y-%m-%d %H:%M} UTC" if job.state == DeletionState.SCHEDULED else "")
        or last_progress(job),
    )


def _inventories():
    return Inventory.objects.select_related("location", "host").defer("upload")


def _promotions():
    return PromotionJob.objects.select_related(
        "checkpoint", "checkpoint__run", "checkpoint__run__team", "target_location"
    )


def _deletions():
    return DeletionJob.objects.select_related(
        "checkpoint", "checkpoint__run", "checkpoint__run__team", "copy", "copy__location"
    )


# A bucket scan applied but still fetching its stored checksums (``Inventory.checksums_running``) is active.
_CHECKSUMS_RUNNING = Q(status=InventoryStatus.APPLIED, checksums_total__gt=0, checksums_finished_at__isnull=True)

# Per kind: its rows, how one becomes a Job, its newest-first order, its state field and each group's filter.
_KIND_SOURCES = {
    "scan": (
        _inventories,
        _inventory,
        ("-received_at", "-id"),
        {
            "active": Q(status__in=INVENTORY_ACTIVE) | _CHECKSUMS_RUNNING,
            "ended": Q(status=InventoryStatus.APPLIED) & ~_CHECKSUMS_RUNNING,
            "failed": Q(status=InventoryStatus.FAILED),
        },
    ),
    "promotion": (
        _promotions,
        _promotion,
        ("-requested_at", "-id"),
        {
            "active": Q(state__in=PROMOTION_OPEN),
            "ended": Q(state__in=(JobState.COMPLETED, JobState.CANCELLED)),
            "failed": Q(state=JobState.FAILED),
        },
    ),
    "deletion": (
        _deletions,
        _deletion,
        ("-requested_at", "-id"),
        {
            "active": Q(state__in=DELETION_ACTIVE),
            "ended": Q(state__in=(DeletionState.COMPLETED, DeletionState.CANCELLED)),
            "failed": Q(state__in=(DeletionState.FAILED, DeletionState.BLOCKED)),
        },
    ),
}


def _scoped(qs, user):
    """Promotions and deletions of the runs ``user`` may see (``access.scoping``); scans are of locations."""
    if user is None or qs.model._meta.label_lower not in RUN_PATHS:
        return qs
    return restrict(qs, user)


def recent_jobs(*, kind: str = "", state: str = "", limit: int = 50, user=None) -> list[Job]:
    """The newest ``limit`` jobs of the chosen kind (or all) and state group, newest first: one query per kind."""
    jobs: list[Job] = []
    for name, (rows, as_job, order, groups) in _KIND_SOURCES.items():
        if kind and kind != name:
            continue
        qs = _scoped(rows(), user).order_by(*order)
        if state in groups:
            qs = qs.filter(groups[state])
        jobs += [as_job(row) for row in qs[:limit]]
    jobs.sort(key=lambda j: (j.at, j.pk), reverse=True)
    return jobs[:limit]


def ended_badly(*, since, user=None) -> int:
    """Promotions and deletions that ended failed or blocked since ``since``: each left data where it was not
    meant to be (objects the store refused to delete, a copy never made). Scans are counted per location."""
    total = 0
    for name in ("promotion", "deletion"):
        rows, _, _, groups = _KIND_SOURCES[name]
        total += _scoped(rows().model.objects.all(), user).filter(groups["failed"], finished_at__gte=since).count()
    return total


def jobs_by_key(keys: list[str], *, user=None) -> list[Job]:
    """The current state of the jobs named ``kind:id`` (for live progress): one query per kind asked for."""
    ids: dict[str, list[int]] = {name: [] for name in _KIND_SOURCES}
    for key in keys[:200]:
        kind, _, pk = key.partition(":")
        if kind in ids and pk.isascii() and pk.isdigit() and len(pk) <= 18:
            ids[kind].append(int(pk))
    jobs: list[Job] = []
    for name, (rows, as_job, *_) in _KIND_SOURCES.items():
        if ids[name]:
            jobs += [as_job(row) for row in _scoped(rows(), user).filter(pk__in=ids[name])]
    return jobs
