"""Reads of the catalog, shared by pages and the API so both show the same thing."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from django.db import models
from django.db.models import (
    Case,
    Count,
    Exists,
    F,
    Func,
    Max,
    Min,
    OuterRef,
    Prefetch,
    Q,
    QuerySet,
    Sum,
    TextField,
    Value,
    When,
    Window,
)
from django.db.models.functions import Coalesce, RowNumber, Substr

from catalog.choices import CopyState, RunStatus, Verification
from catalog.layout import PathTemplate
from catalog.models import Checkpoint, CheckpointCopy, Run, ShardFile, Team
from catalog.verification import VerificationSummary, summarize
from fleet.models import MultipartUpload, StorageLocation

NEWEST_STEP_FIRST = F("step").desc(nulls_last=True)


# A left-over of an interrupted save (an Orbax ``*.orbax-checkpoint-tmp-*`` folder, a Lightning ``.ckpt.XXXX.tmp``,
# a DCP ``.metadata.tmp``) is recognised as a temporary copy of the step it was saving. It is an orphan, not a
# checkpoint: every list and count of checkpoints and their copies leaves it out (the orphans page lists it), so a
# checkpoint that has nothing but left-overs is not one of the run's checkpoints at all.
KEPT = Q(gone_at__isnull=True, temporary=False)
RUN_KEPT = Q(checkpoints__copies__gone_at__isnull=True, checkpoints__copies__temporary=False)


def present_copies(*, temporary: bool = True) -> QuerySet[CheckpointCopy]:
    """Copies the newest inventory of their location still holds; ``temporary=False`` leaves out left-overs."""
    return CheckpointCopy.objects.filter(Q(gone_at__isnull=True) if temporary else KEPT)


def with_kept_copy(checkpoints: QuerySet[Checkpoint]) -> QuerySet[Checkpoint]:
    """``checkpoints`` that have a present copy other than a left-over of an interrupted save."""
    return checkpoints.filter(Exists(present_copies(temporary=False).filter(checkpoint=OuterRef("pk"))))


def run_list() -> QuerySet[Run]:
    """Runs with their checkpoint counts, bytes and newest step, in one query; left-overs of interrupted
    saves are not counted."""
    present = RUN_KEPT
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
    """A run's checkpoints, newest step first (step-less exports last), each with its present copies
    (``present``); left-overs of interrupted saves are neither checkpoints nor copies here."""
    copies = present_copies(temporary=False).select_related("location", "location__host").order_by("location__name")
    return (
        with_kept_copy(Checkpoint.objects.filter(run=run))
        .order_by(NEWEST_STEP_FIRST, "tag")
        .prefetch_related(Prefetch("copies", queryset=copies, to_attr="present"))
    )


def run_search(*, q: str = "", team_id: int | None = None) -> QuerySet[Run]:
    """``run_list`` narrowed by a run or team name fragment and a team, sorted by team then run."""
    runs = run_list()
    if q:
        runs = runs.filter(Q(name__icontains=q) | Q(team__name__icontains=q))
    if team_id is not None:
        runs = runs.filter(team_id=team_id)
    return runs.order_by("team__name", "name", "pk")


def run_by_ref(raw: str, runs: QuerySet[Run]) -> Run | None:
    """A run by its id or by "team/run" (its name alone when one run has it), among ``runs``."""
    raw = raw.strip()
    if raw.isascii() and raw.isdigit():
        return runs.filter(pk=int(raw)).first() if len(raw) <= 18 else None
    team, slash, name = raw.partition("/")
    if slash:
        return runs.filter(team__name=team.strip(), name=name.strip()).first()
    named = list(runs.filter(name=raw)[:2])
    return named[0] if len(named) == 1 else None


def team_choices() -> QuerySet[Team]:
    """Teams that own at least one run, for the runs filter."""
    return Team.objects.filter(runs__isnull=False).distinct().order_by("name").only("pk", "name")


def checkpoint_with_run(pk: int) -> Checkpoint:
    """One checkpoint with its run and team; raises ``Checkpoint.DoesNotExist``."""
    return Checkpoint.objects.select_related("run__team").get(pk=pk)


def checkpoint_copies(checkpoint: Checkpoint) -> list[CheckpointCopy]:
    """Every copy of a checkpoint, present ones first, with its location and host (and, where recorded, the location
    of the copy it was made from)."""
    return list(
        CheckpointCopy.objects.filter(checkpoint=checkpoint)
        .select_related("location", "location__host", "made_from__location")
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
        heads[cast(int, f.copy_id)].append(f)  # never None: filtered on copy_id__in
    return heads


def copy_files(copy: CheckpointCopy) -> QuerySet[ShardFile]:
    """A copy's present files by path, for paging through all of them."""
    return (
        ShardFile.objects.filter(copy=copy, gone_at__isnull=True)
        .only("pk", "copy_id", "path", "size", "mtime", "checksum", "checksum_algo")
        .order_by("path", "pk")
    )


# --- verification -------------------------------------------------------------------------------


def verification_summary(checkpoint_ids: Iterable[int]) -> dict[int, VerificationSummary]:
    """Verified present copies per checkpoint and their distinct failure domains, in one query.

    A failure domain is the host for a copy on a host and the region for a bucket (see
    ``catalog.verification.failure_domain``). Every id asked for gets a summary, zero when none.
    """
    ids = list(set(checkpoint_ids))
    copies: dict[int, list[CheckpointCopy]] = {pk: [] for pk in ids}
    if ids:
        verified = (
            present_copies()
            .filter(checkpoint_id__in=ids, verification=Verification.VERIFIED)
            .select_related("location", "location__host")
            .only(
                "pk",
                "checkpoint_id",
                "verification",
                "gone_at",
                "location__name",
                "location__region",
                "location__host__name",
                "location__host__region",
            )
        )
        for copy in verified:
            copies[copy.checkpoint_id].append(copy)
    return {pk: summarize(members) for pk, members in copies.items()}


# --- orphans --------------------------------------------------------------------------------------


class OrphanKind(models.TextChoices):
    UNCLAIMED = "unclaimed", "Files of no checkpoint"
    TEMPORARY = "temporary", "Left-overs of interrupted saves"
    MULTIPART = "multipart", "Incomplete multipart uploads"
    DELETED_RUN = "deleted_run", "Copies of deleted runs"
    ALL_PARTIAL = "all_partial", "Checkpoints with only partial copies"


ORPHAN_KIND_HELP = {
    OrphanKind.UNCLAIMED: "present files that no recognised checkpoint owns",
    OrphanKind.TEMPORARY: "copies an interrupted save left behind (temporary directories, unfinished markers)",
    OrphanKind.MULTIPART: "uploads that were started and never completed or aborted: their parts are billed",
    OrphanKind.DELETED_RUN: "copies of runs marked finished and deleted",
    OrphanKind.ALL_PARTIAL: "copies of checkpoints whose every present copy is partial, so nothing restores them",
}


@dataclass(frozen=True)
class OrphanGroup:
    """Orphans of one kind at one location below one run directory (``PathTemplate.group_of``)."""

    kind: str
    location_id: int
    location_name: str
    host_id: int | None
    prefix: str
    items: int  # files, copies or uploads, as the kind says
    files: int
    bytes: int | None  # None: unknown (an upload whose parts were not listed)
    oldest: datetime | None
    newest: datetime | None
    run_id: int | None = None
    run_label: str = ""

    @property
    def kind_label(self) -> str:
        return OrphanKind(self.kind).label

    @property
    def item_noun(self) -> str:
        nouns: dict[str, str] = {
            OrphanKind.UNCLAIMED: "file",
            OrphanKind.MULTIPART: "upload",
            OrphanKind.ALL_PARTIAL: "partial copy,partial copies",
        }
        return nouns.get(self.kind, "copy,copies")


class _RunPrefix(Func):
    """``PathTemplate.group_of`` in SQL: the first ``depth`` components of the directory of a path.

    A path with more than ``depth`` components belongs to its run directory (the first ``depth``); a
    shallower one to the directory holding it. Written out for each database, as neither has a
    portable "split" that Django knows.
    """

    output_field = TextField()

    def __init__(self, expression, *, depth: int) -> None:
        super().__init__(expression)
        self.depth = depth

    # Django calls it with (compiler, connection) alone: Func's function, template and arg_joiner have no
    # meaning for this SQL, written out whole per database.
    def as_sql(self, compiler, connection, **extra):  # type: ignore[override]
        sql, params = compiler.compile(self.source_expressions[0])
        e = "@@path@@"  # where the path expression goes; it may occur many times, each with its parameters
        if connection.vendor == "postgresql":
            parts = f"string_to_array({e}, '/')"
            text = f"array_to_string(({parts})[1:LEAST({self.depth}, cardinality({parts}) - 1)], '/')"
        elif connection.vendor == "sqlite":
            # The directory with its trailing slash: every non-slash character trimmed from the right.
            directory = f"rtrim({e}, replace({e}, '/', ''))"
            # The position of its depth-th slash (or of its last one, when it has fewer).
            rest, position = directory, "0"
            for _ in range(self.depth):
                slash = f"instr({rest}, '/')"
                position = f"({position} + {slash})"
                rest = f"substr({rest}, {slash} + 1)"
            text = f"CASE WHEN {position} = 0 THEN '' ELSE substr({directory}, 1, {position} - 1) END"
        else:
            raise NotImplementedError(f"orphans are grouped on PostgreSQL and SQLite, not {connection.vendor}")
        return text.replace(e, f"({sql})"), list(params) * text.count(e)


def _prefix(path, depths: dict[int, list[int]]):
    """The run directory of ``path`` (an expression) at each location, by the depth of its template."""
    if len(depths) == 1:
        return _RunPrefix(path, depth=next(iter(depths)))
    return Case(
        *(When(location_id__in=ids, then=_RunPrefix(path, depth=d)) for d, ids in depths.items()),
        default=Value(""),
        output_field=TextField(),
    )


def _below_bucket_prefix(prefixes: dict[str, list[int]]):
    """An upload's key relative to its bucket's prefix, as the paths of the bucket's files are."""
    if not prefixes:
        return F("key")
    return Case(
        *(
            When(location_id__in=ids, key__startswith=prefix, then=Substr("key", len(prefix) + 1))
            for prefix, ids in sorted(prefixes.items())
        ),
        default=F("key"),
        output_field=TextField(),
    )


def orphans(*, kind: str | None = None, location_id: int | None = None) -> list[OrphanGroup]:
    """Everything orphaned, grouped by kind, location and run directory, with counts, bytes and ages.

    Each kind is one ``GROUP BY`` over present rows, so the number of queries is fixed (one for the
    locations and one per kind) whatever the number of files. A copy counts under one kind only:
    temporary first, then a deleted run, then a checkpoint whose every present copy is partial.
    """
    locations = {
        loc["pk"]: loc
        for loc in StorageLocation.objects.filter(**({"pk": location_id} if location_id else {})).values(
            "pk", "name", "host_id", "path_template", "bucket__prefix"
        )
    }
    if not locations:
        return []
    depths, bucket_prefixes = _run_depths(locations)
    where = {"location_id__in": list(locations)} if location_id else {}
    wanted = [kind] if kind else list(OrphanKind.values)
    rows: list[tuple[str, Mapping[str, Any]]] = []
    if OrphanKind.UNCLAIMED in wanted:
        rows.extend(_unclaimed_files(where, depths))
    rows.extend(_orphan_copies(wanted, where, depths))
    if OrphanKind.MULTIPART in wanted:
        rows.extend(_incomplete_uploads(where, depths, bucket_prefixes))
    groups = [_orphan_group(orphan_kind, r, locations[r["location_id"]]) for orphan_kind, r in rows]
    order = {k: i for i, k in enumerate(OrphanKind.values)}
    groups.sort(key=lambda g: (g.location_name, g.prefix, order[g.kind], g.run_label))
    return groups


def _run_depths(locations: Mapping[int, Mapping[str, Any]]) -> tuple[dict[int, list[int]], dict[str, list[int]]]:
    """({run-directory depth: location ids}, {bucket prefix: location ids}): how each location's paths group."""
    depths: dict[int, list[int]] = defaultdict(list)
    bucket_prefixes: dict[str, list[int]] = defaultdict(list)
    for pk, loc in locations.items():
        if loc["bucket__prefix"]:
            bucket_prefixes[loc["bucket__prefix"].rstrip("/") + "/"].append(pk)
        try:
            depths[PathTemplate.parse(loc["path_template"]).depth].append(pk)
        except ValueError:
            depths[1].append(pk)  # a template without {run}: group by top-level directory
    return depths, bucket_prefixes


def _unclaimed_files(where: dict, depths: dict[int, list[int]]) -> Iterable[tuple[str, Mapping[str, Any]]]:
    """Files of no checkpoint, by run directory."""
    unclaimed = (
        ShardFile.objects.filter(copy__isnull=True, gone_at__isnull=True, **where)
        .annotate(prefix=_prefix(F("path"), depths))
        .values("location_id", "prefix")
        .annotate(items=Count("pk"), bytes=Sum("size"), oldest=Min("mtime"), newest=Max("mtime"))
        .order_by()
    )
    return ((OrphanKind.UNCLAIMED, {**r, "files": r["items"]}) for r in unclaimed)


def _orphan_copies(
    wanted: list[str], where: dict, depths: dict[int, list[int]]
) -> Iterable[tuple[str, Mapping[str, Any]]]:
    """Copies that are orphans: interrupted-save left-overs, copies of deleted runs, and checkpoints whose every
    present copy is partial (each copy under one kind only)."""
    copies = present_copies().filter(**where).annotate(prefix=_prefix(F("path"), depths))
    copy_sums = {
        "items": Count("pk"),
        "files": Sum("file_count"),
        "bytes": Sum("bytes"),
        "oldest": Min("newest_mtime"),
        "newest": Max("newest_mtime"),
    }
    by_run = ("location_id", "prefix", "checkpoint__run_id", "checkpoint__run__name", "checkpoint__run__team__name")
    if OrphanKind.TEMPORARY in wanted:
        temporary = copies.filter(temporary=True).values("location_id", "prefix").annotate(**copy_sums).order_by()
        yield from ((OrphanKind.TEMPORARY, r) for r in temporary)
    if OrphanKind.DELETED_RUN in wanted:
        deleted = (
            copies.filter(temporary=False, checkpoint__run__status=RunStatus.DELETED)
            .values(*by_run)
            .annotate(**copy_sums)
            .order_by()
        )
        yield from ((OrphanKind.DELETED_RUN, r) for r in deleted)
    if OrphanKind.ALL_PARTIAL in wanted:
        restorable = present_copies().filter(
            checkpoint_id=OuterRef("checkpoint_id"), temporary=False, state__in=[CopyState.COMPLETE, CopyState.CORRUPT]
        )
        partial = (
            copies.filter(temporary=False, state=CopyState.PARTIAL)
            .exclude(checkpoint__run__status=RunStatus.DELETED)
            .filter(~Exists(restorable))
            .values(*by_run)
            .annotate(**copy_sums)
            .order_by()
        )
        yield from ((OrphanKind.ALL_PARTIAL, r) for r in partial)


def _incomplete_uploads(
    where: dict, depths: dict[int, list[int]], bucket_prefixes: dict[str, list[int]]
) -> Iterable[tuple[str, Mapping[str, Any]]]:
    """Multipart uploads never completed nor aborted, by run directory below the bucket's prefix."""
    uploads = (
        MultipartUpload.objects.filter(gone_at__isnull=True, **where)
        .annotate(prefix=_prefix(_below_bucket_prefix(bucket_prefixes), depths))
        .values("location_id", "prefix")
        .annotate(
            items=Count("pk"),
            files=Coalesce(Sum("parts"), 0),
            bytes=Sum("bytes"),
            oldest=Min(Coalesce("initiated_at", "first_seen_at")),
            newest=Max(Coalesce("initiated_at", "first_seen_at")),
        )
        .order_by()
    )
    return ((OrphanKind.MULTIPART, r) for r in uploads)


def _orphan_group(orphan_kind: str, r: Mapping[str, Any], loc: Mapping[str, Any]) -> OrphanGroup:
    team, run = r.get("checkpoint__run__team__name"), r.get("checkpoint__run__name")
    return OrphanGroup(
        kind=str(orphan_kind),
        location_id=r["location_id"],
        location_name=loc["name"],
        host_id=loc["host_id"],
        prefix=r["prefix"] or "",
        items=r["items"],
        files=r["files"] or 0,
        bytes=r["bytes"],
        oldest=r["oldest"],
        newest=r["newest"],
        run_id=r.get("checkpoint__run_id"),
        run_label=f"{team}/{run}" if run else "",
    )


@dataclass(frozen=True)
class OrphanTotal:
    kind: str
    groups: int
    items: int
    bytes: int

    @property
    def kind_label(self) -> str:
        return OrphanKind(self.kind).label

    @property
    def help(self) -> str:
        return ORPHAN_KIND_HELP[OrphanKind(self.kind)]


def orphan_totals(groups: Iterable[OrphanGroup]) -> list[OrphanTotal]:
    """Totals per kind, every kind listed (zero when none), in the order of ``OrphanKind``."""
    sums: dict[str, list[int]] = {k: [0, 0, 0] for k in OrphanKind.values}
    for g in groups:
        s = sums[g.kind]
        s[0] += 1
        s[1] += g.items
        s[2] += g.bytes or 0
    return [OrphanTotal(k, *v) for k, v in sums.items()]


# --- the exact rows of one orphan group (what an orphan clean-up freezes) -------------------------

CLEANABLE_KINDS = (OrphanKind.UNCLAIMED, OrphanKind.TEMPORARY, OrphanKind.MULTIPART, OrphanKind.DELETED_RUN)


def _group_depths(location_id: int) -> tuple[dict[int, list[int]], dict[str, list[int]]]:
    locations = {
        loc["pk"]: loc
        for loc in StorageLocation.objects.filter(pk=location_id).values(
            "pk", "name", "host_id", "path_template", "bucket__prefix"
        )
    }
    return _run_depths(locations)


def orphan_group_files(*, kind: str, location_id: int, prefix: str, run_id: int | None = None) -> QuerySet[ShardFile]:
    """The present files of one orphan group as the orphans page groups them (``orphans``): files of no checkpoint,
    or the files of the group's left-over copies or deleted-run copies. Exactly those rows, never a pattern."""
    depths, _ = _group_depths(location_id)
    if kind == OrphanKind.UNCLAIMED:
        return (
            ShardFile.objects.filter(copy__isnull=True, gone_at__isnull=True, location_id=location_id)
            .annotate(group_prefix=_prefix(F("path"), depths))
            .filter(group_prefix=prefix)
        )
    copies = present_copies().filter(location_id=location_id).annotate(group_prefix=_prefix(F("path"), depths))
    if kind == OrphanKind.TEMPORARY:
        copies = copies.filter(temporary=True)
    elif kind == OrphanKind.DELETED_RUN and run_id is not None:
        copies = copies.filter(temporary=False, checkpoint__run__status=RunStatus.DELETED, checkpoint__run_id=run_id)
    else:
        raise ValueError(f"orphans of kind {kind!r} (run {run_id}) are not files of one group")
    ids = copies.filter(group_prefix=prefix).values("pk")
    return ShardFile.objects.filter(copy_id__in=ids, gone_at__isnull=True, location_id=location_id)


def orphan_group_uploads(*, location_id: int, prefix: str) -> QuerySet[MultipartUpload]:
    """The incomplete multipart uploads of one orphan group (``orphans``' grouping of uploads), by exact row."""
    depths, bucket_prefixes = _group_depths(location_id)
    return (
        MultipartUpload.objects.filter(gone_at__isnull=True, location_id=location_id)
        .annotate(group_prefix=_prefix(_below_bucket_prefix(bucket_prefixes), depths))
        .filter(group_prefix=prefix)
    )
