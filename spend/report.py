"""Reads of spend, for the pages, the API and their CSV exports: every number comes from the usage rollups.

A period is a calendar month or one UTC day. Spend of a period is the sum of its days' row costs
(``spend.usage``: bytes x the price in force that day / the days of that month). Sums over a month
read the monthly rollup (``UsageMonthly``, exactly the sum of the month's daily rows, kept so by
``spend.usage``); what was stored on one day reads that day's daily rows. Each table is
built once here, as a ``Table`` of typed columns and raw values (Decimal money, integer bytes);
the page renders it, the API serialises it, and the CSV export writes it, so they cannot disagree.

Forecasts are "at today's placement": the bytes of the newest rolled-up day (``as_of``) kept as
they are, priced at each remaining day's price (a price change already entered for a later day is
honoured). The month-end forecast is month-to-date plus the remaining days; next month is the whole
next month.

The number of queries of each table is fixed, whatever the number of runs, locations or days.
"""

from __future__ import annotations

import calendar
import csv
import io
import re
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import date, timedelta
from decimal import ROUND_HALF_UP, Decimal

from django.db.models import Aggregate, Count, Max, Q, Sum

from catalog.choices import ENDED_STATUSES, RunStatus
from catalog.models import CopyTierUsage, Run, Team
from catalog.teams import CostCenters
from fleet.choices import LocationKind, Tier
from fleet.models import PricePoint, StorageLocation
from fleet.pricebook import GIB, PriceBook, book_currency, month_days, utc_today
from spend.models import UsageCursor, UsageDaily, UsageMonthly, UsageState
from spend.usage import CENT, money

TOP_RUNS = 15
TOP_LOCATIONS = 15  # the overview's table; a fleet of hundreds of hosts lists them all in the export
TOP_GROWING = 10
CHART_SERIES = 7  # teams drawn one by one in a stacked chart; the rest are summed as "other teams"
MONTHS_SHOWN = 12
STALE_AFTER_DAYS = 2
UNASSIGNED = "Unassigned"
NO_COST_CENTER = "No cost center"
TIER_ORDER = {value: i for i, value in enumerate(Tier.values)}

_YEARS = (1970, 9998)  # a period, its neighbours and next month all stay within what ``date`` holds
_MONTH = re.compile(r"^(\d{4})-(\d{2})$")
_DAY = re.compile(r"^(\d{4})-(\d{2})-(\d{2})$")


# --- periods ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Period:
    """A calendar month or a single UTC day."""

    first: date
    last: date
    kind: str  # "month" or "day"

    @classmethod
    def month(cls, year: int, month: int) -> Period:
        return cls(date(year, month, 1), date(year, month, calendar.monthrange(year, month)[1]), "month")

    @classmethod
    def day(cls, day: date) -> Period:
        return cls(day, day, "day")

    @classmethod
    def parse(cls, *, month: str | None = None, day: str | None = None, today: date) -> Period:
        """The period a request asks for (``month=YYYY-MM`` or ``day=YYYY-MM-DD``); this month when neither parses."""
        if day and (m := _DAY.match(day.strip())) and _YEARS[0] <= int(m[1]) <= _YEARS[1]:
            try:
                return cls.day(date(int(m[1]), int(m[2]), int(m[3])))
            except ValueError:
                pass
        if (
            month
            and (m := _MONTH.match(month.strip()))
            and 1 <= int(m[2]) <= 12
            and _YEARS[0] <= int(m[1]) <= _YEARS[1]
        ):
            return cls.month(int(m[1]), int(m[2]))
        return cls.month(today.year, today.month)

    @property
    def is_month(self) -> bool:
        return self.kind == "month"

    @property
    def days(self) -> int:
        return (self.last - self.first).days + 1

    @property
    def month_days(self) -> int:
        return month_days(self.first)

    @property
    def label(self) -> str:
        return f"{self.first:%B %Y}" if self.is_month else f"{self.first:%A %d %B %Y}"

    @property
    def short(self) -> str:
        return f"{self.first:%b %Y}" if self.is_month else f"{self.first:%Y-%m-%d}"

    @property
    def param(self) -> str:
        """The query string that selects this period."""
        return f"month={self.first:%Y-%m}" if self.is_month else f"day={self.first:%Y-%m-%d}"

    @property
    def slug(self) -> str:
        return f"{self.first:%Y-%m}" if self.is_month else f"{self.first:%Y-%m-%d}"

    @property
    def previous(self) -> Period:
        before = self.first - timedelta(days=1)
        return Period.month(before.year, before.month) if self.is_month else Period.day(before)

    @property
    def next(self) -> Period:
        after = self.last + timedelta(days=1)
        return Period.month(after.year, after.month) if self.is_month else Period.day(after)

    @property
    def month_period(self) -> Period:
        return Period.month(self.first.year, self.first.month)


def _months_back(period: Period, count: int) -> Period:
    first = period.month_period.first
    for _ in range(count - 1):
        first = (first - timedelta(days=1)).replace(day=1)
    return Period(first, period.month_period.last, "month")


# --- the basis every table of a request shares -----------------------------------------------------


@dataclass(frozen=True)
class Scope:
    """Narrows every table to one run or one team (the run and team spend pages)."""

    run_id: int | None = None
    team_id: int | None = None
    # The teams a scoped person sees (``access.scoping.spend_team_ids``); None: every team. Never a
    # parameter: the API works it out from the person again.
    team_ids: tuple[int, ...] | None = None

    def q(self, prefix: str = "") -> Q:
        q = Q()
        if self.run_id is not None:
            q &= Q(**{f"{prefix}run_id": self.run_id})
        if self.team_id is not None:
            q &= Q(**{f"{prefix}team_id": self.team_id})
        if self.team_ids is not None:
            q &= Q(**{f"{prefix}team_id__in": self.team_ids})
        return q

    @property
    def params(self) -> str:
        parts = []
        if self.run_id is not None:
            parts.append(f"run={self.run_id}")
        if self.team_id is not None:
            parts.append(f"team={self.team_id}")
        return "&".join(parts)


@dataclass
class Basis:
    """What a request's tables share: the period, today, the newest rolled-up day and the price book.

    ``as_of`` is the newest day with usage rows, no later than the period's end or today; None when
    the period has none. The price book and the locations are loaded once, when a forecast needs them.
    """

    period: Period
    today: date
    as_of: date | None
    currency: str
    scope: Scope = field(default_factory=Scope)
    _book: PriceBook | None = None
    _locations: dict[int, StorageLocation] = field(default_factory=dict)
    # (location, tier, class) -> (cost per GiB over the rest of this month, over next month), for forecasts.
    _rates: dict[tuple, tuple[Decimal, Decimal]] = field(default_factory=dict)
    _as_of_rows: list[dict] | None = None
    _price_scopes: dict[int, tuple] | None = None
    _centers: CostCenters | None = None

    @property
    def is_current(self) -> bool:
        return self.period.is_month and self.period.first <= self.today <= self.period.last

    @property
    def forecasts(self) -> bool:
        return self.is_current and self.as_of is not None

    @property
    def has_data(self) -> bool:
        return self.as_of is not None

    @property
    def remaining(self) -> tuple[date, date] | None:
        """The days of the current month after ``as_of``, still to be spent."""
        if not self.forecasts or self.as_of >= self.period.last:
            return None
        return self.as_of + timedelta(days=1), self.period.last

    @property
    def next_month(self) -> Period:
        return self.period.month_period.next

    @property
    def book(self) -> PriceBook:
        if self._book is None:
            self._book = PriceBook.load(until=self.next_month.last)
        return self._book

    def locations(self) -> dict[int, StorageLocation]:
        """Every location, with what pricing needs; loaded once, so each table costs the same queries."""
        if not self._locations:
            for loc in StorageLocation.objects.only("pk", "kind", "host_id", "tier", "name"):
                self._locations[loc.pk] = loc
        return self._locations

    def centers(self) -> CostCenters:
        """Every team's cost center on every day (``catalog.teams``), loaded once per request (two queries)."""
        if self._centers is None:
            self._centers = CostCenters.load()
        return self._centers

    def price_scopes(self) -> dict[int, tuple]:
        """{location id: what its prices depend on}: its kind, and its host or itself only when a price point
        names them (the ranks of ``PriceBook._rank``). Locations alike in this have the same rules on every
        day, so a forecast prices 64 alike hosts once, not 64 times."""
        if self._price_scopes is None:
            hosts = {p.host_id for p in self.book.points if p.host_id is not None}
            named = {p.location_id for p in self.book.points if p.location_id is not None}
            self._price_scopes = {
                pk: (loc.kind, loc.host_id if loc.host_id in hosts else None, pk if pk in named else None)
                for pk, loc in self.locations().items()
            }
        return self._price_scopes


def basis_for(period: Period, *, today: date | None = None, scope: Scope | None = None) -> Basis:
    """The basis of a request; two queries (the newest rolled-up day, the currency)."""
    today = today or utc_today()
    scope = scope or Scope()
    until = min(period.last, today)
    as_of = None
    if until >= period.first:
        as_of = (
            UsageDaily.objects.filter(day__gte=period.first, day__lte=until)
            .filter(scope.q())
            .aggregate(newest=Max("day"))["newest"]
        )
    return Basis(period=period, today=today, as_of=as_of, currency=book_currency(), scope=scope)


def _usage(basis: Basis):
    return UsageDaily.objects.filter(basis.scope.q())


@dataclass(frozen=True)
class _Sums:
    """Rows that sum a period and the one before it: a month's monthly rollup rows, or two days' daily rows."""

    rows: object  # a queryset of UsageMonthly or UsageDaily
    in_period: Q
    in_previous: Q
    byte_days: str  # the field holding bytes x days
    estimated: Aggregate  # of the rows in the period: how many days were estimated from file times (at most)


def _sums(basis: Basis) -> _Sums:
    period, previous = basis.period, basis.period.previous
    if period.is_month:
        return _Sums(
            UsageMonthly.objects.filter(basis.scope.q()).filter(month__in=[previous.first, period.first]),
            Q(month=period.first),
            Q(month=previous.first),
            "byte_days",
            Max("estimated_days", filter=Q(month=period.first)),
        )
    return _Sums(
        _usage(basis).filter(day__gte=previous.first, day__lte=period.last),
        Q(day__gte=period.first, day__lte=period.last),
        Q(day__gte=previous.first, day__lte=previous.last),
        "bytes",
        Count("day", distinct=True, filter=Q(day__gte=period.first, day__lte=period.last, estimated=True)),
    )


def _as_of_rows(basis: Basis) -> list[dict]:
    """The newest day's usage, summed by everything a table groups it by (team, run, location, tier, storage
    class; a team's cost center that day follows from its team): read once per request and shared by the summary
    and every grouped table."""
    if basis.as_of is None:
        return []
    if basis._as_of_rows is None:
        basis._as_of_rows = list(
            _usage(basis)
            .filter(day=basis.as_of)
            .values("team_id", "run_id", "location_id", "tier", "storage_class")
            .annotate(
                # Named before ``bytes``: after it, "bytes" would mean the sum, not the column.
                unpriced=Sum("bytes", filter=Q(cost_nanos__isnull=True)),
                cost=Sum("cost_nanos"),
                files=Sum("files"),
                bytes=Sum("bytes"),
            )
            .order_by()
        )
    return basis._as_of_rows


def _int(value) -> int:
    return int(value or 0)


def cents(value: Decimal | None) -> Decimal | None:
    """Money as shown and exported: rounded half up to the cent, once, at the end."""
    if value is None:
        return None
    return value.quantize(CENT, rounding=ROUND_HALF_UP)


# --- projections at today's placement -------------------------------------------------------------


def _project(basis: Basis, rows: Iterable[dict], key: Callable[[dict], object]) -> dict[object, list[Decimal]]:
    """For rows of the ``as_of`` day (location, tier, storage class, bytes), what they cost over the rest
    of this month and over next month, summed by ``key``: ``{key: [rest of month, next month]}``."""
    # Bytes summed per group and price (integers: locations that price alike together), then priced once
    # per pair in Decimal.
    scopes = basis.price_scopes() if rows else {}
    by_rate: dict[tuple, int] = defaultdict(int)
    where: dict[tuple, int] = {}  # a location of each price scope, to price it by
    for r in rows:
        scope = scopes.get(r["location_id"])
        if scope is None:
            continue
        by_rate[(key(r), scope, r["tier"], r["storage_class"])] += r["bytes"] or 0
        where.setdefault(scope, r["location_id"])
    locations = basis.locations() if by_rate else {}
    rest = basis.remaining
    nxt = basis.next_month
    per_gib = basis._rates  # shared by every table of the request: the same rates, priced once
    out: dict[object, list[Decimal]] = defaultdict(lambda: [Decimal(0), Decimal(0)])
    for (group, scope, tier, storage_class), stored in by_rate.items():
        loc = locations[where[scope]]
        rate_key = (scope, tier, storage_class)
        if rate_key not in per_gib:
            book = basis.book
            left = book.cost_of_days(loc, tier, storage_class, *rest) if rest else Decimal(0)
            whole = book.cost_of_days(loc, tier, storage_class, nxt.first, nxt.last)
            per_gib[rate_key] = (left or Decimal(0), whole or Decimal(0))
        left, whole = per_gib[rate_key]
        gib = Decimal(stored) / GIB
        sums = out[group]
        sums[0] += gib * left
        sums[1] += gib * whole
    return out


# --- tables --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    """One column: ``kind`` says how to show and export it (text, money, bytes, count, percent, gib_months, date)."""

    key: str
    label: str
    kind: str = "text"
    help: str = ""
    page: bool = True  # False: in the API and CSV only, to keep the page's table readable
    nowrap: bool = False

    @property
    def numeric(self) -> bool:
        return self.kind != "text" and self.kind != "date"


@dataclass
class Table:
    """A table of spend, shown on a page, served by the API and exported as CSV from the same rows."""

    name: str
    title: str
    columns: list[Column]
    rows: list[dict]
    basis: Basis
    total: dict | None = None
    note: str = ""
    empty: str = "No usage was recorded in this period."
    more: int = 0  # rows left out of a "top N" table; the export has them all

    @property
    def currency(self) -> str:
        return self.basis.currency

    @property
    def page_columns(self) -> list[Column]:
        return [c for c in self.columns if c.page]

    def column_labels(self) -> list[str]:
        return [self.label_of(c) for c in self.columns]

    def label_of(self, column: Column) -> str:
        if column.kind == "money":
            return f"{column.label} ({self.currency})"
        if column.kind == "bytes":
            return f"{column.label} (bytes)"
        if column.kind == "price":
            return f"{column.label} ({self.currency})"
        if column.kind == "percent":
            return f"{column.label} (%)"
        return column.label


def _share(part: Decimal | None, whole: Decimal) -> Decimal | None:
    if part is None or not whole:
        return None
    return (part * 100 / whole).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP)


def _gib_months(byte_days: int, basis: Basis) -> Decimal:
    return (Decimal(byte_days) / GIB / basis.period.month_days).quantize(Decimal("0.001"), rounding=ROUND_HALF_UP)


def _money_columns(basis: Basis) -> list[Column]:
    period = basis.period
    previous = "Previous day" if not period.is_month else "Last month"
    columns = [
        Column("spend", "Month to date" if basis.is_current else "Spend", "money"),
        Column("share", "Share", "percent"),
        Column("previous", previous, "money"),
    ]
    if basis.forecasts:
        columns += [
            Column(
                "forecast", "Forecast month end", "money", "month to date + the rest of the month at today's placement"
            ),
            Column("change", "Change", "money", "forecast month end - last month"),
            Column("next_month", f"{basis.next_month.short} forecast", "money", "next month at today's placement"),
        ]
    else:
        columns.append(Column("change", "Change", "money", f"spend - {previous.lower()}"))
    columns += [
        Column("stored", "Stored", "bytes", "on the newest day of the period"),
        Column("files", "Files", "count", "on the newest day of the period", page=False),
        Column(
            "gib_months",
            "GiB-months",
            "gib_months",
            "average GiB stored x months (what a cloud bill counts)",
            page=False,
        ),
    ]
    return columns


@dataclass(frozen=True)
class Dimension:
    name: str
    title: str
    fields: tuple[str, ...]
    key_columns: tuple[Column, ...]
    describe: Callable[[dict], dict]
    note: str = ""
    key: str = ""  # the field that identifies a group (for the forecast's breakdown); the first field if empty
    # The period's sums by group, when the rollup rows cannot simply be grouped by ``fields`` (cost centers).
    sums: Callable[[Basis, _Sums], list[dict]] | None = None
    # The group of a row of the newest day (``_as_of_rows``), when it is not one of its fields.
    as_of_key: Callable[[Basis, dict], object] | None = None

    @property
    def key_field(self) -> str:
        return self.key or self.fields[0]


def _team_row(r: dict) -> dict:
    return {
        "team": r["team__name"] or UNASSIGNED,
        "cost_center": (r["team__cost_center"] or NO_COST_CENTER) if r["team__name"] else "",
        "team_id": r["team_id"],
    }


def _period_sums(rows, sums: _Sums, group_by: list[str]) -> list[dict]:
    return list(
        rows.values(*group_by)
        .annotate(
            cost=Sum("cost_nanos", filter=sums.in_period),
            prev=Sum("cost_nanos", filter=sums.in_previous),
            period_byte_days=Sum(sums.byte_days, filter=sums.in_period),
        )
        .order_by()
    )


def _cost_center_sums(basis: Basis, sums: _Sums) -> list[dict]:
    """The period's (and the period before's) sums by the cost center in force on each day (``catalog.teams``).

    A month's rollup row is billed to the cost center in force on the month's first day; a team whose cost center
    changed on another day of these months is summed from its daily rows instead, day by day.
    """
    centers = basis.centers()
    period, previous = basis.period, basis.period.previous
    if not period.is_month:
        return _period_sums(sums.rows.annotate(cost_center=centers.expression("day")), sums, ["cost_center"])
    split = sorted(centers.changed_within(previous.first, period.last))
    monthly = sums.rows.exclude(team_id__in=split) if split else sums.rows
    rows = _period_sums(monthly.annotate(cost_center=centers.expression("month")), sums, ["cost_center"])
    if not split:
        return rows
    daily = _Sums(
        _usage(basis).filter(team_id__in=split, day__gte=previous.first, day__lte=period.last),
        Q(day__gte=period.first, day__lte=period.last),
        Q(day__gte=previous.first, day__lte=previous.last),
        "bytes",
        Count("day", distinct=True, filter=Q(day__gte=period.first, day__lte=period.last, estimated=True)),
    )
    rows += _period_sums(daily.rows.annotate(cost_center=centers.expression("day")), daily, ["cost_center"])
    merged: dict[str, dict] = {}
    for r in rows:
        into = merged.setdefault(r["cost_center"], {"cost_center": r["cost_center"]})
        for name in ("cost", "prev", "period_byte_days"):
            if r[name] is not None:
                into[name] = (into.get(name) or 0) + r[name]
            else:
                into.setdefault(name, None)
    return list(merged.values())


def _cost_center_of(basis: Basis, r: dict) -> str:
    """The cost center of a row of the newest day (``_as_of_rows``)."""
    return basis.centers().on(r["team_id"], basis.as_of or basis.today)


def _cost_center_label(spans: list[tuple[date, str]]) -> str:
    """A team's cost center over a period: "CC-2", or "CC-1, then CC-2 from 2026-11-14" when it changed."""
    first = spans[0][1] or NO_COST_CENTER
    return ", then ".join([first, *(f"{cc or NO_COST_CENTER} from {since:%Y-%m-%d}" for since, cc in spans[1:])])


def _run_row(r: dict) -> dict:
    if r["run_id"] is None:
        return {"run": f"{UNASSIGNED} (files of no run)", "team": "", "status": "", "run_id": None}
    return {
        "run": f"{r['run__team__name']}/{r['run__name']}",
        "team": r["run__team__name"],
        "status": RunStatus(r["run__status"]).label if r["run__status"] in RunStatus.values else r["run__status"],
        "run_id": r["run_id"],
    }


def _location_row(r: dict) -> dict:
    kind = r["location__kind"]
    return {
        "location": r["location__name"],
        "kind": LocationKind(kind).label if kind in LocationKind.values else kind,
        "location_id": r["location_id"],
        "host_id": r["location__host_id"],
    }


def _tier_row(r: dict) -> dict:
    return {"tier": Tier(r["tier"]).label if r["tier"] in Tier.values else r["tier"], "tier_value": r["tier"]}


DIMENSIONS = {
    "team": Dimension(
        "by-team",
        "By team",
        ("team_id", "team__name", "team__cost_center"),
        (Column("team", "Team"), Column("cost_center", "Cost center")),
        _team_row,
        "Files that belong to no run are unassigned.",
    ),
    "cost_center": Dimension(
        "by-cost-center",
        "By cost center",
        ("cost_center",),
        (Column("cost_center", "Cost center"),),
        lambda r: {"cost_center": r["cost_center"] or NO_COST_CENTER},
        "Each day's spend goes to the cost center its team had that day (a team's history is on the Teams page); "
        "teams without one, and files of no run, are grouped as no cost center.",
        sums=_cost_center_sums,
        as_of_key=_cost_center_of,
    ),
    "run": Dimension(
        "by-run",
        "By run",
        ("run_id", "run__name", "run__team__name", "run__status"),
        (Column("run", "Run"), Column("team", "Team", page=False), Column("status", "Status")),
        _run_row,
    ),
    "tier": Dimension("by-tier", "By tier", ("tier",), (Column("tier", "Tier"),), _tier_row),
    "location": Dimension(
        "by-location",
        "By location",
        ("location_id", "location__name", "location__kind", "location__host_id"),
        (Column("location", "Location"), Column("kind", "Kind")),
        _location_row,
    ),
}


def _grouped(basis: Basis, dim: Dimension, *, limit: int | None = None) -> Table:
    columns = [*dim.key_columns, *_money_columns(basis)]
    table = Table(dim.name, dim.title, columns, [], basis, note=dim.note)
    sums = _sums(basis)
    key_field = dim.key_field
    # Grouped by the key alone, names joined afterwards: grouping by the names too made PostgreSQL sort
    # the period's rows on disk (its estimate of the groups was the row count), 3-4x slower at 10M files.
    group_by = [f for f in dim.fields if f == key_field or "__" not in f]
    rows = dim.sums(basis, sums) if dim.sums is not None else _period_sums(sums.rows, sums, group_by)
    as_of_key = dim.as_of_key

    def key_of(r: dict) -> object:
        return as_of_key(basis, r) if as_of_key is not None else r[key_field]

    # What each group stores on the newest day, by location, tier and class (the forecast prices these).
    on_as_of = _as_of_rows(basis) if rows else []
    stored: dict = defaultdict(lambda: [0, 0])
    for r in on_as_of:
        group = stored[key_of(r)]
        group[0] += r["bytes"] or 0
        group[1] += r["files"] or 0
    rows.sort(key=lambda r: (-_int(r["cost"]), -_int(r["prev"]), str(r[dim.fields[0]])))
    total_cost = money(sum(_int(r["cost"]) for r in rows))
    if limit is not None and len(rows) > limit:
        table.more = len(rows) - limit
        rows = rows[:limit]
    _add_labels(rows, dim, [f for f in dim.fields if f not in group_by])  # of the rows shown only
    projections: dict = {}
    if basis.forecasts and rows:
        shown = {r[key_field] for r in rows}
        breakdown = [r for r in on_as_of if key_of(r) in shown]
        projections = _project(basis, breakdown, key=key_of)
    totals = defaultdict(Decimal)
    total_bytes = total_files = total_byte_days = 0
    for r in rows:
        cost, prev = money(r["cost"]), money(r["prev"])
        row = dim.describe(r)
        row.update(
            spend=cost,
            share=_share(cost, total_cost),
            previous=prev,
            stored=stored[r[key_field]][0],
            files=stored[r[key_field]][1],
            gib_months=_gib_months(_int(r["period_byte_days"]), basis),
        )
        if basis.forecasts:
            rest, nxt = projections.get(r[key_field], [Decimal(0), Decimal(0)])
            row.update(forecast=cost + rest, next_month=nxt, change=cost + rest - prev)
            totals["forecast"] += cost + rest
            totals["next_month"] += nxt
        else:
            row["change"] = cost - prev
        totals["spend"] += cost
        totals["previous"] += prev
        total_bytes += row["stored"]
        total_files += row["files"]
        total_byte_days += _int(r["period_byte_days"])
        table.rows.append(row)
    if table.rows and not table.more:
        table.total = {
            **dict(totals),
            "share": _share(totals["spend"], total_cost),
            "change": (totals["forecast"] if basis.forecasts else totals["spend"]) - totals["previous"],
            "stored": total_bytes,
            "files": total_files,
            "gib_months": _gib_months(total_byte_days, basis),
        }
    return table


def _add_labels(rows: list[dict], dim: Dimension, fields: list[str]) -> None:
    """Fill in the name fields of a dimension (``run__name``, ``run__team__name``...) from its model, for the
    keys in ``rows``: one query. A row of no key (unassigned) gets None, as the join would have given."""
    if not fields:
        return
    relation = dim.key_field.removesuffix("_id")
    model = UsageDaily._meta.get_field(relation).related_model
    wanted = [f.removeprefix(f"{relation}__") for f in fields]
    keys = {r[dim.key_field] for r in rows} - {None}
    found = {v["pk"]: v for v in model.objects.filter(pk__in=keys).order_by().values("pk", *wanted)} if keys else {}
    for r in rows:
        known = found.get(r[dim.key_field], {})
        for field_name, attribute in zip(fields, wanted, strict=True):
            r[field_name] = known.get(attribute)


def by_team(basis: Basis) -> Table:
    """Spend by team, each with the cost center it had over the period (both, and from when, if it changed)."""
    table = _grouped(basis, DIMENSIONS["team"])
    centers = basis.centers() if table.rows else None
    period = basis.period
    last = max(min(period.last, basis.today), period.first)
    for row in table.rows:
        if centers is not None and row["team_id"] in centers.timelines:
            row["cost_center"] = _cost_center_label(centers.spans(row["team_id"], period.first, last))
    return table


def by_cost_center(basis: Basis) -> Table:
    return _grouped(basis, DIMENSIONS["cost_center"])


def by_run(basis: Basis, *, limit: int | None = None) -> Table:
    return _grouped(basis, DIMENSIONS["run"], limit=limit)


def by_tier(basis: Basis) -> Table:
    table = _grouped(basis, DIMENSIONS["tier"])
    table.rows.sort(key=lambda r: TIER_ORDER.get(r["tier_value"], 99))
    return table


def by_location(basis: Basis, *, limit: int | None = None) -> Table:
    return _grouped(basis, DIMENSIONS["location"], limit=limit)


# --- summary -------------------------------------------------------------------------------------


@dataclass
class Summary:
    """The headline numbers of a period."""

    basis: Basis
    spend: Decimal
    previous: Decimal
    forecast: Decimal | None
    next_month: Decimal | None
    daily: Decimal  # the cost of the as_of day
    stored: int
    files: int
    unpriced_bytes: int
    stale_locations: int
    estimated_days: int = 0  # days of the period estimated from file times (spend.backfill), not measured

    @property
    def change(self) -> Decimal:
        return (self.forecast if self.forecast is not None else self.spend) - self.previous

    @property
    def change_percent(self) -> Decimal | None:
        if not self.previous:
            return None
        return _share(self.change, self.previous)

    @property
    def monthly_run_rate(self) -> Decimal:
        """What a month costs at the placement and prices of the newest day."""
        if self.basis.as_of is None:
            return Decimal(0)
        return self.daily * month_days(self.basis.as_of)


def summary(basis: Basis) -> Summary:
    as_of = basis.as_of
    sums = _sums(basis)
    totals = sums.rows.aggregate(
        cost=Sum("cost_nanos", filter=sums.in_period),
        prev=Sum("cost_nanos", filter=sums.in_previous),
        estimated=sums.estimated,
    )
    # The newest day's rows: what is stored, and (by location, tier and class) what the forecast prices.
    on_as_of = _as_of_rows(basis)
    spend = money(totals["cost"])
    forecast = next_month = None
    if basis.forecasts:
        rest, nxt = _project(basis, on_as_of, key=lambda r: "all").get("all", [Decimal(0), Decimal(0)])
        forecast, next_month = spend + rest, nxt
    stale = 0
    if as_of is not None and basis.scope == Scope():
        stale = UsageCursor.objects.filter(refreshed_day__lt=as_of - timedelta(days=STALE_AFTER_DAYS)).count()
    return Summary(
        basis=basis,
        spend=spend,
        previous=money(totals["prev"]),
        forecast=forecast,
        next_month=next_month,
        daily=money(sum(_int(r["cost"]) for r in on_as_of)),
        stored=sum(_int(r["bytes"]) for r in on_as_of),
        files=sum(_int(r["files"]) for r in on_as_of),
        unpriced_bytes=sum(_int(r["unpriced"]) for r in on_as_of),
        stale_locations=stale,
        estimated_days=int(totals["estimated"] or 0),
    )


# --- over time -----------------------------------------------------------------------------------


# Short names for column headers and chart legends, where the full labels make tables too wide.
TIER_SHORT = {
    Tier.NVME: "NVMe",
    Tier.PFS: "Parallel FS",
    Tier.OBJECT_STANDARD: "Object standard",
    Tier.OBJECT_INFREQUENT: "Object infrequent",
    Tier.ARCHIVE_INSTANT: "Archive instant",
    Tier.ARCHIVE: "Archive",
    Tier.DEEP_ARCHIVE: "Deep archive",
}


def _tier_label(value: str) -> str:
    return TIER_SHORT.get(value, value)


def daily(basis: Basis) -> Table:
    """Spend and stored bytes per day of the period's month (through ``as_of``), with spend by tier."""
    month = basis.period.month_period
    end = min(month.last, basis.today)
    rows = list(
        _usage(basis)
        .filter(day__gte=month.first, day__lte=end)
        .values("day", "tier")
        .annotate(cost=Sum("cost_nanos"), bytes=Sum("bytes"))
        .order_by("day", "tier")
    )
    tiers = sorted({r["tier"] for r in rows}, key=lambda t: TIER_ORDER.get(t, 99))
    columns = [
        Column("day", "Day (UTC)", "date", nowrap=True),
        Column("spend", "Spend", "money"),
        Column("stored", "Stored", "bytes"),
        *(Column(f"tier:{t}", _tier_label(t), "money") for t in tiers),
    ]
    by_day: dict[date, dict] = {}
    for r in rows:
        row = by_day.setdefault(r["day"], {"day": r["day"], "spend": Decimal(0), "stored": 0})
        cost = money(r["cost"])
        row["spend"] += cost
        row[f"tier:{r['tier']}"] = row.get(f"tier:{r['tier']}", Decimal(0)) + cost
        row["stored"] += _int(r["bytes"])
    out = []
    end = max(by_day, default=month.first - timedelta(days=1))
    for offset in range((end - month.first).days + 1):
        day = month.first + timedelta(days=offset)
        row = by_day.get(day, {"day": day, "spend": Decimal(0), "stored": 0})
        for t in tiers:
            row.setdefault(f"tier:{t}", Decimal(0))
        out.append(row)
    table = Table("daily", f"By day, {month.label}", columns, out, basis)
    if out:
        table.total = {c.key: sum((r[c.key] for r in out), Decimal(0)) for c in columns if c.kind == "money"}
    table.note = "Stored is what the fleet held that day; a day without an inventory holds the last one's state."
    return table


def _monthly(basis: Basis, *, series_field: str, name: str, title: str) -> Table:
    window = _months_back(basis.period, MONTHS_SHOWN)
    end = min(window.last, basis.today)
    fields = ("tier",) if series_field == "tier" else ("team_id", "team__name")
    rows = list(
        UsageMonthly.objects.filter(basis.scope.q())
        .filter(month__gte=window.first, month__lte=end.replace(day=1))
        .values("month", *fields)
        .annotate(cost=Sum("cost_nanos"))
        .order_by("month", *fields)
    )
    if series_field == "tier":
        keys = sorted({r["tier"] for r in rows}, key=lambda t: TIER_ORDER.get(t, 99))
        labels = {t: _tier_label(t) for t in keys}

        def series_of(r: dict) -> str:
            return r["tier"]
    else:
        totals: dict = defaultdict(Decimal)
        names = {}
        for r in rows:
            totals[r["team_id"]] += money(r["cost"])
            names[r["team_id"]] = r["team__name"] or UNASSIGNED
        ranked = sorted(totals, key=lambda k: (-totals[k], names[k]))
        shown = ranked[:CHART_SERIES]
        keys = [str(k) for k in shown] + (["other"] if len(ranked) > CHART_SERIES else [])
        labels = {str(k): names[k] for k in shown} | {"other": f"{len(ranked) - CHART_SERIES} other teams"}
        shown_set = set(shown)

        def series_of(r: dict) -> str:
            return str(r["team_id"]) if r["team_id"] in shown_set else "other"

    columns = [
        Column("month", "Month", "text", nowrap=True),
        Column("spend", "Total", "money"),
        *(Column(f"s:{k}", labels[k], "money") for k in keys),
    ]
    by_month: dict[date, dict] = {}
    for r in rows:
        month = r["month"]
        month = month.date() if hasattr(month, "date") else month
        row = by_month.setdefault(month, {"month_start": month, "spend": Decimal(0)})
        cost = money(r["cost"])
        key = f"s:{series_of(r)}"
        row[key] = row.get(key, Decimal(0)) + cost
        row["spend"] += cost
    out = []
    # From the first month with usage (or the period's own month): no row of zeros before the fleet existed.
    month = min([*by_month, basis.period.month_period.first]) if by_month else window.first
    while month <= end:
        row = by_month.get(month, {"month_start": month, "spend": Decimal(0)})
        row["month"] = f"{month:%Y-%m}"
        for k in keys:
            row.setdefault(f"s:{k}", Decimal(0))
        out.append(row)
        month = (month + timedelta(days=32)).replace(day=1)
    table = Table(name, title, columns, out, basis)
    if any(r["spend"] for r in out):
        table.total = {c.key: sum((r[c.key] for r in out), Decimal(0)) for c in columns if c.kind == "money"}
    else:
        table.rows = []
    if basis.is_current:
        table.note = f"{basis.period.first:%Y-%m} is month to date."
    return table


def monthly_by_tier(basis: Basis) -> Table:
    return _monthly(basis, series_field="tier", name="monthly-by-tier", title="Spend by month and tier")


def monthly_by_team(basis: Basis) -> Table:
    return _monthly(basis, series_field="team", name="monthly-by-team", title="Spend by month and team")


# --- growth and waste ----------------------------------------------------------------------------


def growing_runs(basis: Basis, *, limit: int | None = TOP_GROWING) -> Table:
    """Runs whose stored bytes grew most from the day before the period to its newest day."""
    columns = [
        Column("run", "Run"),
        Column("team", "Team"),
        Column("stored_before", "Stored before", "bytes", "on the day before the period"),
        Column("stored", "Stored", "bytes", "on the newest day of the period"),
        Column("growth", "Growth", "bytes"),
        Column("run_rate", "Monthly cost now", "money", "the newest day's cost x the days of its month"),
        Column("run_rate_change", "Monthly cost change", "money"),
    ]
    table = Table("growing-runs", "Fastest-growing runs", columns, [], basis)
    table.empty = "No run grew in this period."
    if basis.as_of is None:
        return table
    before = basis.period.first - timedelta(days=1)
    rows = list(
        _usage(basis)
        .filter(day__in=[before, basis.as_of], run__isnull=False)
        .values("run_id", "run__name", "run__team__name")
        .annotate(
            start=Sum("bytes", filter=Q(day=before)),
            end=Sum("bytes", filter=Q(day=basis.as_of)),
            start_cost=Sum("cost_nanos", filter=Q(day=before)),
            end_cost=Sum("cost_nanos", filter=Q(day=basis.as_of)),
        )
        .order_by()
    )
    rows = [r for r in rows if _int(r["end"]) > _int(r["start"])]
    rows.sort(key=lambda r: (-(_int(r["end"]) - _int(r["start"])), r["run__team__name"], r["run__name"]))
    if limit is not None and len(rows) > limit:
        table.more = len(rows) - limit
        rows = rows[:limit]
    for r in rows:
        rate_now = money(r["end_cost"]) * month_days(basis.as_of)
        rate_before = money(r["start_cost"]) * month_days(before)
        table.rows.append(
            {
                "run": f"{r['run__team__name']}/{r['run__name']}",
                "team": r["run__team__name"],
                "run_id": r["run_id"],
                "stored_before": _int(r["start"]),
                "stored": _int(r["end"]),
                "growth": _int(r["end"]) - _int(r["start"]),
                "run_rate": rate_now,
                "run_rate_change": rate_now - rate_before,
            }
        )
    return table


@dataclass(frozen=True)
class WasteKind:
    key: str
    label: str
    help: str
    q: Q


# Finished, failed, abandoned or deleted: a run that writes no more checkpoints (catalog.choices).
FINISHED = list(ENDED_STATUSES)
WASTE_KINDS = [
    WasteKind(
        "unclaimed",
        "Files of no checkpoint",
        "present files no recognised checkpoint owns",
        Q(state=UsageState.UNCLAIMED),
    ),
    WasteKind(
        "temporary",
        "Left-overs of interrupted saves",
        "temporary directories and unfinished markers",
        Q(state=UsageState.TEMPORARY),
    ),
    WasteKind(
        "multipart",
        "Incomplete multipart uploads",
        "parts of uploads never completed or aborted",
        Q(state=UsageState.MULTIPART),
    ),
    WasteKind(
        "noncurrent",
        "Non-current versions",
        "older versions a versioned bucket keeps: billed like objects, though no listing shows them",
        Q(state=UsageState.NONCURRENT),
    ),
    WasteKind(
        "partial", "Partial copies", "copies with files missing: they restore nothing", Q(state=UsageState.PARTIAL)
    ),
    WasteKind("corrupt", "Corrupt copies", "copies whose sizes or checksums are wrong", Q(state=UsageState.CORRUPT)),
    WasteKind(
        "finished_on_nvme",
        "Finished runs still on NVMe",
        "complete copies of runs that ended (finished, failed, abandoned or deleted) on GPU-host NVMe, the most "
        "expensive tier",
        Q(state=UsageState.COMPLETE, tier=Tier.NVME, run_status__in=FINISHED),
    ),
    WasteKind(
        "deleted_run",
        "Deleted runs elsewhere",
        "complete copies of runs marked finished and deleted, on other tiers",
        Q(state=UsageState.COMPLETE, run_status=RunStatus.DELETED) & ~Q(tier=Tier.NVME),
    ),
]


def waste(basis: Basis) -> Table:
    """What of the period's spend restores nothing or sits where it should not: one query, one row per kind.

    A run's status is the one it had on each day (copied into the rollup), so a run finished
    today does not turn last month's NVMe spend into waste.
    """
    as_of = basis.as_of
    period_sums = _sums(basis)
    aggregates = {}
    for kind in WASTE_KINDS:
        aggregates[f"{kind.key}__cost"] = Sum("cost_nanos", filter=kind.q & period_sums.in_period)
    aggregates["all__cost"] = Sum("cost_nanos", filter=period_sums.in_period)
    sums = period_sums.rows.filter(period_sums.in_period).aggregate(**aggregates)
    if as_of is not None:
        on_as_of = {}
        for kind in WASTE_KINDS:
            on_as_of[f"{kind.key}__stored"] = Sum("bytes", filter=kind.q)
            on_as_of[f"{kind.key}__files"] = Sum("files", filter=kind.q)
            on_as_of[f"{kind.key}__daily"] = Sum("cost_nanos", filter=kind.q)
        sums.update(_usage(basis).filter(day=as_of).aggregate(**on_as_of))
    total = money(sums["all__cost"])
    columns = [
        Column("kind", "Waste"),
        Column("spend", "Month to date" if basis.is_current else "Spend", "money"),
        Column("share", "Share of all spend", "percent"),
        Column("stored", "Stored", "bytes", "on the newest day of the period"),
        Column("files", "Files", "count", "files, or uploads for multipart, or versions for non-current"),
        Column("run_rate", "Monthly cost now", "money", "the newest day's cost x the days of its month"),
        Column("help", "What it is"),
    ]
    table = Table("waste", "Waste", columns, [], basis)
    days = month_days(as_of) if as_of else 0
    totals = {"spend": Decimal(0), "stored": 0, "files": 0, "run_rate": Decimal(0)}
    for kind in WASTE_KINDS:
        cost = money(sums[f"{kind.key}__cost"])
        row = {
            "kind": kind.label,
            "key": kind.key,
            "spend": cost,
            "share": _share(cost, total),
            "stored": _int(sums.get(f"{kind.key}__stored")),
            "files": _int(sums.get(f"{kind.key}__files")),
            "run_rate": money(sums.get(f"{kind.key}__daily")) * days,
            "help": kind.help,
        }
        for k in totals:
            totals[k] += row[k]
        table.rows.append(row)
    if basis.has_data:
        table.total = {**totals, "share": _share(totals["spend"], total)}
    else:
        table.rows = []
    return table


# --- a run's checkpoints -------------------------------------------------------------------------


def run_steps(basis: Basis) -> Table:
    """A run's present bytes per checkpoint and tier, now (``CopyTierUsage``): what each step costs to keep."""
    columns = [Column("checkpoint", "Checkpoint"), Column("step", "Step", "count")]
    table = Table("run-steps", "Bytes by checkpoint and tier, now", columns, [], basis)
    table.empty = "None of this run's checkpoints has a present copy."
    if basis.scope.run_id is None:
        table.empty = "Choose a run."
        return table
    rows = list(
        CopyTierUsage.objects.filter(copy__checkpoint__run_id=basis.scope.run_id, copy__gone_at__isnull=True)
        .values("copy__checkpoint_id", "copy__checkpoint__step", "copy__checkpoint__tag", "tier")
        .annotate(bytes=Sum("bytes"), files=Sum("files"))
        .order_by()
    )
    tiers = sorted({r["tier"] for r in rows}, key=lambda t: TIER_ORDER.get(t, 99))
    table.columns += [Column(f"tier:{t}", _tier_label(t), "bytes") for t in tiers]
    table.columns += [Column("stored", "All tiers", "bytes"), Column("files", "Files", "count")]
    by_checkpoint: dict[int, dict] = {}
    for r in rows:
        step, tag = r["copy__checkpoint__step"], r["copy__checkpoint__tag"]
        row = by_checkpoint.setdefault(
            r["copy__checkpoint_id"],
            {
                "checkpoint": f"step {step:,}" if step is not None else tag,
                "step": step,
                "checkpoint_id": r["copy__checkpoint_id"],
                "stored": 0,
                "files": 0,
                **{f"tier:{t}": 0 for t in tiers},
            },
        )
        row[f"tier:{r['tier']}"] += _int(r["bytes"])
        row["stored"] += _int(r["bytes"])
        row["files"] += _int(r["files"])
    table.rows = sorted(by_checkpoint.values(), key=lambda r: (r["step"] is None, r["step"] or 0, r["checkpoint"]))
    if table.rows:
        table.total = {c.key: sum(r[c.key] for r in table.rows) for c in table.columns if c.kind == "bytes"}
        table.total["files"] = sum(r["files"] for r in table.rows)
    return table


# --- the price book ------------------------------------------------------------------------------


def price_points() -> list[PricePoint]:
    """Every price point, newest first, with its location and host."""
    return list(PricePoint.objects.select_related("location", "host").order_by("-effective_from", "tier", "-id"))


def prices(basis: Basis) -> Table:
    columns = [
        Column("scope", "Applies to"),
        Column("tier", "Tier"),
        Column("storage_class", "Storage class"),
        Column("price", "Price per GiB-month", "price"),
        Column("entered", "Entered as", help="when entered per TiB-month or as a host's monthly cost of drives"),
        Column("effective_from", "From (UTC day)", "date"),
        Column("in_force", "In force today"),
        Column("source", "Source"),
        Column("created_by", "Added by"),
    ]
    points = price_points()
    in_force = _in_force_ids(points, basis.today)
    rows = []
    for p in points:
        rows.append(
            {
                "scope": p.scope_label,
                "tier": Tier(p.tier).label if p.tier in Tier.values else p.tier,
                "storage_class": p.storage_class or "any",
                "price": p.price_per_gib_month,
                "entered": _entered(p) if p.basis != "gib_month" else "",
                "effective_from": p.effective_from,
                "in_force": "yes"
                if p.pk in in_force
                else ("from " + f"{p.effective_from}" if p.effective_from > basis.today else "replaced"),
                "source": p.source,
                "created_by": p.created_by,
                "point_id": p.pk,
            }
        )
    table = Table("prices", "Price book", columns, rows, basis)
    table.empty = "The price book is empty: no spend can be computed until a price is added."
    return table


def _entered(point: PricePoint) -> str:
    if point.basis == "tib_month":
        return f"{point.entered_price.normalize():f} {point.currency} per TiB-month"
    if point.basis == "host_month":
        capacity = Decimal(point.host_capacity_bytes or 0) / 1024**4
        return f"{point.entered_price.normalize():f} {point.currency} per host-month for {capacity:.2f} TiB of drives"
    return f"{point.entered_price.normalize():f} {point.currency} per GiB-month"


def _in_force_ids(points: list[PricePoint], today: date) -> set[int]:
    """Points that are the newest of their scope, tier and class on ``today`` (whether or not a narrower one wins)."""
    newest: dict[tuple, PricePoint] = {}
    for p in sorted(points, key=lambda p: (p.effective_from, p.pk)):
        if p.effective_from <= today:
            newest[(p.kind, p.location_id, p.host_id, p.tier, p.storage_class)] = p
    return {p.pk for p in newest.values()}


# --- the registry shared by pages, API and exports -------------------------------------------------

TABLES: dict[str, Callable[[Basis], Table]] = {
    "by-team": by_team,
    "by-cost-center": by_cost_center,
    "by-run": by_run,
    "by-tier": by_tier,
    "by-location": by_location,
    "daily": daily,
    "monthly-by-tier": monthly_by_tier,
    "monthly-by-team": monthly_by_team,
    "growing-runs": lambda basis: growing_runs(basis, limit=None),
    "waste": waste,
    "run-steps": run_steps,
    "prices": prices,
}


def spend_table(name: str, basis: Basis) -> Table:
    """One table by its name in ``TABLES``; raises KeyError for an unknown name."""
    return TABLES[name](basis)


def run_for_spend(pk: int) -> Run:
    return Run.objects.select_related("team").get(pk=pk)


# --- plain values for the API and CSV --------------------------------------------------------------


def plain(value, kind: str):
    """A cell as the API and CSV carry it: money and prices as exact decimal strings, dates as ISO text."""
    if value is None:
        return None
    if kind == "money":
        return f"{cents(value):f}"
    if kind in ("price", "percent", "gib_months"):
        return f"{value.normalize():f}" if isinstance(value, Decimal) else str(value)
    if kind == "date":
        return value.isoformat() if isinstance(value, date) else value
    return value


def table_data(table: Table) -> dict:
    """The JSON shape of a table: its columns (with units) and rows of plain values."""

    def cells(row: dict) -> dict:
        return {c.key: plain(row.get(c.key), c.kind) for c in table.columns}

    return {
        "name": table.name,
        "title": table.title,
        "period": {"kind": table.basis.period.kind, "first": table.basis.period.first, "last": table.basis.period.last},
        "as_of": table.basis.as_of,
        "currency": table.currency,
        "columns": [
            {"key": c.key, "label": c.label, "kind": c.kind, "header": table.label_of(c)} for c in table.columns
        ],
        "rows": [cells(r) for r in table.rows],
        "total": cells(table.total) if table.total else None,
        "note": table.note,
    }


_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _csv_safe(value) -> str:
    """Text cells that a spreadsheet would run as a formula (run names come from directory names) get a quote."""
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(_FORMULA_START) else text


# The CSV carries money to the ten-thousandth and beyond (a small run's day costs fractions of a cent; a spreadsheet
# sums the rows), and GiB-months always with three decimals.
CSV_MONEY = Decimal("0.000001")


def csv_cell(value, kind: str):
    """A cell as the CSV export carries it: money to six decimals, GiB-months to three, else as ``plain``."""
    if value is None:
        return None
    if kind == "money":
        return f"{Decimal(value).quantize(CSV_MONEY, rounding=ROUND_HALF_UP):f}"
    if kind == "gib_months":
        return f"{Decimal(value).quantize(Decimal('0.001'), rounding=ROUND_HALF_UP):f}"
    return plain(value, kind)


def table_csv(table: Table) -> str:
    """The CSV of a table: a header with units, its rows, then its total, numbers unformatted."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(table.column_labels())
    for row in [*table.rows, *([{**table.total, table.columns[0].key: "Total"}] if table.total else [])]:
        cells = []
        for c in table.columns:
            value = csv_cell(row.get(c.key), c.kind)
            cells.append(_csv_safe(value) if not c.numeric else ("" if value is None else value))
        writer.writerow(cells)
    return out.getvalue()


def _file_slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60]


def csv_filename(table: Table) -> str:
    """``spend-by_run-2026-11-team-llm.csv``: named after the run or team it is scoped to, not their ids."""
    scope = table.basis.scope
    suffix = ""
    if scope.run_id:
        run = Run.objects.filter(pk=scope.run_id).select_related("team").only("name", "team__name").first()
        suffix = f"-run-{_file_slug(f'{run.team.name}-{run.name}')}" if run else f"-run{scope.run_id}"
    elif scope.team_id:
        team = Team.objects.filter(pk=scope.team_id).values_list("name", flat=True).first()
        suffix = f"-team-{_file_slug(team)}" if team else f"-team{scope.team_id}"
    return f"spend-{table.name}-{table.basis.period.slug}{suffix}.csv"


def summary_data(s: Summary) -> dict:
    """The JSON shape of a period's headline numbers; money as exact decimal strings, in ``currency``."""
    basis = s.basis

    def m(value: Decimal | None) -> str | None:
        return plain(value, "money")

    return {
        "period": {"kind": basis.period.kind, "first": basis.period.first, "last": basis.period.last},
        "as_of": basis.as_of,
        "currency": basis.currency,
        "month_to_date": basis.is_current,
        "spend": m(s.spend),
        "previous": m(s.previous),
        "change": m(s.change),
        "change_percent": plain(s.change_percent, "percent"),
        "forecast_month_end": m(s.forecast),
        "next_month": m(s.next_month),
        "daily_cost": m(s.daily),
        "monthly_run_rate": m(s.monthly_run_rate),
        "stored_bytes": s.stored,
        "files": s.files,
        "unpriced_bytes": s.unpriced_bytes,
        "stale_locations": s.stale_locations,
    }


def anything_recorded() -> bool:
    """Whether any usage was ever rolled up: tells "no inventory yet" from "nothing in this period"."""
    return UsageDaily.objects.exists()
