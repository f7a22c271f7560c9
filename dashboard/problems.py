"""One problems list: every partial, corrupt, disputed, unverified, under-replicated, misplaced and orphaned item.

Nothing here judges anything. Each kind is read from the judgement that already owns it:

- partial, corrupt, disputed, unverified: the copy's state and verification (``catalog.verification``); a copy is
  in one kind only (disputed first, then corrupt, then partial, then unverified), so the corrupt and the
  checksum-mismatch copies that were two queues showing the same rows are one kind. A verified copy whose
  checksums are older than ``CKPTFLEET_VERIFY_STALE_DAYS`` is unverified again (``stale_verified_copies``);
- under-replicated and misplaced: the placement flags of checkpoints (``spend.placement``): too few verified
  copies in distinct failure domains, or the newest restorable checkpoint on one host only; a finished run still
  on NVMe, or a held or critical checkpoint only in archive classes;
- orphaned: the orphan groups of ``catalog.selectors.orphans`` (left-overs, files of no checkpoint, incomplete
  uploads, copies of deleted runs). Checkpoints whose every copy is partial are listed as partial copies.

Size: each kind is one query that filters, sorts and cuts in the database (``LIMIT``); a page of the merged list
reads at most ``offset + limit`` rows of each kind and merges them, so the cost does not grow with the fleet,
only with how deep the page is. The totals are one aggregate per kind. Money: bytes x the price book's price in
force today for the bytes' location, tier and storage class (the copy's tier rows, ``CopyTierUsage``, as the
deletion preview prices a copy), per month.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any
from urllib.parse import quote

from django.db import models
from django.db.models import (
    Case,
    CharField,
    DecimalField,
    ExpressionWrapper,
    F,
    Max,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
    Value,
    When,
)
from django.db.models.functions import Coalesce, Concat
from django.urls import reverse
from django.utils import timezone

from access.scoping import restrict_runs, restrict_teams, scoped_team_names, visible_orphans
from catalog import selectors
from catalog.ages import saved_or_seen
from catalog.choices import ENDED_STATUSES, CopyState, Verification
from catalog.models import Checkpoint, CheckpointCopy, CopyTierUsage, Run, Team
from catalog.pointers import PointerState, pointers_for_runs
from catalog.recovery_model import runs_losing_newest
from catalog.services import OWNER_CONFLICT
from catalog.verification import stale_days, stale_verified_copies
from ckptfleet.params import BadParameter, whole_number
from fleet.models import StorageLocation
from fleet.pricebook import GIB, PriceBook, book_currency, utc_today
from spend import placement

PAGE_SIZE = 50
POINTER_RUNS = 200  # active runs whose resume pointers the list judges (catalog.pointers, three queries)
MAX_PAGE_SIZE = 500
COST_PLACES = Decimal("0.000000000001")  # as stored: a few bytes cost a fraction of a cent, never 0.00
MONEY = DecimalField(max_digits=30, decimal_places=12)


class Kind(models.TextChoices):
    PARTIAL = "partial", "Partial"
    CORRUPT = "corrupt", "Corrupt"
    DISPUTED = "disputed", "Disputed"
    UNVERIFIED = "unverified", "Unverified"
    UNDER_REPLICATED = "under_replicated", "Under-replicated"
    MISPLACED = "misplaced", "Misplaced"
    ORPHANED = "orphaned", "Orphaned"
    POINTER = "pointer", "Wrong resume pointer"
    CONFLICT = "ownership_conflict", "Ownership conflict"
    HOST_DOWN = "host_down", "Newest checkpoint on a down host"
    RECLAIM = "reclaim_unproven", "Reclaim not proven"


KIND_HELP = {
    Kind.PARTIAL: "Files the checkpoint's own manifest expects are missing: the copy restores nothing.",
    Kind.CORRUPT: "Sizes, headers or content checksums disagree with the manifest, the source or a majority: the "
    "copy restores nothing.",
    Kind.DISPUTED: "Checksums differ from another copy's and nothing independent says which is right: neither is "
    "offered for restore nor deleted as bad until it is settled.",
    Kind.UNVERIFIED: "Complete, but no checksum confirms the content, or the checksums behind the verdict are "
    "older than CKPTFLEET_VERIFY_STALE_DAYS.",
    Kind.UNDER_REPLICATED: "A critical or milestone checkpoint with fewer than 2 verified copies in distinct "
    "failure domains, or a run's newest restorable checkpoint on one host only.",
    Kind.MISPLACED: "On the wrong tier: a finished run still on GPU-host NVMe, or a held or critical checkpoint "
    "only in archive classes.",
    Kind.ORPHANED: "Bytes of no checkpoint: left-overs of interrupted saves, files of no checkpoint, incomplete "
    "multipart uploads, copies of deleted runs.",
    Kind.POINTER: "The framework's own resume pointer (DeepSpeed latest, Megatron's tracker, the newest "
    "checkpoint folder) of an active run names a broken or older checkpoint, names none, or is missing: a restart "
    f"would load the wrong thing. Judged for the {POINTER_RUNS} active runs that saved last.",
    Kind.HOST_DOWN: "A run's newest restorable checkpoint has copies only on hosts that are marked down or silent "
    "(or whose restore drill failed): a restore now starts from an older one and throws away the steps and "
    "GPU-hours between them (the run's recovery model). Marking the host up, once it is back, ends it.",
    Kind.CONFLICT: "The files of a held, pinned, leased or scheduled checkpoint now say they belong to another "
    "checkpoint (a rewritten sidecar, a moved directory): the copy stays under its protection until a person "
    "settles it, by releasing the protection or by correcting what the files say.",
    Kind.RECLAIM: "A deletion, move or clean-up said it freed objects, but listing the store afterwards (versions "
    "and trash included) found some still stored, or the trash copy that should be there missing: the bytes are "
    "still billed, or cannot be restored.",
}

# Which placement flags make each checkpoint kind (each flag is one row of its checkpoint).
FLAG_KINDS = {
    Kind.UNDER_REPLICATED: (placement.Flag.UNDER_REPLICATED, placement.Flag.NEWEST_ON_ONE_HOST),
    Kind.MISPLACED: (placement.Flag.FINISHED_ON_NVME, placement.Flag.ARCHIVE_ONLY),
}
# Orphan kinds listed here: a checkpoint whose every copy is partial is already a partial copy's row.
ORPHAN_KINDS = [k for k in selectors.OrphanKind.values if k != selectors.OrphanKind.ALL_PARTIAL]

# Sort keys: the column and whether the largest (or newest) comes first.
SORTS = {
    "age": ("since", False),  # oldest problem first
    "-age": ("since", True),
    "bytes": ("bytes", False),
    "-bytes": ("bytes", True),
    "cost": ("cost", False),
    "-cost": ("cost", True),
}
DEFAULT_SORT = "age"
AGE_CHOICES = [(1, "1 day"), (7, "7 days"), (30, "30 days"), (90, "90 days")]


@dataclass(frozen=True)
class Filters:
    """What the list is limited to; every field optional. ``min_age_days``: problems at least that old."""

    kind: str | None = None
    team_id: int | None = None
    run_id: int | None = None
    location_id: int | None = None
    min_age_days: int | None = None
    sort: str = DEFAULT_SORT

    @property
    def since_before(self) -> datetime | None:
        return timezone.now() - timedelta(days=self.min_age_days) if self.min_age_days else None


@dataclass
class Problem:
    """One row of the list: what is wrong, with what, where, since when, how big, what it costs, what fixes it."""

    kind: str
    subject: str  # "copy", "checkpoint" or "orphans"
    subject_label: str
    subject_url: str
    reasons: list[str]
    since: datetime | None
    bytes: int
    cost: Decimal | None
    action_label: str
    action_url: str
    key: str
    run_id: int | None = None
    run_label: str = ""
    team: str = ""
    location_id: int | None = None
    location_name: str = ""
    location_url: str = ""
    checkpoint_id: int | None = None
    copy_id: int | None = None
    flag: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def kind_label(self) -> str:
        return Kind(self.kind).label

    @property
    def age_days(self) -> int | None:
        if self.since is None:
            return None
        return max((timezone.now() - self.since).days, 0)


@dataclass(frozen=True)
class KindTotal:
    kind: str
    count: int
    bytes: int

    @property
    def label(self) -> str:
        return Kind(self.kind).label

    @property
    def help(self) -> str:
        return KIND_HELP[Kind(self.kind)]


# --- money ------------------------------------------------------------------------------------------------


class Prices:
    """Today's price per byte-month of each (location, tier, storage class) bytes sit on, as SQL ``CASE``
    expressions: one load of the price book, one query for the combinations in use."""

    def __init__(self) -> None:
        book = PriceBook.load()
        today = utc_today()
        self.currency = book.currency
        locations = {loc.pk: loc for loc in StorageLocation.objects.all()}
        combos = CopyTierUsage.objects.order_by().values_list("location_id", "tier", "storage_class").distinct()
        self._tier_whens = []
        for location_id, tier, storage_class in combos:
            price = book.price(locations[location_id], tier, storage_class, today) if location_id in locations else None
            if price is not None:
                self._tier_whens.append((location_id, tier, storage_class, price / GIB))
        self.by_location: dict[int, Decimal] = {}
        for loc in locations.values():
            price = book.price(loc, loc.tier, "", today)
            if price is not None:
                self.by_location[loc.pk] = price / GIB

    def tier_row_price(self) -> Case:
        """On ``CopyTierUsage`` rows: the price of one byte-month of the row's bytes."""
        return Case(
            *(
                When(location_id=loc, tier=tier, storage_class=sc, then=Value(price, output_field=MONEY))
                for loc, tier, sc, price in self._tier_whens
            ),
            default=Value(None, output_field=MONEY),
            output_field=MONEY,
        )

    def location_price(self, location_path: str = "location_id") -> Case:
        """The price of one byte-month at a location's own tier: for a copy whose tier rows are not rolled up."""
        return Case(
            *(When(**{location_path: pk}, then=Value(p, output_field=MONEY)) for pk, p in self.by_location.items()),
            default=Value(None, output_field=MONEY),
            output_field=MONEY,
        )

    def copy_cost(self) -> Coalesce:
        """On copies: their cost per month, from their tier rows, else their bytes at their location's tier."""
        rows = (
            CopyTierUsage.objects.filter(copy_id=OuterRef("pk"))
            .order_by()
            .values("copy_id")
            .annotate(c=Sum(ExpressionWrapper(F("bytes") * self.tier_row_price(), output_field=MONEY)))
            .values("c")
        )
        fallback = ExpressionWrapper(F("bytes") * self.location_price(), output_field=MONEY)
        return Coalesce(Subquery(rows, output_field=MONEY), fallback, output_field=MONEY)

    def checkpoint_cost(self) -> Subquery:
        """On checkpoints: the cost per month of their present copies' tier rows."""
        rows = (
            CopyTierUsage.objects.filter(copy__checkpoint_id=OuterRef("pk"), copy__gone_at__isnull=True)
            .order_by()
            .values("copy__checkpoint_id")
            .annotate(c=Sum(ExpressionWrapper(F("bytes") * self.tier_row_price(), output_field=MONEY)))
            .values("c")
        )
        return Subquery(rows, output_field=MONEY)

    def orphan_cost(self, location_id: int, nbytes: int | None) -> Decimal | None:
        price = self.by_location.get(location_id)
        return None if price is None or nbytes is None else _money(Decimal(nbytes) * price)


def _money(value: Any) -> Decimal | None:
    if value is None:
        return None
    return Decimal(str(value)).quantize(COST_PLACES)


# --- the kinds of copies -----------------------------------------------------------------------------------

NOT_LEFTOVER = Q(temporary=False)
COPY_KINDS: dict[str, Q] = {
    Kind.DISPUTED: Q(verification=Verification.DISPUTED) & NOT_LEFTOVER,
    Kind.CORRUPT: (Q(state=CopyState.CORRUPT) | Q(verification=Verification.MISMATCH))
    & ~Q(verification=Verification.DISPUTED)
    & NOT_LEFTOVER,
    Kind.PARTIAL: Q(state=CopyState.PARTIAL)
    & ~Q(verification__in=[Verification.DISPUTED, Verification.MISMATCH])
    & NOT_LEFTOVER,
    # A copy the ingest kept on its protected checkpoint (catalog.services.Judge): listed beside its other kind.
    Kind.CONFLICT: Q(reasons__icontains=OWNER_CONFLICT),
}


def copy_kind_filter(kind: str) -> Q:
    """The present copies of one copy kind, as a filter (each copy in one kind only)."""
    if kind == Kind.UNVERIFIED:
        return (Q(state=CopyState.COMPLETE, verification=Verification.UNVERIFIED) & NOT_LEFTOVER) | (
            stale_verified_copies() & Q(state=CopyState.COMPLETE)
        )
    return COPY_KINDS[kind]


def _copy_since(kind: str):
    """Since when the copy has had the problem: when it was judged so (its state's or its verdict's change),
    or when it was first seen. A stale verified copy: since its checksums went stale."""
    judged = Coalesce("judged_at", "first_seen_at")
    changed = Coalesce("verification_changed_at", "first_seen_at")
    if kind in (Kind.PARTIAL, Kind.CONFLICT):
        return judged
    if kind == Kind.CORRUPT:
        # A checksum mismatch changes the verdict and the state together; a format's verdict, the state only.
        return Case(When(verification=Verification.MISMATCH, then=changed), default=judged)
    if kind == Kind.UNVERIFIED:
        return Case(When(verification=Verification.VERIFIED, then=F("verified_at")), default=changed)
    return changed


COPY_VALUES = (
    "pk",
    "checkpoint_id",
    "checkpoint__step",
    "checkpoint__tag",
    "checkpoint__run_id",
    "checkpoint__run__name",
    "checkpoint__run__team__name",
    "location_id",
    "location__name",
    "state",
    "verification",
    "reasons",
    "verification_reasons",
    "verified_at",
)


def copy_reasons(kind: str, state_reasons: Iterable[str], verification_reasons: Iterable[str], **facts) -> list:
    """What is wrong with a copy, in words, each once: a checksum mismatch that made it corrupt is recorded among
    both its state's and its verification's reasons, and is said once. Verification's reasons are said when they
    are the problem (a mismatch, a dispute, no evidence), not its echo of the state ("the copy is corrupt: only a
    complete copy can be verified as a whole")."""
    verification = facts.get("verification")
    words: list[str] = list(state_reasons or []) if kind in (Kind.PARTIAL, Kind.CORRUPT) else []
    if kind == Kind.CONFLICT:
        return [str(w) for w in state_reasons or [] if str(w).startswith(OWNER_CONFLICT)]
    if verification in (Verification.MISMATCH, Verification.DISPUTED) or (
        kind == Kind.UNVERIFIED and verification == Verification.UNVERIFIED
    ):
        words += list(verification_reasons or [])
    if kind == Kind.UNVERIFIED and verification == Verification.VERIFIED:
        at = facts.get("verified_at")
        words.append(
            f"verified, but with checksums taken {at:%Y-%m-%d}, more than {stale_days():,} days ago: check again"
            if at
            else f"verified more than {stale_days():,} days ago: check again"
        )
    return list(dict.fromkeys(str(w) for w in words)) or ["no reason recorded"]


# --- sources: one per kind (and per flag), each sorted and cut in SQL -------------------------------------


@dataclass
class Source:
    """The problems of one kind (or of one placement flag) as a query, and how a row of it becomes a Problem."""

    kind: str
    queryset: QuerySet | None  # annotated with since, nbytes and cost; None for the orphans (a list)
    to_problem: Callable[[dict], Problem]
    items: list[Problem] | None = None  # the orphans, already built
    flag: str = ""

    def top(self, sort: str, limit: int | None) -> Iterator[Problem]:
        column, descending = SORTS[sort]
        if self.items is not None:
            yield from sorted(self.items, key=lambda p: _key(p, column, descending))[:limit]
            return
        assert self.queryset is not None
        db_column = {"since": "since", "bytes": "nbytes", "cost": "cost"}[column]
        order = F(db_column).desc(nulls_last=True) if descending else F(db_column).asc(nulls_last=True)
        rows = self.queryset.order_by(order, "-pk" if descending else "pk")
        if limit is not None:
            yield from (self.to_problem(r) for r in rows[:limit])
        else:
            yield from (self.to_problem(r) for r in rows.iterator(chunk_size=2000))

    def totals(self) -> tuple[int, int]:
        if self.items is not None:
            return len(self.items), sum(p.bytes for p in self.items)
        assert self.queryset is not None
        agg = self.queryset.order_by().aggregate(n=models.Count("pk"), b=Sum("nbytes"))
        return agg["n"] or 0, agg["b"] or 0


_FAR = datetime.max.replace(tzinfo=UTC)
_NEVER = datetime.min.replace(tzinfo=UTC)


def _key(p: Problem, column: str, descending: bool) -> tuple:
    """A merge key that orders as the SQL does: missing values last either way, then the row key."""
    value = getattr(p, column)
    if value is None:
        return (1, 0, p.key)
    if column == "since":
        number = value.timestamp()
    else:
        number = float(value)
    return (0, -number if descending else number, p.key)


def _ckpt_label(step, tag) -> str:
    return f"step {step:,}" if step is not None else (tag or "untagged")


def _copy_source(kind: str, base: QuerySet, prices: Prices) -> Source:
    qs = (
        base.filter(copy_kind_filter(kind))
        .annotate(since=_copy_since(kind), nbytes=F("bytes"), cost=prices.copy_cost())
        .values(*COPY_VALUES, "since", "nbytes", "cost")
    )

    def to_problem(r: dict) -> Problem:
        checkpoint_url = reverse("catalog:checkpoint-detail", args=[r["checkpoint_id"]])
        location_url = _location_url(r["location_id"])
        if kind == Kind.CORRUPT:
            action = (
                "Delete copy",
                f"{reverse('actions:schedule', args=[r['checkpoint_id']])}?copy={r['pk']}",
            )
        elif kind in (Kind.DISPUTED, Kind.CONFLICT):
            action = ("Settle", f"{checkpoint_url}#copy-{r['pk']}")
        else:  # partial, unverified: the location scanned again (with checksums) judges it anew
            action = ("Rescan", location_url)
        return Problem(
            kind=kind,
            subject="copy",
            subject_label=f"{_ckpt_label(r['checkpoint__step'], r['checkpoint__tag'])} at {r['location__name']}",
            subject_url=checkpoint_url,
            reasons=copy_reasons(
                kind,
                r["reasons"],
                r["verification_reasons"],
                verification=r["verification"],
                verified_at=r["verified_at"],
            ),
            since=r["since"],
            bytes=r["nbytes"] or 0,
            cost=_money(r["cost"]),
            action_label=action[0],
            action_url=action[1],
            key=f"conflict-{r['pk']}" if kind == Kind.CONFLICT else f"copy-{r['pk']}",
            run_id=r["checkpoint__run_id"],
            run_label=f"{r['checkpoint__run__team__name']}/{r['checkpoint__run__name']}",
            team=r["checkpoint__run__team__name"],
            location_id=r["location_id"],
            location_name=r["location__name"],
            location_url=location_url,
            checkpoint_id=r["checkpoint_id"],
            copy_id=r["pk"],
        )

    return Source(kind=kind, queryset=qs, to_problem=to_problem)


def _location_url(location_id: int) -> str:
    """The location's own page (``fleet:location-detail``), which leads to its host."""
    return reverse("fleet:location-detail", args=[location_id])


FLAG_ACTIONS = {
    placement.Flag.UNDER_REPLICATED: ("Replicate", "promotion:promote"),
    placement.Flag.NEWEST_ON_ONE_HOST: ("Replicate", "promotion:promote"),
    placement.Flag.FINISHED_ON_NVME: ("Move off NVMe", "promotion:move-checkpoint"),
    placement.Flag.ARCHIVE_ONLY: ("Promote", "promotion:promote"),
}


def _flag_source(kind: str, flag: str, filters: Filters, user, prices: Prices) -> Source:
    checkpoints = placement.flagged(flag, run_id=filters.run_id)
    checkpoints = restrict_runs(checkpoints, user, run_path="run__")
    if filters.team_id is not None:
        checkpoints = checkpoints.filter(run__team_id=filters.team_id)
    if filters.location_id is not None:
        checkpoints = checkpoints.filter(
            pk__in=CheckpointCopy.objects.filter(location_id=filters.location_id, gone_at__isnull=True).values(
                "checkpoint_id"
            )
        )
    present_bytes = (
        CheckpointCopy.objects.filter(checkpoint_id=OuterRef("pk"), gone_at__isnull=True, temporary=False)
        .order_by()
        .values("checkpoint_id")
        .annotate(b=Sum("bytes"))
        .values("b")
    )
    # Since when: a finished run's checkpoint on NVMe since the run ended; otherwise since the checkpoint was
    # first seen (it has been short of copies, or where it is, since it was found).
    if flag == placement.Flag.FINISHED_ON_NVME:
        since = Coalesce("run__status_changed_at", "first_seen_at")
    else:
        since = F("first_seen_at")
    qs = checkpoints.annotate(
        since=since,
        nbytes=Coalesce(Subquery(present_bytes, output_field=models.BigIntegerField()), 0),
        cost=prices.checkpoint_cost(),
        run_label=Concat("run__team__name", Value("/"), "run__name", output_field=CharField()),
    ).values("pk", "step", "tag", "run_id", "run__team__name", "run_label", "since", "nbytes", "cost")
    if filters.since_before is not None:
        qs = qs.filter(since__lte=filters.since_before)
    label, url_name = FLAG_ACTIONS[placement.Flag(flag)]

    def to_problem(r: dict) -> Problem:
        return Problem(
            kind=kind,
            subject="checkpoint",
            subject_label=_ckpt_label(r["step"], r["tag"]),
            subject_url=reverse("catalog:checkpoint-detail", args=[r["pk"]]),
            reasons=[placement.flag_label(flag)],
            since=r["since"],
            bytes=r["nbytes"] or 0,
            cost=_money(r["cost"]),
            action_label=label,
            action_url=reverse(url_name, args=[r["pk"]]),
            key=f"{flag}-{r['pk']}",
            run_id=r["run_id"],
            run_label=r["run_label"],
            team=r["run__team__name"],
            checkpoint_id=r["pk"],
            flag=flag,
        )

    return Source(kind=kind, queryset=qs, to_problem=to_problem, flag=flag)


def _orphan_source(filters: Filters, user, prices: Prices) -> Source:
    groups = [
        g for g in visible_orphans(selectors.orphans(location_id=filters.location_id), user) if g.kind in ORPHAN_KINDS
    ]
    if filters.run_id is not None or filters.team_id is not None:
        runs = Run.objects.filter(pk__in={g.run_id for g in groups if g.run_id is not None})
        if filters.run_id is not None:
            runs = runs.filter(pk=filters.run_id)
        if filters.team_id is not None:
            runs = runs.filter(team_id=filters.team_id)
        keep = set(runs.values_list("pk", flat=True))
        groups = [g for g in groups if g.run_id in keep]
    cleanup = reverse("actions:orphan-cleanup")
    cleanable = set(selectors.CLEANABLE_KINDS)
    items = []
    for g in groups:
        since = g.oldest
        if filters.since_before is not None and (since is None or since > filters.since_before):
            continue
        where = f"{g.prefix}/" if g.prefix else "the location root"
        query = f"?kind={g.kind}&location={g.location_id}&prefix={_quote(g.prefix)}"
        if g.run_id:
            query += f"&run={g.run_id}"
        items.append(
            Problem(
                kind=Kind.ORPHANED,
                subject="orphans",
                subject_label=f"{g.items:,} {_noun(g)} in {where}",
                subject_url=f"{reverse('catalog:orphans')}?kind={g.kind}&location={g.location_id}",
                reasons=[f"{g.kind_label}: {selectors.ORPHAN_KIND_HELP[selectors.OrphanKind(g.kind)]}"],
                since=since,
                bytes=g.bytes or 0,
                cost=prices.orphan_cost(g.location_id, g.bytes),
                action_label="Clean up" if g.kind in cleanable else "Open orphans",
                action_url=f"{cleanup}{query}" if g.kind in cleanable else reverse("catalog:orphans"),
                key=f"orphans-{g.kind}-{g.location_id}-{g.run_id or 0}-{g.prefix}",
                run_id=g.run_id,
                run_label=g.run_label,
                team=g.run_label.split("/", 1)[0] if g.run_label else "",
                location_id=g.location_id,
                location_name=g.location_name,
                location_url=_location_url(g.location_id),
                extra={"orphan_kind": g.kind, "prefix": g.prefix},
            )
        )
    return Source(kind=Kind.ORPHANED, queryset=None, to_problem=lambda r: r, items=items)


def _noun(g) -> str:
    singular, _, plural = g.item_noun.partition(",")
    if g.items == 1:
        return singular
    return plural or f"{singular}s"


def _quote(value: str) -> str:
    return quote(value, safe="")


def sources(filters: Filters, user) -> list[Source]:
    """The queries of the kinds ``filters`` asks for, scoped to what ``user`` may see."""
    prices = Prices()
    wanted = [filters.kind] if filters.kind else list(Kind.values)
    out: list[Source] = []
    copies = restrict_runs(CheckpointCopy.objects.filter(gone_at__isnull=True), user, run_path="checkpoint__run__")
    if filters.team_id is not None:
        copies = copies.filter(checkpoint__run__team_id=filters.team_id)
    if filters.run_id is not None:
        copies = copies.filter(checkpoint__run_id=filters.run_id)
    if filters.location_id is not None:
        copies = copies.filter(location_id=filters.location_id)
    for kind in wanted:
        if kind in (Kind.PARTIAL, Kind.CORRUPT, Kind.DISPUTED, Kind.UNVERIFIED, Kind.CONFLICT):
            source = _copy_source(kind, copies, prices)
            if filters.since_before is not None:
                assert source.queryset is not None
                source = replace(source, queryset=source.queryset.filter(since__lte=filters.since_before))
            out.append(source)
        elif kind in FLAG_KINDS:
            out.extend(_flag_source(kind, flag, filters, user, prices) for flag in FLAG_KINDS[Kind(kind)])
        elif kind == Kind.ORPHANED:
            out.append(_orphan_source(filters, user, prices))
        elif kind == Kind.POINTER:
            out.append(_pointer_source(filters, user))
        elif kind == Kind.HOST_DOWN:
            out.append(_host_down_source(filters, user))
        elif kind in MORE_SOURCES:
            out.append(MORE_SOURCES[kind](filters, user, prices))
    return out


# The sources kept in modules of their own (dashboard.problems_reclaim), which build this module's rows: each adds
# itself here when Django starts (DashboardConfig.ready), so that this module imports none of them.
MORE_SOURCES: dict[str, Callable[[Filters, Any, Prices], Source]] = {}


def _host_down_source(filters: Filters, user) -> Source:
    """Runs whose newest restorable checkpoint is only on down or silent hosts (``runs_losing_newest``: the recovery
    model the recovery page and the APIs answer from), each with what a restore now loses more."""
    runs = restrict_runs(Run.objects.all(), user)
    if filters.team_id is not None:
        runs = runs.filter(team_id=filters.team_id)
    if filters.run_id is not None:
        runs = runs.filter(pk=filters.run_id)
    items = []
    for loss in runs_losing_newest(runs):
        point, newest = loss.point, loss.point.if_up
        assert newest is not None and newest.checkpoint is not None
        if filters.location_id is not None and not any(
            h.locations.filter(pk=filters.location_id).exists() for h in loss.hosts
        ):
            continue
        # Since the host went down (or its agent last reported).
        since = min(filter(None, (h.down_since or h.last_seen_at for h in loss.hosts)), default=None)
        if filters.since_before is not None and (since is None or since > filters.since_before):
            continue
        where = ", ".join(h.name for h in loss.hosts) or "copies whose restore drill failed"
        now_from = point.checkpoint.label if point.checkpoint is not None else "nothing"
        more = ", ".join(
            part
            for part in (
                f"{point.down_steps:,} steps" if point.down_steps is not None else "",
                f"{point.down_hours:.1f} h" if point.down_hours is not None else "",
                f"{point.down_gpu_hours:,.0f} GPU-h" if point.down_gpu_hours is not None else "",
            )
            if part
        )
        run = point.run
        items.append(
            Problem(
                kind=Kind.HOST_DOWN,
                subject="checkpoint",
                subject_label=str(newest.checkpoint),
                subject_url=reverse("catalog:checkpoint-detail", args=[newest.checkpoint.pk]),
                reasons=[
                    f"{newest.checkpoint.label} is held only on {where}: a restore now starts from {now_from} and "
                    f"loses {more} more."
                ],
                since=since,
                bytes=0,
                cost=None,
                action_label="Open recovery",
                action_url=reverse("recovery:run", args=[run.pk]),
                key=f"host-down-{run.pk}-{newest.checkpoint.pk}",
                run_id=run.pk,
                run_label=f"{run.team.name}/{run.name}",
                team=run.team.name,
                checkpoint_id=newest.checkpoint.pk,
                extra={
                    "hosts": [h.name for h in loss.hosts],
                    "restore_from": point.checkpoint.pk if point.checkpoint is not None else None,
                    "more_steps": point.down_steps,
                    "more_hours": point.down_hours,
                    "more_gpu_hours": point.down_gpu_hours,
                },
            )
        )
    return Source(kind=Kind.HOST_DOWN, queryset=None, to_problem=lambda r: r, items=items)


# The pointer states that are a problem; "nothing complete here" is already a partial copy's row.
POINTER_PROBLEMS = {
    PointerState.BAD_TARGET,
    PointerState.BEHIND,
    PointerState.MISSING,
    PointerState.DANGLING,
    PointerState.UNREADABLE,
}


def _pointer_source(filters: Filters, user) -> Source:
    """Wrong resume pointers of the active runs that saved last (at most ``POINTER_RUNS``), each with its fix."""
    runs = restrict_runs(Run.objects.exclude(status__in=ENDED_STATUSES), user).select_related("team")
    if filters.team_id is not None:
        runs = runs.filter(team_id=filters.team_id)
    if filters.run_id is not None:
        runs = runs.filter(pk=filters.run_id)
    runs = runs.annotate(last_seen=Max(saved_or_seen("checkpoints__"))).order_by(
        F("last_seen").desc(nulls_last=True), "-pk"
    )[:POINTER_RUNS]
    runs = list(runs)
    names = {r.pk: r for r in runs}
    judged = {
        run_id: [
            p
            for p in pointers
            if p.state in POINTER_PROBLEMS and (filters.location_id is None or p.location_id == filters.location_id)
        ]
        for run_id, pointers in pointers_for_runs(runs).items()
    }
    # The newest complete copy of each folder (what a restart throws away): its size and since when it is there.
    newest_ids = {p.newest.pk for pointers in judged.values() for p in pointers if p.newest is not None}
    facts = {
        pk: (nbytes, seen)
        for pk, nbytes, seen in CheckpointCopy.objects.filter(pk__in=newest_ids).values_list(
            "pk", "bytes", saved_or_seen("checkpoint__")
        )
    }
    items = []
    for run_id, pointers in judged.items():
        run = names[run_id]
        for p in pointers:
            newest = p.newest
            nbytes, seen = facts.get(newest.pk, (0, None)) if newest is not None else (0, None)
            since = seen or p.evidence_at
            if filters.since_before is not None and (since is None or since > filters.since_before):
                continue
            what = p.pointer_path or f"{p.save_dir or 'the root'}/ (the newest folder)"
            reasons = [f"{p.label}: {p.detail}"]
            if p.fix:
                reasons.append(f"Fix: {p.fix}" + (f" ({p.fix_command})" if p.fix_command else ""))
            items.append(
                Problem(
                    kind=Kind.POINTER,
                    subject="pointer",
                    subject_label=f"{p.framework_label}: {what}",
                    subject_url=reverse("recovery:run", args=[run_id]),
                    reasons=reasons,
                    since=since,
                    bytes=nbytes or 0,
                    cost=None,
                    action_label="Open recovery",
                    action_url=reverse("recovery:run", args=[run_id]),
                    key=f"pointer-{run_id}-{p.location_id}-{p.save_dir}-{p.framework}",
                    run_id=run_id,
                    run_label=f"{run.team.name}/{run.name}",
                    team=run.team.name,
                    location_id=p.location_id,
                    location_name=p.location_name,
                    location_url=_location_url(p.location_id),
                    extra={"pointer_state": p.state, "fix_command": p.fix_command},
                )
            )
    return Source(kind=Kind.POINTER, queryset=None, to_problem=lambda r: r, items=items)


# --- the list -------------------------------------------------------------------------------------------


@dataclass
class ProblemPage:
    rows: list[Problem]
    totals: list[KindTotal]
    count: int
    bytes: int
    number: int
    size: int
    currency: str

    @property
    def pages(self) -> int:
        return max((self.count + self.size - 1) // self.size, 1)

    @property
    def has_next(self) -> bool:
        return self.number < self.pages

    @property
    def has_previous(self) -> bool:
        return self.number > 1


def kind_totals(srcs: list[Source]) -> list[KindTotal]:
    """Count and bytes of each kind asked for, every such kind listed (zero when none)."""
    sums: dict[str, list[int]] = {}
    for s in srcs:
        n, b = s.totals()
        total = sums.setdefault(s.kind, [0, 0])
        total[0] += n
        total[1] += b
    return [KindTotal(k, *sums[k]) for k in Kind.values if k in sums]


def problem_page(filters: Filters, user, *, number: int = 1, size: int = PAGE_SIZE) -> ProblemPage:
    """One page of the merged, sorted list with the totals by kind. A page reads at most ``number x size`` rows
    of each kind, sorted and cut by the database."""
    srcs = sources(filters, user)
    totals = kind_totals(srcs)
    count = sum(t.count for t in totals)
    pages = max((count + size - 1) // size, 1)
    number = min(max(number, 1), pages)
    offset = (number - 1) * size
    rows = with_why(list(itertools.islice(_merged(srcs, filters.sort, limit=offset + size), offset, offset + size)))
    return ProblemPage(
        rows=rows,
        totals=totals,
        count=count,
        bytes=sum(t.bytes for t in totals),
        number=number,
        size=size,
        currency=book_currency(),
    )


def _merged(srcs: list[Source], sort: str, *, limit: int | None) -> Iterator[Problem]:
    column, descending = SORTS[sort]
    streams = [s.top(sort, limit) for s in srcs]
    return heapq.merge(*streams, key=lambda p: _key(p, column, descending))


def all_problems(filters: Filters, user) -> Iterator[Problem]:
    """Every problem the filters select, in their order, streamed (the CSV export): each kind's query is read in
    chunks and the kinds merged as they come, so memory holds a chunk per kind, not the list."""
    merged = _merged(sources(filters, user), filters.sort, limit=None)
    while chunk := list(itertools.islice(merged, EXPLAIN_CHUNK)):
        yield from with_why(chunk)


EXPLAIN_CHUNK = 500


def with_why(rows: list[Problem]) -> list[Problem]:
    """The checkpoint rows with why their flag is raised, in words from their copies (``placement.explain``: two
    queries for all of them), after the flag's name."""
    flagged = [p for p in rows if p.flag and p.checkpoint_id is not None]
    if flagged:
        items = [(p.flag, Checkpoint(pk=p.checkpoint_id)) for p in flagged]
        for p, (_, _, why) in zip(flagged, placement.explain(items), strict=True):
            p.reasons = list(dict.fromkeys([*p.reasons, why]))
    return rows


def team_choices(user) -> QuerySet[Team]:
    return restrict_teams(Team.objects.order_by("name"), user)


def is_scoped(user) -> bool:
    return scoped_team_names(user) is not None


# --- reading the filters from a request (the page, its CSV and the API read them alike) -----------------------


def filters_from(params, user) -> Filters:
    """The filters of a query string; a value that names nothing the person may see is refused with a 400 that
    says which (``BadParameter``), never read as "no filter". Team, run and location are taken by id or by name
    (a run as ``team/run``)."""
    kind = params.get("kind") or None
    if kind is not None and kind not in Kind.values:
        raise BadParameter("kind", f"one of {', '.join(Kind.values)}", kind)
    sort = params.get("sort") or DEFAULT_SORT
    if sort not in SORTS:
        raise BadParameter("sort", f"one of {', '.join(SORTS)}", sort)
    age = params.get("age") or None
    min_age = whole_number(age, "age", minimum=0, maximum=100_000) if age is not None else None
    return Filters(
        kind=kind,
        team_id=_team_id(params.get("team", "").strip(), user),
        run_id=_run_id(params.get("run", "").strip(), user),
        location_id=_location_id(params.get("location", "").strip()),
        min_age_days=min_age or None,
        sort=sort,
    )


def _team_id(raw: str, user) -> int | None:
    if not raw:
        return None
    teams = restrict_teams(Team.objects.all(), user)
    team = teams.filter(pk=int(raw)).first() if raw.isascii() and raw.isdigit() else teams.filter(name=raw).first()
    if team is None:
        raise BadParameter("team", "a team's name or id", raw)
    return team.pk


def _run_id(raw: str, user) -> int | None:
    if not raw:
        return None
    run = selectors.run_by_ref(raw, restrict_runs(Run.objects.all(), user))
    if run is None:
        raise BadParameter("run", 'a run as "team/run" or its id', raw)
    return run.pk


def _location_id(raw: str) -> int | None:
    if not raw:
        return None
    locations = StorageLocation.objects.all()
    if raw.isascii() and raw.isdigit():
        found = locations.filter(pk=whole_number(raw, "location", minimum=1)).first()
    else:
        found = locations.filter(name=raw).first()
    if found is None:
        raise BadParameter("location", "a storage location's name or id", raw)
    return found.pk
