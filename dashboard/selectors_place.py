"""Reads for the page of one host or one storage location: what lives there by run and team, what it costs this
month, and its bytes by tier and storage class. Every figure is one grouped query over a set of locations, so a
page costs the same for a host with one run or a thousand; a person scoped to teams sees only their teams' runs
and spend (``access.scoping``), and nothing of files that belong to no run."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal

from django.db.models import Count, F, Q, Sum
from django.utils import timezone

from access.scoping import restrict, spend_team_ids
from catalog import selectors as catalog_selectors
from fleet.choices import Tier
from fleet.models import Inventory
from fleet.pricebook import book_currency
from spend.models import UsageDaily, UsageMonthly, UsageState
from spend.usage import money

RESIDENT_RUNS_SHOWN = 100
_TIER_ORDER = {value: i for i, value in enumerate(Tier.values)}
_TIER_LABELS = dict(Tier.choices)
_STATE_LABELS = dict(UsageState.choices)


@dataclass
class Resident:
    """The present copies of one run at the locations of a page, and what the run's bytes there cost this month."""

    run_id: int
    run_name: str
    team_id: int | None
    team_name: str
    checkpoints: int
    copies: int
    bytes: int
    cost: Decimal | None = None  # this month so far; None: no price applies


@dataclass
class TeamShare:
    """One team's part of what lives at the locations of a page."""

    team_id: int | None
    team_name: str
    runs: int
    checkpoints: int
    bytes: int
    cost: Decimal | None = None


@dataclass(frozen=True)
class ClassBytes:
    """Bytes and files at the locations of a page on one tier and storage class, in one state, on the newest day."""

    tier: str
    tier_label: str
    storage_class: str
    state: str
    state_label: str
    bytes: int
    files: int


@dataclass
class Residents:
    """What lives at some locations: the runs (the biggest first, at most ``RESIDENT_RUNS_SHOWN``), the teams,
    the totals, and this month's spend there."""

    runs: list[Resident]
    run_count: int
    teams: list[TeamShare]
    checkpoints: int
    bytes: int
    month: date
    currency: str
    month_cost: Decimal | None  # None: nothing priced
    unpriced_rows: int
    by_state: list[tuple[str, Decimal]] = field(default_factory=list)

    @property
    def more_runs(self) -> int:
        return max(self.run_count - len(self.runs), 0)


def _this_month() -> date:
    return timezone.now().date().replace(day=1)


def residents(location_ids: Sequence[int], user, *, limit: int = RESIDENT_RUNS_SHOWN) -> Residents:
    """What lives at ``location_ids`` as ``user`` may see it: present copies (left-overs of interrupted saves
    are orphans, not copies) grouped by run and by team, and this month's cost from the monthly rollup.

    Five queries whatever the number of runs: runs, their count, teams, costs by run and team, cost by state.
    """
    ids = list(location_ids)
    copies = restrict(
        catalog_selectors.present_copies(temporary=False).filter(location_id__in=ids, checkpoint__run__isnull=False),
        user,
    )
    by_run = (
        copies.values(
            run_id=F("checkpoint__run_id"),
            run_name=F("checkpoint__run__name"),
            team_id=F("checkpoint__run__team_id"),
            team_name=F("checkpoint__run__team__name"),
        )
        .annotate(checkpoints=Count("checkpoint_id", distinct=True), copies=Count("pk"), total=Sum("bytes"))
        .order_by("-total", "team_name", "run_name", "run_id")
    )
    runs = [
        Resident(
            run_id=r["run_id"],
            run_name=r["run_name"],
            team_id=r["team_id"],
            team_name=r["team_name"] or "",
            checkpoints=r["checkpoints"],
            copies=r["copies"],
            bytes=r["total"] or 0,
        )
        for r in by_run[:limit]
    ]
    by_team = (
        copies.values(team_id=F("checkpoint__run__team_id"), team_name=F("checkpoint__run__team__name"))
        .annotate(
            runs=Count("checkpoint__run_id", distinct=True),
            checkpoints=Count("checkpoint_id", distinct=True),
            total=Sum("bytes"),
        )
        .order_by("-total", "team_name")
    )
    teams = [
        TeamShare(
            team_id=t["team_id"],
            team_name=t["team_name"] or "",
            runs=t["runs"],
            checkpoints=t["checkpoints"],
            bytes=t["total"] or 0,
        )
        for t in by_team
    ]
    run_count = sum(t.runs for t in teams)  # a run has one team: the teams' runs add up to the runs

    month = _this_month()
    usage = UsageMonthly.objects.filter(location_id__in=ids, month=month)
    team_ids = spend_team_ids(user)
    if team_ids is not None:
        usage = usage.filter(team_id__in=team_ids)
    run_costs = {
        row["run_id"]: row
        for row in usage.filter(run_id__in=[r.run_id for r in runs])
        .values("run_id")
        .annotate(nanos=Sum("cost_nanos"), priced=Count("pk", filter=Q(cost_nanos__isnull=False)))
        .order_by()
    }
    for r in runs:
        row = run_costs.get(r.run_id)
        r.cost = money(row["nanos"]) if row and row["priced"] else None
    team_costs: dict[int | None, tuple[int | None, int]] = {
        row["team_id"]: (row["nanos"], row["priced"])
        for row in usage.filter(run__isnull=False)
        .values("team_id")
        .annotate(nanos=Sum("cost_nanos"), priced=Count("pk", filter=Q(cost_nanos__isnull=False)))
        .order_by()
    }
    for t in teams:
        nanos, priced_rows = team_costs.get(t.team_id, (None, 0))
        t.cost = money(nanos) if priced_rows else None
    states = list(
        usage.values("state")
        .annotate(
            nanos=Sum("cost_nanos"),
            priced=Count("pk", filter=Q(cost_nanos__isnull=False)),
            unpriced=Count("pk", filter=Q(cost_nanos__isnull=True)),
        )
        .order_by("state")
    )
    priced_states = [s for s in states if s["priced"]]
    return Residents(
        runs=runs,
        run_count=run_count,
        teams=teams,
        checkpoints=sum(t.checkpoints for t in teams),
        bytes=sum(t.bytes for t in teams),
        month=month,
        currency=book_currency(),
        month_cost=sum((money(s["nanos"]) for s in priced_states), Decimal(0)) if priced_states else None,
        unpriced_rows=sum(s["unpriced"] for s in states),
        by_state=[(_STATE_LABELS.get(s["state"], s["state"]), money(s["nanos"])) for s in priced_states],
    )


def bytes_by_class(location_ids: Sequence[int], user) -> list[ClassBytes]:
    """Bytes and files at ``location_ids`` by tier, storage class and state on each location's newest rolled-up
    day (the rollup the ingest rewrites with every applied inventory or scan), hottest tier first. A scoped
    person sees only their teams' rows: files of no run are not theirs to see."""
    rows = UsageDaily.objects.filter(location_id__in=list(location_ids), day=F("location__usage_cursor__day"))
    team_ids = spend_team_ids(user)
    if team_ids is not None:
        rows = rows.filter(team_id__in=team_ids)
    grouped = (
        rows.values("tier", "storage_class", "state").annotate(total=Sum("bytes"), file_total=Sum("files")).order_by()
    )
    out = [
        ClassBytes(
            tier=r["tier"],
            tier_label=_TIER_LABELS.get(r["tier"], r["tier"] or "no tier"),
            storage_class=r["storage_class"],
            state=r["state"],
            state_label=_STATE_LABELS.get(r["state"], r["state"]),
            bytes=r["total"] or 0,
            files=r["file_total"] or 0,
        )
        for r in grouped
        if r["total"] or r["file_total"]
    ]
    return sorted(out, key=lambda c: (_TIER_ORDER.get(c.tier, 99), c.storage_class, -c.bytes))


def agent_version(host_id: int) -> str:
    """The agent string of the host's newest inventory that named one ('' when none did)."""
    return (
        Inventory.objects.filter(host_id=host_id)
        .exclude(agent="")
        .order_by("-received_at", "-id")
        .values_list("agent", flat=True)
        .first()
        or ""
    )
