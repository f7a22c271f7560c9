"""Reads of the catalog, shared by pages and the API so both show the same thing."""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import Count, F, Max, Prefetch, Q, QuerySet, Sum, Window
from django.db.models.functions import RowNumber

from catalog.choices import CopyState
from catalog.models import Checkpoint, CheckpointCopy, Run, ShardFile, Team

NEWEST_STEP_FIRST = F("step").desc(nulls_last=True)


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
    """A run's checkpoints, newest step first (step-less exports last), each with its present copies."""
    copies = present_copies().select_related("location", "location__host").order_by("location__name")
    return (
        Checkpoint.objects.filter(run=run, copies__gone_at__isnull=True)
        .distinct()
        .order_by(NEWEST_STEP_FIRST, "tag")
        .prefetch_related(Prefetch("copies", queryset=copies, to_attr="present"))
    )


def newest_complete(run: Run) -> Checkpoint | None:
    """The newest checkpoint of a run with at least one complete copy.

    A step-less export (a final model, ``last.ckpt``) only counts when no stepped checkpoint is
    complete: the same on every database, which sort NULL steps differently by default.
    """
    return (
        Checkpoint.objects.filter(run=run, copies__gone_at__isnull=True, copies__state=CopyState.COMPLETE)
        .order_by(NEWEST_STEP_FIRST, "tag")
        .first()
    )


def run_search(*, q: str = "", team_id: int | None = None) -> QuerySet[Run]:
    """``run_list`` narrowed by a run or team name fragment and a team, sorted by team then run."""
    runs = run_list()
    if q:
        runs = runs.filter(Q(name__icontains=q) | Q(team__name__icontains=q))
    if team_id is not None:
        runs = runs.filter(team_id=team_id)
    return runs.order_by("team__name", "name", "pk")


def team_choices() -> QuerySet[Team]:
    """Teams that own at least one run, for the runs filter."""
    return Team.objects.filter(runs__isnull=False).distinct().order_by("name").only("pk", "name")


def checkpoint_with_run(pk: int) -> Checkpoint:
    """One checkpoint with its run and team; raises ``Checkpoint.DoesNotExist``."""
    return Checkpoint.objects.select_related("run__team").get(pk=pk)


def checkpoint_copies(checkpoint: Checkpoint) -> list[CheckpointCopy]:
    """Every copy of a checkpoint, present ones first, with its location and host."""
    return list(
        CheckpointCopy.objects.filter(checkpoint=checkpoint)
        .select_related("location", "location__host")
        .order_by(F("gone_at").desc(nulls_first=True), "location__name", "path")
    )


def copy_files_head(copies: Iterable[CheckpointCopy], *, limit: int) -> dict[int, list[ShardFile]]:
    """The first ``limit`` present files of each copy by path, in one query whatever the number of copies."""
    ids = [c.pk for c in copies]
    if not ids:
        return {}
    numbered = (
        ShardFile.objects.filter(copy_id__in=ids, gone_at__isnull=True)
        .annotate(row=Window(RowNumber(), partition_by=[F("copy_id")], order_by=[F("path").asc()]))
        .filter(row__lte=limit)
        .only("pk", "copy_id", "path", "size", "mtime", "checksum", "checksum_algo")
        .order_by("copy_id", "path")
    )
    heads: dict[int, list[ShardFile]] = {pk: [] for pk in ids}
    for f in numbered:
        heads[f.copy_id].append(f)
    return heads


def copy_files(copy: CheckpointCopy) -> QuerySet[ShardFile]:
    """A copy's present files by path, for paging through all of them."""
    return (
        ShardFile.objects.filter(copy=copy, gone_at__isnull=True)
        .only("pk", "copy_id", "path", "size", "mtime", "checksum", "checksum_algo")
        .order_by("path", "pk")
    )
