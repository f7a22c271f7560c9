"""Reads of the catalog, shared by pages and the API so both show the same thing."""

from __future__ import annotations

from django.db.models import Count, Max, Prefetch, Q, QuerySet, Sum

from catalog.choices import CopyState
from catalog.models import Checkpoint, CheckpointCopy, Run


def present_copies() -> QuerySet[CheckpointCopy]:
    return CheckpointCopy.objects.filter(gone_at__isnull=True)


def run_list() -> QuerySet[Run]:
    """Runs with their checkpoint counts, bytes and newest step, in one query."""
    present = Q(checkpoints__copies__gone_at__isnull=True)
    return Run.objects.select_related("team").annotate(
        checkpoint_count=Count("checkpoints", filter=present, distinct=True),
        copy_count=Count("checkpoints__copies", filter=present),
        bytes=Sum("checkpoints__copies__bytes", filter=present),
        newest_step=Max("checkpoints__step", filter=present),
        bad_copies=Count(
            "checkpoints__copies",
            filter=present & ~Q(checkpoints__copies__state=CopyState.COMPLETE),
        ),
    )


def run_checkpoints(run: Run) -> QuerySet[Checkpoint]:
    """A run's checkpoints, newest step first, each with its present copies and their locations."""
    copies = present_copies().select_related("location", "location__host").order_by("location__name")
    return (
        Checkpoint.objects.filter(run=run, copies__gone_at__isnull=True)
        .distinct()
        .order_by("-step")
        .prefetch_related(Prefetch("copies", queryset=copies, to_attr="present"))
    )


def newest_complete(run: Run) -> Checkpoint | None:
    """The newest checkpoint of a run with at least one complete copy."""
    return (
        Checkpoint.objects.filter(run=run, copies__gone_at__isnull=True, copies__state=CopyState.COMPLETE)
        .order_by("-step")
        .first()
    )
