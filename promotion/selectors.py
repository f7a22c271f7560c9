"""Reads of promotions for pages and the API: a fixed number of queries whatever the data."""

from __future__ import annotations

from django.db.models import Count, QuerySet

from access.scoping import restrict_runs
from catalog.models import Checkpoint, CheckpointCopy
from fleet.models import StorageLocation
from promotion.choices import ItemState
from promotion.models import PromotionItem, PromotionJob

RECENT_ON_CHECKPOINT = 5


def job_list(*, user=None, state: str = "", checkpoint_id: int | None = None) -> QuerySet[PromotionJob]:
    """Promotions newest first; with ``user``, only those of runs the user may see (team scoping)."""
    jobs = PromotionJob.objects.select_related(
        "checkpoint__run__team", "source_copy__location", "target_location"
    ).order_by("-requested_at", "-id")
    if user is not None:
        jobs = restrict_runs(jobs, user, run_path="checkpoint__run__")
    if state:
        jobs = jobs.filter(state=state)
    if checkpoint_id:
        jobs = jobs.filter(checkpoint_id=checkpoint_id)
    return jobs


def job_detail(pk: int, *, user=None) -> PromotionJob:
    return job_list(user=user).get(pk=pk)


def item_counts(job: PromotionJob) -> dict[str, int]:
    """Items by state, every state present (zero when none): one grouped query."""
    counts = dict.fromkeys(ItemState.values, 0)
    for row in PromotionItem.objects.filter(job=job).values("state").annotate(n=Count("id")):
        counts[row["state"]] = row["n"]
    return counts


def job_items(job: PromotionJob) -> QuerySet[PromotionItem]:
    return PromotionItem.objects.filter(job=job).order_by("path")


def checkpoint_jobs(checkpoint: Checkpoint) -> list[PromotionJob]:
    return list(job_list(checkpoint_id=checkpoint.pk)[:RECENT_ON_CHECKPOINT])


def promotable_copies(checkpoint: Checkpoint) -> list[CheckpointCopy]:
    return list(
        CheckpointCopy.objects.filter(checkpoint=checkpoint, gone_at__isnull=True)
        .select_related("location")
        .order_by("location__name")
    )


def target_locations() -> list[StorageLocation]:
    """Buckets and host locations a copy may go to, by name."""
    return list(StorageLocation.objects.select_related("host").order_by("name"))
