"""Pages of spend: a month or a day by team, cost center, run, tier and location; a run's spend; the price book.

Views read the request, call ``spend.report`` and render; every table has a CSV export served by
the API from the same ``Table`` (``spend.api``), and every chart is drawn from a table
shown beside or under it.
"""

from __future__ import annotations

from datetime import UTC, date, timedelta
from decimal import Decimal

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone

from access.roles import Role, has_role, require_role
from access.scoping import may_see_run, spend_team_ids
from actions.reclaim import reclaimed
from actions.softdelete import pending_reclaim
from audit.actor import Actor
from audit.choices import EventSource
from catalog.models import Run, Team
from catalog.teams import CostCenters
from ckptfleet.errors import DomainError, PermissionRefused
from ckptfleet.params import positive_int_param
from fleet.choices import LocationKind, Tier
from fleet.models import Host, PriceBasis, StorageLocation
from fleet.pricebook import utc_today
from spend import report as spend
from spend.prices import price_set

RUNS_PER_PAGE = 100
_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def _period(request, today: date) -> spend.Period:
    return spend.Period.parse(month=request.GET.get("month"), day=request.GET.get("day"), today=today)


def _export(table: spend.Table) -> str:
    """The URL of a table's CSV export (the API's, so pages and API share one implementation)."""
    basis = table.basis
    scope = f"&{basis.scope.params}" if basis.scope.params else ""
    return f"{reverse('spend-api:table', args=[table.name])}?{basis.period.param}{scope}&format=csv"


def _with_export(request, *tables: spend.Table) -> None:
    """Export links: the CSV of what the page shows, for anyone who may read the page (the same rule as the JSON)."""
    for table in tables:
        table.export_url = _export(table)


# --- charts: each one drawn from the rows of a table shown with it --------------------------------


def _byte_unit(values: list[int]) -> tuple[str, int]:
    largest = max(values, default=0)
    power = 0
    while power < len(_BYTE_UNITS) - 1 and largest >= 1024 ** (power + 1):
        power += 1
    return _BYTE_UNITS[power], 1024**power


def _series_key(column: spend.Column) -> str:
    """A series' key: a tier's value for the tier columns (its colour in every chart), else the column key."""
    return column.key.split(":", 1)[1]


def _money_chart(table: spend.Table, *, x_key: str, series: list[spend.Column], x_title: str, per: str) -> dict:
    return {
        "type": "bar",
        "stacked": True,
        "labels": [str(r[x_key]) if not isinstance(r[x_key], date) else f"{r[x_key]:%d %b}" for r in table.rows],
        "datasets": [
            {"label": c.label, "key": _series_key(c), "data": [float(r.get(c.key) or 0) for r in table.rows]}
            for c in series
        ],
        "x_title": x_title,
        "y_title": f"{table.currency} {per}",
        "unit": table.currency,
        "money": True,
    }


def monthly_chart(table: spend.Table, title: str) -> dict:
    series = [c for c in table.columns if c.key.startswith("s:")]
    chart = _money_chart(table, x_key="month", series=series, x_title="Month", per="per month")
    chart["title"] = title
    return chart


def daily_chart(table: spend.Table) -> dict:
    series = [c for c in table.columns if c.key.startswith("tier:")]
    chart = _money_chart(table, x_key="day", series=series, x_title="Day (UTC)", per="per day")
    chart["title"] = "Spend per day by tier"
    return chart


def bytes_by_tier_chart(table: spend.Table) -> dict:
    unit, factor = _byte_unit([r["stored"] for r in table.rows])
    return {
        "type": "bar",
        "stacked": False,
        "horizontal": True,
        "title": "Stored by tier",
        "labels": [r["tier"] for r in table.rows],
        "label_keys": [r["tier_value"] for r in table.rows],
        "datasets": [{"label": f"Stored ({unit})", "data": [round(r["stored"] / factor, 3) for r in table.rows]}],
        "x_title": f"Stored ({unit}, 1 {unit} = {factor:,} bytes)" if factor > 1 else "Stored (bytes)",
        "y_title": "Tier",
        "unit": unit,
        "money": False,
    }


def steps_chart(table: spend.Table) -> dict:
    series = [c for c in table.columns if c.key.startswith("tier:")]
    unit, factor = _byte_unit([r["stored"] for r in table.rows])
    return {
        "type": "bar",
        "stacked": True,
        "title": "Bytes by checkpoint and tier",
        "labels": [r["checkpoint"] for r in table.rows],
        "datasets": [
            {"label": c.label, "key": _series_key(c), "data": [round(r.get(c.key, 0) / factor, 3) for r in table.rows]}
            for c in series
        ],
        "x_title": "Checkpoint (step)",
        "y_title": f"Stored ({unit})",
        "unit": unit,
        "money": False,
    }


# --- pages ---------------------------------------------------------------------------------------


def _team_picker(team_ids, day: date) -> list[tuple[str, list[Team]]]:
    """The teams a person may narrow the spend page to, grouped by the cost center each had on ``day`` (the last
    day of the period shown: last month's page groups by last month's cost centers, as its tables do)."""
    teams = Team.objects.order_by("name").only("name", "cost_center")
    if team_ids is not None:
        teams = teams.filter(pk__in=team_ids)
    cost_centers = CostCenters.load()
    groups: dict[str, list[Team]] = {}
    for team in teams:
        groups.setdefault(cost_centers.on(team.pk, day, team.cost_center) or "No cost center", []).append(team)
    return sorted(groups.items())


def _reclaimed_this_month(team_ids):
    """What the deletions that ended this UTC month are proved to have freed (``actions.reclaim``)."""
    now = timezone.now().astimezone(UTC)
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    end = (start + timedelta(days=32)).replace(day=1)
    return reclaimed(start=start, end=end, team_ids=team_ids)


@login_required
def spend_overview(request):
    today = utc_today()
    period = _period(request, today)
    team_id = positive_int_param(request, "team")
    teams = spend_team_ids(request.user)  # a scoped person's spend is their teams' (access.scoping)
    team = Team.objects.filter(pk=team_id, **({} if teams is None else {"pk__in": teams})).first() if team_id else None
    basis = spend.basis_for(period, today=today, scope=spend.Scope(team_id=team.pk if team else None, team_ids=teams))
    summary = spend.summary(basis)
    tables = {
        "by_team": spend.by_team(basis),
        "by_cost_center": spend.by_cost_center(basis),
        "by_tier": spend.by_tier(basis),
        "by_location": spend.by_location(basis, limit=spend.TOP_LOCATIONS),
        "by_run": spend.by_run(basis, limit=spend.TOP_RUNS),
        "growing": spend.growing_runs(basis),
        "waste": spend.waste(basis),
        "daily": spend.daily(basis),
        "monthly_tier": spend.monthly_by_tier(basis),
        "monthly_team": spend.monthly_by_team(basis),
    }
    _with_export(request, *tables.values())
    charts = {
        "monthly_tier": monthly_chart(tables["monthly_tier"], "Spend per month by tier"),
        "monthly_team": monthly_chart(tables["monthly_team"], "Spend per month by team"),
        "daily": daily_chart(tables["daily"]),
        "bytes_tier": bytes_by_tier_chart(tables["by_tier"]),
    }
    return render(
        request,
        "spend/overview.html",
        {
            "basis": basis,
            "period": period,
            "summary": summary,
            "team": team,
            "charts": charts,
            "waste_total": tables["waste"].total,
            "month_value": f"{period.month_period.first:%Y-%m}",
            "nav_extra": f"team={team.pk}" if team else "",
            "picker": _team_picker(teams, period.last),
            "period_field": period.param.split("=", 1),
            "anything": spend.anything_recorded(),
            "pending_reclaim": pending_reclaim(team_ids=[team.pk] if team else teams),
            "reclaimed": _reclaimed_this_month([team.pk] if team else teams),
            **tables,
        },
    )


@login_required
def spend_runs(request):
    today = utc_today()
    period = _period(request, today)
    basis = spend.basis_for(period, today=today, scope=spend.Scope(team_ids=spend_team_ids(request.user)))
    table = spend.by_run(basis)
    _with_export(request, table)
    paginator = Paginator(table.rows, RUNS_PER_PAGE)
    page = paginator.get_page(request.GET.get("page"))
    table.rows = list(page.object_list)
    if paginator.num_pages > 1:
        table.total = None  # the total is of every page: in the export, and in the summary on the overview
    return render(
        request,
        "spend/runs.html",
        {"basis": basis, "period": period, "table": table, "page_obj": page, "month_value": f"{period.first:%Y-%m}"},
    )


@login_required
def spend_run(request, pk: int):
    try:
        run = spend.run_for_spend(pk)
        if not may_see_run(request.user, run):
            raise Run.DoesNotExist
    except Run.DoesNotExist:
        raise Http404("no such run") from None
    today = utc_today()
    period = _period(request, today)
    basis = spend.basis_for(period, today=today, scope=spend.Scope(run_id=run.pk))
    summary = spend.summary(basis)
    tables = {
        "by_tier": spend.by_tier(basis),
        "by_location": spend.by_location(basis),
        "monthly_tier": spend.monthly_by_tier(basis),
        "daily": spend.daily(basis),
        "steps": spend.run_steps(basis),
    }
    _with_export(request, *tables.values())
    charts = {
        "monthly_tier": monthly_chart(tables["monthly_tier"], f"Spend of {run.name} per month by tier"),
        "daily": daily_chart(tables["daily"]),
        "steps": steps_chart(tables["steps"]),
    }
    return render(
        request,
        "spend/run.html",
        {
            "run": run,
            "basis": basis,
            "period": period,
            "summary": summary,
            "charts": charts,
            "month_value": f"{period.month_period.first:%Y-%m}",
            **tables,
        },
    )


@login_required
def spend_report(request):
    """A month's spend for finance, on paper: totals, breakdowns, waste, trend, forecast, the prices used.

    A read like the page and the exports: any role, within the person's teams. Every figure comes from the same
    ``spend.report`` tables as the spend page, so the two cannot disagree.
    """
    today = utc_today()
    period = _period(request, today).month_period  # a report is of a whole month, even when asked for a day
    basis = spend.basis_for(period, today=today, scope=spend.Scope(team_ids=spend_team_ids(request.user)))
    context = {
        "basis": basis,
        "period": period,
        "month_value": f"{period.first:%Y-%m}",
        "generated_at": timezone.now(),
        "generated_by": request.user.get_username(),
        "anything": spend.anything_recorded(),
        "prices": _prices_of_month(period, today, basis.currency),
    }
    if basis.has_data:
        context.update(
            summary=spend.summary(basis),
            by_team=spend.by_team(basis),
            by_cost_center=spend.by_cost_center(basis),
            by_tier=spend.by_tier(basis),
            by_location=spend.by_location(basis),
            by_run=spend.by_run(basis, limit=spend.TOP_RUNS),
            waste=spend.waste(basis),
            monthly_team=spend.monthly_by_team(basis),
            monthly_tier=spend.monthly_by_tier(basis),
        )
    return render(request, "spend/report.html", context)


def _prices_of_month(period: spend.Period, today: date, currency: str) -> spend.Table:
    """The price points in force on some day of the month (up to today): those in force on its first day,
    and those that took effect later in it. Built from the price book's own table, not a second reading."""
    last = min(period.last, today)
    start = spend.Basis(period=spend.Period.day(period.first), today=period.first, as_of=None, currency="")
    table = spend.prices(start)
    table.basis = spend.Basis(period=period, today=last, as_of=None, currency=currency)
    rows = []
    for row in table.rows:
        if row["in_force"] == "yes":
            rows.append({**row, "in_force": "from the first day"})
        elif period.first < row["effective_from"] <= last:
            rows.append({**row, "in_force": f"from {row['effective_from']:%Y-%m-%d}"})
    table.rows = rows
    in_force = spend.Column("in_force", "In force in the month")
    table.columns = [
        in_force if c.key == "in_force" else c for c in table.columns if c.key not in ("effective_from", "created_by")
    ]
    table.title = "Price book in force"
    table.empty = "No price applied in this month: its spend is zero. Prices are added on the price book page."
    return table


# --- the price book ------------------------------------------------------------------------------


class PriceForm(forms.Form):
    """A new price point. Prices are never edited: a change is a new point from its day on."""

    SCOPES = [("kind", "Every location of a kind"), ("host", "One host's locations"), ("location", "One location")]

    scope = forms.ChoiceField(choices=SCOPES, initial="kind")
    kind = forms.ChoiceField(
        choices=[("", "Any kind"), *LocationKind.choices], required=False, help_text="For a price of every location."
    )
    host = forms.ModelChoiceField(queryset=Host.objects.order_by("name"), required=False)
    location = forms.ModelChoiceField(queryset=StorageLocation.objects.order_by("name"), required=False)
    tier = forms.ChoiceField(choices=Tier.choices)
    storage_class = forms.CharField(
        max_length=32, required=False, help_text="Empty: every storage class of the tier (e.g. ONEZONE_IA)."
    )
    basis = forms.ChoiceField(choices=PriceBasis.choices, initial=PriceBasis.GIB_MONTH)
    price = forms.DecimalField(min_value=Decimal(0), max_digits=20, decimal_places=10)
    capacity_tib = forms.DecimalField(
        label="Capacity of the host's drives (TiB)",
        required=False,
        min_value=Decimal("0.001"),
        max_digits=12,
        decimal_places=3,
        help_text="Only for a monthly cost of a host's drives.",
    )
    currency = forms.CharField(max_length=3, initial="USD")
    effective_from = forms.DateField(help_text="The first UTC day the price applies to (YYYY-MM-DD).")
    source = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2}), help_text="Where the price comes from: a list price, a contract."
    )

    def clean(self):
        data = super().clean()
        scope = data.get("scope")
        if scope == "host" and not data.get("host"):
            self.add_error("host", "Choose the host this price is for.")
        if scope == "location" and not data.get("location"):
            self.add_error("location", "Choose the location this price is for.")
        if data.get("basis") == PriceBasis.HOST_MONTH and not data.get("capacity_tib"):
            self.add_error("capacity_tib", "A monthly cost of drives needs their capacity.")
        return data


def _user_actor(request) -> Actor:
    user = request.user
    return Actor.person(user, EventSource.UI)


@login_required
def price_book(request):
    today = utc_today()
    can_edit = has_role(request.user, Role.FINANCE)
    if request.method == "POST":
        try:
            require_role(request.user, Role.FINANCE, doing="Adding to the price book", target_type="price_point")
        except PermissionRefused as exc:
            messages.error(request, f"You may read the price book but not add to it: {exc.message}.")
            return redirect("spend:prices")
        form = PriceForm(request.POST)
        if form.is_valid():
            data = form.cleaned_data
            capacity = data.get("capacity_tib")
            try:
                point = price_set(
                    tier=data["tier"],
                    price=data["price"],
                    basis=data["basis"],
                    kind=data["kind"] if data["scope"] == "kind" else "",
                    host=data["host"] if data["scope"] == "host" else None,
                    location=data["location"] if data["scope"] == "location" else None,
                    storage_class=data["storage_class"],
                    host_capacity_bytes=int(capacity * 1024**4) if capacity else None,
                    currency=data["currency"],
                    effective_from=data["effective_from"],
                    source=data["source"],
                    actor=_user_actor(request),
                    today=today,
                )
            except DomainError as exc:
                form.add_error(None, exc.message)
            else:
                messages.success(request, f"Price added: {point}.")
                return redirect("spend:prices")
    else:
        form = PriceForm(initial={"effective_from": today, "currency": spend.book_currency()})
    basis = spend.basis_for(spend.Period.day(today), today=today)
    table = spend.prices(basis)
    _with_export(request, table)
    return render(
        request,
        "spend/prices.html",
        {"table": table, "form": form if can_edit else None, "today": today, "currency": basis.currency},
    )
