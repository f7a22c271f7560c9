"""Estimated usage for the days before a location's first inventory (``manage.py usage_backfill``).

A new install knows what is stored today and nothing of the weeks before, so last month's spend reads
empty although the files were there. The files say when they were written: a file present now is
counted from the UTC day of its modification time (its mtime on a host, LastModified in a bucket). The
estimate is a floor: files deleted before the first inventory are not known and not counted, a file
rewritten in place counts from its last write, and every file has the tier, storage class and state it
has now. So the rows are marked ``estimated`` (``UsageDaily.estimated``, summed per month as
``UsageMonthly.estimated_days``) and the spend pages say which days are estimated from file times.

The rules of ``spend.usage`` hold: rows are priced at each day's own price, the months they touch are
rolled up again in the same transaction, and measured history wins. Only days before the location's
first measured (or carried) day are written; a day that has such rows is never touched, and running it
again replaces only its own earlier estimates. Locations that never had an inventory applied are left
out: nothing is known of them.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, date, timedelta
from decimal import ROUND_HALF_EVEN, Decimal

from django.db import transaction
from django.db.models import Case, CharField, Count, F, Min, Sum, Value, When
from django.db.models.functions import Coalesce, NullIf, TruncDate

from access.roles import Role, require_role
from audit.actor import Actor, ActorKind
from audit.services import audit as audit_event
from catalog.models import Run, ShardFile
from ckptfleet.errors import DomainError
from fleet.models import StorageLocation
from fleet.pricebook import GIB, PriceBook, month_days, price_of, utc_today
from spend.models import UsageCursor, UsageDaily, UsageState
from spend.usage import NANOS, rollup_months

# How far back an estimate may reach: a year and a month, enough for "last year's same month".
MAX_BACKFILL_DAYS = 400


@dataclass(frozen=True)
class BackfillResult:
    """What ``usage_backfill`` wrote: per location the days estimated, and the rows in all."""

    since: date
    locations: dict[str, int]  # location name -> days estimated (0: its history already reaches ``since``)
    rows: int

    @property
    def days(self) -> int:
        return sum(self.locations.values())


def usage_backfill(*, since: date, actor: Actor, today: date | None = None) -> BackfillResult:
    """Estimate each location's usage from ``since`` to the day before its first measured day (module docstring).

    A person needs the finance role. Refuses a ``since`` in the future or more than ``MAX_BACKFILL_DAYS``
    back, changing nothing. One transaction for every location, under their usage cursors' row locks (the
    lock an ingest takes), with one audit event.
    """
    today = today or utc_today()
    if not isinstance(since, date):
        raise DomainError("since must be a date (YYYY-MM-DD)")
    if since >= today:
        raise DomainError(f"since must be a day before today ({today:%Y-%m-%d}): today is measured, not estimated")
    if (today - since).days > MAX_BACKFILL_DAYS:
        raise DomainError(f"since may be at most {MAX_BACKFILL_DAYS} days back (from {today:%Y-%m-%d})")
    if actor.kind == ActorKind.USER:
        if actor.user is None:
            raise DomainError("a backfill by a person needs the signed-in user", code="not_authenticated")
        require_role(actor.user, Role.FINANCE, doing="Estimating past usage", source=actor.source)
    written: dict[str, int] = {}
    rows = 0
    with transaction.atomic():
        cursors = list(UsageCursor.objects.select_for_update(of=("self",)).order_by("pk"))
        locations = StorageLocation.objects.in_bulk([c.location_id for c in cursors])
        measured = dict(
            UsageDaily.objects.filter(estimated=False, location_id__in=list(locations))
            .values("location_id")
            .annotate(first=Min("day"))
            .values_list("location_id", "first")
            .order_by()
        )
        book = PriceBook.load(until=today)
        for cursor in cursors:
            location = locations[cursor.location_id]
            # A location whose inventories were all empty has no rows: its cursor's day is where it begins.
            first_measured = measured.get(location.pk, cursor.refreshed_day)
            last = min(first_measured, today) - timedelta(days=1)
            if last < since:
                written[location.name] = 0
                continue
            UsageDaily.objects.filter(location_id=location.pk, estimated=True, day__gte=since, day__lte=last).delete()
            new = _estimate(location, since, last, book)
            UsageDaily.objects.bulk_create(new, batch_size=2000)
            rollup_months([location.pk], since, last)
            written[location.name] = (last - since).days + 1
            rows += len(new)
        audit_event(
            actor,
            "usage.backfill",
            target_type="usage",
            target_label=f"since {since:%Y-%m-%d}",
            reason="usage before the first inventory, estimated from file modification times",
            after={"since": since.isoformat(), "days": sum(written.values()), "rows": rows, "locations": written},
        )
    return BackfillResult(since=since, locations=written, rows=rows)


def _estimate(location: StorageLocation, since: date, last: date, book: PriceBook) -> list[UsageDaily]:
    """The estimated rows of ``location`` for each day from ``since`` to ``last``: the present files, each
    from its mtime's UTC day, grouped as ``spend.usage`` groups a refresh (run, tier, class, state)."""
    state = Case(
        When(copy__isnull=True, then=Value(UsageState.UNCLAIMED)),
        When(copy__temporary=True, then=Value(UsageState.TEMPORARY)),
        default=F("copy__state"),
        output_field=CharField(),
    )
    grouped = (
        ShardFile.objects.filter(location_id=location.pk, gone_at__isnull=True)
        .annotate(
            since_day=TruncDate("mtime", tzinfo=UTC),
            eff_tier=Coalesce(NullIf("tier", Value("")), Value(location.tier), output_field=CharField()),
            eff_state=state,
        )
        .values("copy__checkpoint__run_id", "eff_tier", "storage_class", "eff_state", "since_day")
        .annotate(size=Sum("size"), count=Count("pk"))
        .order_by()
    )
    # (run, tier, class, state) -> {first day: (bytes, files)}; a file older than ``since`` counts from it.
    arrivals: dict[tuple, dict[date, list[int]]] = defaultdict(dict)
    for g in grouped:
        key = (g["copy__checkpoint__run_id"], g["eff_tier"], g["storage_class"], g["eff_state"])
        day = max(g["since_day"], since)
        if day > last:
            continue
        sums = arrivals[key].setdefault(day, [0, 0])
        sums[0] += int(g["size"])
        sums[1] += int(g["count"])
    runs = Run.objects.in_bulk({key[0] for key in arrivals if key[0] is not None})
    out: list[UsageDaily] = []
    for key, by_day in arrivals.items():
        run_id, tier, storage_class, usage_state = key
        run = runs.get(run_id) if run_id is not None else None
        held = [0, 0]
        day = min(by_day)
        while day <= last:
            if day in by_day:
                held[0] += by_day[day][0]
                held[1] += by_day[day][1]
            price = price_of(book.rules(location, day), tier, storage_class)
            out.append(
                UsageDaily(
                    day=day,
                    location_id=location.pk,
                    team_id=run.team_id if run is not None else None,
                    run_id=run_id,
                    run_status=run.status if run is not None else "",
                    tier=tier,
                    storage_class=storage_class,
                    state=usage_state,
                    bytes=held[0],
                    files=held[1],
                    cost_nanos=_cost_nanos(held[0], price, day),
                    estimated=True,
                )
            )
            day += timedelta(days=1)
    return out


def _cost_nanos(size: int, price: Decimal | None, day: date) -> int | None:
    """The cost of ``size`` bytes on ``day`` in billionths, as ``spend.usage.cost_sql`` prices a row."""
    if price is None:
        return None
    rate = price * NANOS / (GIB * month_days(day))
    return int((Decimal(size) * rate).quantize(Decimal(1), rounding=ROUND_HALF_EVEN))


__all__ = ["MAX_BACKFILL_DAYS", "BackfillResult", "usage_backfill"]
