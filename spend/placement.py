"""Tier placement: where each checkpoint of a run lives, in which state, and what is misplaced.

Two reads, shared by the run page, the checkpoint page, the fleet-wide placement page and the API:

- **The matrix** of a run: its checkpoints (a page of them) against the locations that hold any of its
  present copies, each cell the copies there with their state (complete, partial, corrupt), their
  verification (verified, unverified, mismatch) and the tiers and storage classes their bytes sit in
  (``CopyTierUsage``: a bucket copy may be split over classes). Columns are the run's locations,
  hottest tier first, so they stay the same from page to page.
- **Flags**, each a ``Checkpoint`` queryset computed in SQL from copies, ``CopyTierUsage``, holds and
  runs, never per checkpoint: a count or a page of flagged checkpoints is one query per flag, whatever
  the size of the fleet. They read the copies' current verdicts, so a verdict that changes shows at once.
  Which copies restore is ``catalog.recovery.restorable_copies``: never a disputed copy nor a mismatch.

A failure domain is what one failure takes down together, as ``catalog.verification.failure_domain``
says: the host for a copy on a host, the region for a bucket (the location itself when it has no
region). Host, site and region are shown for every copy; the count of distinct domains uses that rule,
so every page says the same number.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import models
from django.db.models import (
    Case,
    CharField,
    Count,
    Exists,
    F,
    IntegerField,
    OuterRef,
    Prefetch,
    Q,
    QuerySet,
    Subquery,
    Value,
    When,
)
from django.db.models.functions import Coalesce, Concat
from django.utils import timezone

from actions.models import Hold
from catalog.choices import ENDED_STATUSES, Importance, RunStatus, Verification
from catalog.lifecycle import last_saved
from catalog.models import Checkpoint, CheckpointCopy, CopyTierUsage, Run
from catalog.recovery import is_restorable, restorable_copies
from catalog.verification import (
    failure_domain,
    is_verification_stale,
    stale_cutoff,
    stale_days,
    stale_verified_copies,
)
from fleet.choices import Tier
from fleet.models import StorageLocation

ARCHIVE_TIERS = (Tier.ARCHIVE, Tier.DEEP_ARCHIVE)
"""Classes a restore takes hours from (S3 Glacier Flexible Retrieval, Deep Archive, GCS Archive)."""
# Runs that write no more checkpoints: finished, failed, abandoned or deleted (catalog.choices).
FINISHED = ENDED_STATUSES
TIER_ORDER = {value: i for i, value in enumerate(Tier.values)}
FLAGGED_SHOWN = 10  # flagged checkpoints listed per flag on a run page; the placement page has them all


class Flag(models.TextChoices):
    UNDER_REPLICATED = "under_replicated", "Too few verified copies in distinct failure domains"
    FINISHED_ON_NVME = "finished_on_nvme", "Finished run still on NVMe"
    ARCHIVE_ONLY = "archive_only", "Held or critical, only in archive classes"
    NEWEST_ON_ONE_HOST = "newest_on_one_host", "Newest restorable checkpoint on one host only"
    VERIFICATION_STALE = "verification_stale", "Not verified recently"


def nvme_days() -> int:
    return settings.NVME_FINISHED_DAYS


def flag_label(flag: str) -> str:
    """A flag's label with its numbers ("Not verified for 30 days"), for pages."""
    if Flag(flag) == Flag.VERIFICATION_STALE:
        return f"Not verified for {stale_days():,} days"
    return Flag(flag).label


def flag_help(flag: str) -> str:
    """What a flag means and what to do about it, in plain words, for pages and the API."""
    days = nvme_days()
    return {
        Flag.UNDER_REPLICATED: (
            "A critical or milestone checkpoint has fewer than 2 verified copies in different failure domains "
            "(a host, or a region for a bucket). One failure could take every good copy with it: copy it to "
            "another host or region and verify the copy."
        ),
        Flag.FINISHED_ON_NVME: (
            f"The run has ended (finished, failed or abandoned), its newest checkpoint was saved more than "
            f"{days} days ago, and this "
            "checkpoint still has a copy on GPU-host NVMe, the most expensive tier, which training jobs need. "
            "Move it to object storage or delete that copy."
        ),
        Flag.ARCHIVE_ONLY: (
            "A held or critical checkpoint whose only complete copies are in archive classes (S3 Glacier "
            "Flexible Retrieval, Deep Archive): getting it back takes hours. Keep one complete copy in a class "
            "that restores at once."
        ),
        Flag.NEWEST_ON_ONE_HOST: (
            "The newest checkpoint the run could restart from exists on one host only. If that host fails, the "
            "run restarts from an older checkpoint, or from nothing. Copy it off the host, to a bucket or "
            "another host."
        ),
        Flag.VERIFICATION_STALE: (
            f"A verified copy of it was last verified more than {stale_days():,} days ago "
            "(CKPTFLEET_VERIFY_STALE_DAYS): its checksums may no longer describe what is stored. Run the agent "
            "with --checksums on its host, or scan its bucket again, to verify it anew."
        ),
    }[Flag(flag)]


# --- SQL building blocks ---------------------------------------------------------------------------


def domain_expression(prefix: str = "") -> Case:
    """``failure_domain`` of a copy's location, in SQL: "host NAME", "region NAME" or "location NAME"."""
    loc = f"{prefix}location__"
    return Case(
        When(**{f"{loc}host__isnull": False}, then=Concat(Value("host "), F(f"{loc}host__name"))),
        When(~Q(**{f"{loc}region": ""}), then=Concat(Value("region "), F(f"{loc}region"))),
        default=Concat(Value("location "), F(f"{loc}name")),
        output_field=CharField(),
    )


def _present(**filters) -> QuerySet[CheckpointCopy]:
    return CheckpointCopy.objects.filter(checkpoint=OuterRef("pk"), gone_at__isnull=True, **filters)


def _restorable(**filters) -> QuerySet[CheckpointCopy]:
    return CheckpointCopy.objects.filter(restorable_copies(), checkpoint=OuterRef("pk"), **filters)


def _scoped(run_id: int | None) -> QuerySet[Checkpoint]:
    # No default ordering: it would join run and team into every flag query for nothing.
    checkpoints = Checkpoint.objects.order_by()
    return checkpoints.filter(run_id=run_id) if run_id is not None else checkpoints


def under_replicated(run_id: int | None = None) -> QuerySet[Checkpoint]:
    verified_domains = (
        CheckpointCopy.objects.filter(
            checkpoint=OuterRef("pk"), gone_at__isnull=True, verification=Verification.VERIFIED, temporary=False
        )
        .order_by()
        .values("checkpoint")
        .annotate(n=Count(domain_expression(), distinct=True))
        .values("n")
    )
    return (
        _scoped(run_id)
        .filter(importance__in=[Importance.CRITICAL, Importance.MILESTONE])
        .exclude(run__status=RunStatus.DELETED)
        .filter(Exists(_present()))
        .annotate(verified_domains=Coalesce(Subquery(verified_domains, output_field=IntegerField()), 0))
        .filter(verified_domains__lt=2)
    )


def stale_finished_runs(now: datetime | None = None) -> QuerySet[Run]:
    """Finished runs whose newest checkpoint was saved more than ``NVME_FINISHED_DAYS`` ago.

    The last checkpoint a run wrote is when it stopped training (``catalog.lifecycle.last_saved``).
    """
    cutoff = (now or timezone.now()) - timedelta(days=nvme_days())
    return (
        Run.objects.filter(status__in=FINISHED)
        .annotate(last_checkpoint_at=last_saved())
        .filter(last_checkpoint_at__lt=cutoff)
    )


def finished_on_nvme(run_id: int | None = None, *, now: datetime | None = None) -> QuerySet[Checkpoint]:
    """Fleet-wide, the copies on NVMe are found once, from the tier rows; for one run (its page, a checkpoint's
    page) each of its checkpoints probes its own copies, so the cost is the run's, not the fleet's (27 -> 2 ms
    for a run at 10M files, where probing was slower fleet-wide: 58 against 36 ms)."""
    stale = stale_finished_runs(now)
    if run_id is not None:
        if not Run.objects.filter(pk=run_id, status__in=FINISHED).exists():
            return Checkpoint.objects.none()  # a run still training: nothing to ask of its copies (9 ms at 10M)
        stale = stale.filter(pk=run_id)
        on_nvme = CheckpointCopy.objects.filter(checkpoint=OuterRef("pk"), gone_at__isnull=True)
        return (
            _scoped(run_id)
            .filter(run_id__in=stale.values("pk"))
            .filter(Exists(on_nvme.filter(_on_tiers_per_copy([Tier.NVME]))))
        )
    # From the tier rows on NVMe (a few of all) to their present copies, plus present copies at an NVMe
    # location not rolled up yet: 30% faster than testing both conditions on every copy (at 10M files).
    tiers = [Tier.NVME]
    rolled_up = CopyTierUsage.objects.filter(tier__in=tiers, copy__gone_at__isnull=True).values("copy__checkpoint_id")
    not_yet = (
        CheckpointCopy.objects.filter(gone_at__isnull=True, location__tier__in=tiers)
        .exclude(Exists(CopyTierUsage.objects.filter(copy_id=OuterRef("pk"))))
        .values("checkpoint_id")
    )
    return _scoped(run_id).filter(run_id__in=stale.values("pk")).filter(Q(pk__in=rolled_up) | Q(pk__in=not_yet))


def _held(run_id: int | None) -> Q:
    """Checkpoints under an active hold: their own, or their run's. The few active holds are read first (one
    small query) and passed as lists: with them PostgreSQL estimates the candidates right (a few hundred, not
    most checkpoints) and probes their copies one by one instead of hashing every copy of the fleet (archive
    only: 163 -> 15 ms at 10M files)."""
    holds = Hold.objects.filter(released_at__isnull=True).order_by()
    if run_id is not None:
        holds = holds.filter(run_id=run_id)
    pairs = list(holds.values_list("checkpoint_id", "run_id"))
    return Q(pk__in=sorted({c for c, _ in pairs if c is not None})) | Q(
        run_id__in=sorted({r for c, r in pairs if c is None})
    )


def _on_tiers_per_copy(tiers: Sequence[str]) -> Q:
    """Copies (``CheckpointCopy`` rows) with bytes on one of ``tiers``: their tier rows say so, or, for a copy
    not rolled up yet, its location's tier. Correlated probes of the copy's tier rows (the copy, tier, class
    index): for a query that starts from a few checkpoints' copies rather than from every copy."""
    rolled_up = CopyTierUsage.objects.filter(copy_id=OuterRef("pk"))
    return Exists(rolled_up.filter(tier__in=tiers)) | (Q(location__tier__in=tiers) & ~Exists(rolled_up))


def archive_only(run_id: int | None = None) -> QuerySet[Checkpoint]:
    """Two queries: the active holds first, then the flag (see ``_held``)."""
    archived = _on_tiers_per_copy(ARCHIVE_TIERS)
    return (
        _scoped(run_id)
        .filter(Q(importance=Importance.CRITICAL) | _held(run_id))
        .filter(Exists(_restorable().filter(archived)))
        .exclude(Exists(_restorable().exclude(archived)))
    )


def newest_restorable_subquery() -> Coalesce:
    """Per run (``OuterRef("pk")`` a run): the id of its newest restorable checkpoint, as
    ``catalog.recovery.newest_restorable_ids`` picks it: a verified restorable copy first, then any
    restorable copy (never a disputed one); a higher step first; a stepped checkpoint before a step-less
    one, then by tag.

    Four ordered subqueries, each stopping at its first hit: the stepped ones walk the (run, step)
    unique index from the newest step down, so a run of thousands of checkpoints costs a few probes."""

    def newest(*, stepped: bool, **copy_filters):
        complete = CheckpointCopy.objects.filter(restorable_copies(), checkpoint=OuterRef("pk"), **copy_filters)
        candidates = Checkpoint.objects.filter(run=OuterRef("pk"), step__isnull=not stepped).filter(Exists(complete))
        return Subquery(candidates.order_by("-step" if stepped else "-tag").values("pk")[:1])

    verified = {"verification": Verification.VERIFIED}
    return Coalesce(
        newest(stepped=True, **verified),
        newest(stepped=False, **verified),
        newest(stepped=True),
        newest(stepped=False),
        output_field=models.BigIntegerField(),
    )


def newest_restorable_ids(run_id: int | None = None) -> list[int]:
    """The newest restorable checkpoint of every run that is not deleted (or of one run); one query."""
    runs = Run.objects.exclude(status=RunStatus.DELETED).order_by()
    if run_id is not None:
        runs = runs.filter(pk=run_id)
    return [
        pk
        for pk in runs.annotate(newest_id=newest_restorable_subquery()).values_list("newest_id", flat=True)
        if pk is not None
    ]


def newest_on_one_host(run_id: int | None = None) -> QuerySet[Checkpoint]:
    """Two queries: the newest restorable checkpoints (at most one a run) are found first, so that the
    check of their copies runs on those few checkpoints only."""
    complete = CheckpointCopy.objects.filter(restorable_copies(), checkpoint=OuterRef("pk"))
    hosts = complete.order_by().values("checkpoint").annotate(n=Count("location__host_id", distinct=True)).values("n")
    return (
        _scoped(run_id)
        .filter(pk__in=newest_restorable_ids(run_id))
        .exclude(Exists(complete.filter(location__host__isnull=True)))
        .annotate(complete_hosts=Subquery(hosts, output_field=IntegerField()))
        .filter(complete_hosts=1)
    )


def verification_stale(run_id: int | None = None, *, now: datetime | None = None) -> QuerySet[Checkpoint]:
    """Checkpoints with a verified copy not verified for ``VERIFY_STALE_DAYS``."""
    stale = CheckpointCopy.objects.filter(stale_verified_copies(now), checkpoint=OuterRef("pk"))
    return _scoped(run_id).exclude(run__status=RunStatus.DELETED).filter(Exists(stale))


def flagged(flag: str, *, run_id: int | None = None, now: datetime | None = None) -> QuerySet[Checkpoint]:
    """The checkpoints that raise ``flag`` (fleet-wide, or of one run): one query (two for the newest on one
    host and for archive only, the first run here), whatever the fleet's size."""
    flag = Flag(flag)
    if flag == Flag.VERIFICATION_STALE:
        return verification_stale(run_id, now=now)
    if flag == Flag.UNDER_REPLICATED:
        return under_replicated(run_id)
    if flag == Flag.FINISHED_ON_NVME:
        return finished_on_nvme(run_id, now=now)
    if flag == Flag.ARCHIVE_ONLY:
        return archive_only(run_id)
    return newest_on_one_host(run_id)


def flag_counts(*, run_id: int | None = None, now: datetime | None = None) -> dict[str, int]:
    """{flag: flagged checkpoints}, every flag listed; one query per flag."""
    return {flag: flagged(flag, run_id=run_id, now=now).count() for flag in Flag.values}


def flags_of(
    checkpoint_ids: Iterable[int], *, run_id: int | None = None, now: datetime | None = None
) -> dict[int, list[str]]:
    """{checkpoint id: its flags} for some checkpoints (a page), one query per flag. Pass ``run_id`` when
    they all belong to one run: each flag is then computed for that run only."""
    ids = list(set(checkpoint_ids))
    out: dict[int, list[str]] = {pk: [] for pk in ids}
    if not ids:
        return out
    for flag in Flag.values:
        for pk in flagged(flag, run_id=run_id, now=now).filter(pk__in=ids).values_list("pk", flat=True):
            out[pk].append(flag)
    return out


# --- the matrix -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TierShare:
    tier: str
    storage_class: str
    bytes: int
    files: int

    @property
    def tier_label(self) -> str:
        return Tier(self.tier).label if self.tier in Tier.values else self.tier

    @property
    def archived(self) -> bool:
        return self.tier in ARCHIVE_TIERS


@dataclass
class PlacedCopy:
    """One present copy as placement shows it."""

    copy: CheckpointCopy
    tiers: list[TierShare]

    @property
    def location(self) -> StorageLocation:
        return self.copy.location

    @property
    def domain(self) -> str:
        return failure_domain(self.copy.location)

    @property
    def host_name(self) -> str:
        return self.copy.location.host.name if self.copy.location.host_id else ""

    @property
    def site(self) -> str:
        return self.copy.location.failure_site

    @property
    def region(self) -> str:
        return self.copy.location.failure_region

    @property
    def archived(self) -> bool:
        return any(t.archived for t in self.tiers)

    @property
    def verification_stale(self) -> bool:
        return is_verification_stale(self.copy)

    @property
    def tier_summary(self) -> str:
        """The tiers and classes of its bytes when they differ from the location's own tier, else ''."""
        if not self.tiers or (len(self.tiers) == 1 and self.tiers[0].tier == self.copy.location.tier):
            return ""
        return ", ".join(f"{t.storage_class or t.tier_label}" for t in self.tiers)


@dataclass(frozen=True)
class Column:
    location: StorageLocation

    @property
    def tier_label(self) -> str:
        return self.location.get_tier_display()

    @property
    def domain(self) -> str:
        return failure_domain(self.location)


@dataclass
class Row:
    checkpoint: Checkpoint
    cells: list[list[PlacedCopy]]
    copies: list[PlacedCopy]
    flags: list[str] = field(default_factory=list)

    @property
    def verified(self) -> list[PlacedCopy]:
        return [c for c in self.copies if c.copy.verification == Verification.VERIFIED and not c.copy.temporary]

    @property
    def domains(self) -> list[str]:
        return sorted({c.domain for c in self.verified})

    @property
    def flag_labels(self) -> list[str]:
        return [flag_label(f) for f in self.flags]


@dataclass
class FlagSummary:
    flag: str
    count: int
    shown: list[Checkpoint]

    @property
    def label(self) -> str:
        return flag_label(self.flag)

    @property
    def help(self) -> str:
        return flag_help(self.flag)

    @property
    def more(self) -> int:
        return max(self.count - len(self.shown), 0)


@dataclass
class RunPlacement:
    columns: list[Column]
    rows: list[Row]
    flags: list[FlagSummary]

    @property
    def flagged_total(self) -> int:
        return sum(f.count for f in self.flags)


def run_columns(run_id: int) -> list[Column]:
    """The locations holding a present copy of any checkpoint of the run, hottest tier first."""
    locations = (
        StorageLocation.objects.filter(
            pk__in=CheckpointCopy.objects.filter(checkpoint__run_id=run_id, gone_at__isnull=True).values("location_id")
        )
        .select_related("host")
        .order_by("name")
    )
    return [Column(loc) for loc in sorted(locations, key=lambda loc: (TIER_ORDER.get(loc.tier, 99), loc.name))]


def tier_shares(copy_ids: Iterable[int]) -> dict[int, list[TierShare]]:
    """{copy id: its bytes per tier and storage class, hottest first}, in one query."""
    ids = list(copy_ids)
    out: dict[int, list[TierShare]] = defaultdict(list)
    if not ids:
        return out
    for row in CopyTierUsage.objects.filter(copy_id__in=ids).values_list(
        "copy_id", "tier", "storage_class", "bytes", "files"
    ):
        out[row[0]].append(TierShare(*row[1:]))
    for shares in out.values():
        shares.sort(key=lambda t: (TIER_ORDER.get(t.tier, 99), t.storage_class))
    return out


def placed(copies: Sequence[CheckpointCopy]) -> list[PlacedCopy]:
    """Present copies (with location and host loaded) with their tier shares; one query."""
    shares = tier_shares(c.pk for c in copies)
    return [PlacedCopy(c, shares.get(c.pk, [])) for c in copies]


def matrix_rows(
    checkpoints: Sequence[Checkpoint],
    columns: list[Column],
    *,
    flags: dict[int, list[str]] | None = None,
    run_id: int | None = None,
    now: datetime | None = None,
) -> list[Row]:
    """Rows of the matrix for checkpoints whose present copies are prefetched as ``checkpoint.present``
    (``catalog.selectors.run_checkpoints``). One query for the tier shares, and one per flag unless the
    flags are given."""
    index = {col.location.pk: i for i, col in enumerate(columns)}
    all_copies = [c for ck in checkpoints for c in ck.present]
    by_copy = {p.copy.pk: p for p in placed(all_copies)}
    if flags is None:
        flags = flags_of([ck.pk for ck in checkpoints], run_id=run_id, now=now)
    rows = []
    for ck in checkpoints:
        cells: list[list[PlacedCopy]] = [[] for _ in columns]
        copies = [by_copy[c.pk] for c in ck.present]
        for p in copies:
            if p.copy.location_id in index:
                cells[index[p.copy.location_id]].append(p)
        rows.append(Row(ck, cells, copies, flags.get(ck.pk, [])))
    return rows


def _newest_first(item: tuple[int, int | None, str]) -> tuple:
    _, step, tag = item
    return (step is None, -(step or 0), tag)


def run_flags(
    run_id: int, *, now: datetime | None = None, shown: int = FLAGGED_SHOWN
) -> tuple[list[FlagSummary], dict[int, list[str]]]:
    """Each flag with its count for the run and its first flagged checkpoints (newest first), and
    {checkpoint id: flags} for every flagged checkpoint of the run; one query per flag."""
    summaries = []
    by_checkpoint: dict[int, list[str]] = defaultdict(list)
    for flag in Flag.values:
        hits = sorted(flagged(flag, run_id=run_id, now=now).values_list("pk", "step", "tag"), key=_newest_first)
        for pk, _, _ in hits:
            by_checkpoint[pk].append(flag)
        first = [Checkpoint(pk=pk, run_id=run_id, step=step, tag=tag) for pk, step, tag in hits[:shown]]
        summaries.append(FlagSummary(flag, len(hits), first))
    return summaries, by_checkpoint


def run_placement(run_id: int, checkpoints: Sequence[Checkpoint], *, now: datetime | None = None) -> RunPlacement:
    """The matrix of a page of a run's checkpoints and the run's flags; seven queries."""
    columns = run_columns(run_id)
    summaries, flags = run_flags(run_id, now=now)
    return RunPlacement(columns, matrix_rows(checkpoints, columns, flags=flags), summaries)


# --- one checkpoint ---------------------------------------------------------------------------------


@dataclass
class CheckpointPlacement:
    copies: list[PlacedCopy]
    flags: list[str]

    @property
    def verified(self) -> list[PlacedCopy]:
        return [c for c in self.copies if c.copy.verification == Verification.VERIFIED and not c.copy.temporary]

    @property
    def domains(self) -> list[str]:
        return sorted({c.domain for c in self.verified})

    @property
    def flag_details(self) -> list[tuple[str, str]]:
        return [(flag_label(f), flag_help(f)) for f in self.flags]


def checkpoint_placement(
    checkpoint: Checkpoint, present: Sequence[CheckpointCopy], *, now: datetime | None = None
) -> CheckpointPlacement:
    """A checkpoint's present copies (location and host loaded) with their tiers, and its flags; six queries."""
    copies = sorted(placed(present), key=lambda p: (TIER_ORDER.get(p.location.tier, 99), p.location.name))
    return CheckpointPlacement(copies, flags_of([checkpoint.pk], run_id=checkpoint.run_id, now=now)[checkpoint.pk])


# --- the fleet-wide list ------------------------------------------------------------------------------


def flagged_ids(flagged_checkpoints: QuerySet[Checkpoint]) -> list[int]:
    """The ids of flagged checkpoints by team, run and newest step: one query, sorted here so that the
    flag's query is not run twice (once to count, once for a page)."""
    rows = flagged_checkpoints.values_list("pk", "run__team__name", "run__name", "step", "tag")
    return [r[0] for r in sorted(rows, key=lambda r: (r[1], r[2], r[3] is None, -(r[3] or 0), r[4], r[0]))]


def checkpoints_in_order(ids: Sequence[int]) -> list[Checkpoint]:
    """Checkpoints with run and team, in the order of ``ids``; one query."""
    found = Checkpoint.objects.select_related("run__team").in_bulk(list(ids))
    return [found[pk] for pk in ids if pk in found]


def why(flag: str, copies: Sequence[PlacedCopy]) -> str:
    """One line on why a checkpoint carries ``flag``, from its present copies."""
    flag = Flag(flag)
    if flag == Flag.UNDER_REPLICATED:
        verified = [c for c in copies if c.copy.verification == Verification.VERIFIED and not c.copy.temporary]
        if not verified:
            return f"no verified copy among {len(copies)} present"
        domains = sorted({c.domain for c in verified})
        noun = "copy" if len(verified) == 1 else "copies"
        return f"{len(verified)} verified {noun}, all in {domains[0]}"
    if flag == Flag.FINISHED_ON_NVME:
        nvme = [c for c in copies if c.location.tier == Tier.NVME or any(t.tier == Tier.NVME for t in c.tiers)]
        return "on NVMe at " + ", ".join(sorted({c.location.name for c in nvme}))
    if flag == Flag.ARCHIVE_ONLY:
        classes = sorted({t.storage_class or t.tier_label for c in copies for t in c.tiers if t.archived})
        return "complete copies only in " + (", ".join(classes) or "archive classes")
    if flag == Flag.VERIFICATION_STALE:
        cutoff = stale_cutoff()
        stale = sorted(
            (c.copy.verified_at, c.location.name)
            for c in copies
            if c.copy.verification == Verification.VERIFIED and c.copy.verified_at and c.copy.verified_at < cutoff
        )
        if not stale:
            return "no verified copy is stale now"
        at, where = stale[0]
        return f"last verified {at:%Y-%m-%d} at {where}" + (f" and {len(stale) - 1} more" if len(stale) > 1 else "")
    hosts = sorted({c.host_name for c in copies if is_restorable(c.copy) and c.host_name})
    return "complete copies only on host " + ", ".join(hosts)


def explain(items: Sequence[tuple[str, Checkpoint]]) -> list[tuple[str, Checkpoint, str]]:
    """Each (flag, checkpoint) of a page with its ``why``; two queries (copies, tier shares) for all of them."""
    ids = {ck.pk for _, ck in items}
    copies = (
        CheckpointCopy.objects.filter(checkpoint_id__in=ids, gone_at__isnull=True)
        .select_related("location", "location__host")
        .order_by("location__name")
    )
    by_checkpoint: dict[int, list[PlacedCopy]] = defaultdict(list)
    for p in placed(list(copies)) if ids else []:
        by_checkpoint[p.copy.checkpoint_id].append(p)
    return [(flag, ck, why(flag, by_checkpoint.get(ck.pk, []))) for flag, ck in items]


# --- keyset paging of a run's checkpoints (the API) ---------------------------------------------------


def parse_after(after: str | None) -> tuple[int | None, str | None]:
    """A cursor: ``"<step>"`` after a stepped checkpoint, ``"tag:<tag>"`` after a step-less one.

    Raises ValueError for anything else.
    """
    if not after:
        return None, None
    if after.startswith("tag:"):
        return None, after[4:]
    step = int(after)
    if step < 0:
        raise ValueError("a step is never negative")
    return step, None


def cursor_of(checkpoint: Checkpoint) -> str:
    return str(checkpoint.step) if checkpoint.step is not None else f"tag:{checkpoint.tag}"


def run_checkpoints_after(run_id: int, *, after: str | None, limit: int) -> tuple[list[Checkpoint], str | None]:
    """Up to ``limit`` checkpoints of a run with a present copy, newest step first, after the cursor ``after``,
    with their present copies (``present``) prefetched; and the cursor of the next page (None: the last).
    Keyset paging: the cost of a page does not depend on how deep it is."""
    step, tag = parse_after(after)
    present = CheckpointCopy.objects.filter(checkpoint=OuterRef("pk"), gone_at__isnull=True)
    checkpoints = Checkpoint.objects.filter(run_id=run_id).filter(Exists(present))
    if step is not None:
        checkpoints = checkpoints.filter(Q(step__lt=step) | Q(step__isnull=True))
    elif tag is not None:
        checkpoints = checkpoints.filter(step__isnull=True, tag__gt=tag)
    copies = (
        CheckpointCopy.objects.filter(gone_at__isnull=True)
        .select_related("location", "location__host")
        .order_by("location__name")
    )
    page = list(
        checkpoints.order_by(F("step").desc(nulls_last=True), "tag").prefetch_related(
            Prefetch("copies", queryset=copies, to_attr="present")
        )[: limit + 1]
    )
    more = len(page) > limit
    page = page[:limit]
    return page, (cursor_of(page[-1]) if more and page else None)
