"""Reads of promotions for pages and the API: a fixed number of queries whatever the data."""

from __future__ import annotations

from datetime import timedelta

from django.db.models import Count, QuerySet
from django.utils import timezone

from access.scoping import restrict_runs
from catalog.ages import saved_or_seen
from catalog.models import Checkpoint, CheckpointCopy
from ckptfleet.errors import DomainError
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


MAX_MOVE_CHECKPOINTS = 500  # one request; a larger set is asked for in parts (or by a policy)


def move_candidates(
    *,
    user=None,
    checkpoint_ids: list[int] | None = None,
    run_id: int | None = None,
    older_than_days: int | None = None,
    importance: list[str] | None = None,
) -> list[Checkpoint]:
    """The checkpoints a move names: ids, or a run's checkpoints filtered by age (days since it was saved,
    ``catalog.ages``) and importance; only runs ``user`` may see. Raises DomainError when nothing is named or too
    much is."""
    if not checkpoint_ids and run_id is None:
        raise DomainError("name checkpoints or a run to move", code="nothing_to_move")
    found = Checkpoint.objects.select_related("run__team")
    if user is not None:
        found = restrict_runs(found, user, run_path="run__")
    if checkpoint_ids:
        found = found.filter(pk__in=checkpoint_ids)
    if run_id is not None:
        found = found.filter(run_id=run_id)
    if older_than_days:
        found = found.alias(saved=saved_or_seen()).filter(saved__lt=timezone.now() - timedelta(days=older_than_days))
    if importance:
        found = found.filter(importance__in=importance)
    chosen = list(found.order_by("run_id", "-step", "tag")[: MAX_MOVE_CHECKPOINTS + 1])
    if checkpoint_ids and len({c.pk for c in chosen}) != len(set(checkpoint_ids)):
        missing = sorted(set(checkpoint_ids) - {c.pk for c in chosen})
        raise DomainError(f"there is no checkpoint {', '.join(map(str, missing))}", code="not_found", http_status=404)
    if len(chosen) > MAX_MOVE_CHECKPOINTS:
        raise DomainError(f"more than {MAX_MOVE_CHECKPOINTS} checkpoints: narrow the filter", code="too_many")
    if not chosen:
        raise DomainError("no checkpoint matches: nothing to move", code="nothing_to_move")
    return chosen


def move_targets() -> list[StorageLocation]:
    """Bucket locations a move may go to, by name."""
    return list(StorageLocation.objects.filter(bucket__isnull=False).order_by("name"))
