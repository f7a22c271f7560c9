"""The price book: which price is in force for a location, tier and storage class on a day, and adding one.

Resolution (``PriceBook.rules``): of the points in force on a day (``effective_from`` on or before
it), the narrowest scope wins: the location's own, then its host's, then its kind's, then any
kind's; within a scope an exact storage class before "any class of the tier"; within the same
scope, tier and class the newest point. Days are UTC days.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, timedelta
from decimal import Decimal

from django.utils import timezone

from fleet.models import PricePoint, StorageLocation

GIB = 1024**3
TIB_IN_GIB = 1024
DEFAULT_CURRENCY = "USD"
PRICE_PLACES = Decimal("0.000000000001")  # PricePoint.price_per_gib_month has 12 decimal places
MAX_PRICE = Decimal("100000")  # per GiB-month: anything above is a typo (a unit mix-up), not a price
CURRENCY_PATTERN = re.compile(r"^[A-Z]{3}$")

# Scope ranks, narrowest first.
LOCATION, HOST, KIND, ANY_KIND = range(4)


def month_days(day: date) -> int:
    return calendar.monthrange(day.year, day.month)[1]


def utc_today() -> date:
    return timezone.now().astimezone(UTC).date()


@dataclass(frozen=True)
class Rule:
    """One price in force: for ``tier`` and ``storage_class`` ("" = any class), per GiB-month."""

    rank: int
    tier: str
    storage_class: str
    price: Decimal
    point_id: int


class PriceBook:
    """The price points up to some day, loaded once (one query) and resolved in memory.

    The book is small (a few points per tier, plus overrides), so a whole page or refresh resolves
    prices for every location and day it needs from one load.
    """

    def __init__(self, points: Iterable[PricePoint]) -> None:
        self.points = sorted(points, key=lambda p: (p.effective_from, p.pk))
        self.currency = self.points[-1].currency if self.points else DEFAULT_CURRENCY

    @classmethod
    def load(cls, *, until: date | None = None) -> PriceBook:
        points = PricePoint.objects.all()
        if until is not None:
            points = points.filter(effective_from__lte=until)
        return cls(points.only(*_POINT_FIELDS))

    @staticmethod
    def _rank(point: PricePoint, location: StorageLocation) -> int | None:
        if point.location_id is not None:
            return LOCATION if point.location_id == location.pk else None
        if point.host_id is not None:
            return HOST if location.host_id is not None and point.host_id == location.host_id else None
        if point.kind:
            return KIND if point.kind == location.kind else None
        return ANY_KIND

    def rules(self, location: StorageLocation, day: date) -> tuple[Rule, ...]:
        """The prices in force for ``location`` on ``day``, in the order they are tried (first match wins)."""
        newest: dict[tuple[int, str, str], PricePoint] = {}
        for point in self.points:
            if point.effective_from > day:
                break
            rank = self._rank(point, location)
            if rank is not None:
                newest[(rank, point.tier, point.storage_class)] = point  # later points replace earlier ones
        ordered = sorted(newest.items(), key=lambda item: (item[0][0], item[0][2] == "", item[0][1], item[0][2]))
        return tuple(Rule(rank, tier, sc, p.price_per_gib_month, p.pk) for (rank, tier, sc), p in ordered)

    def price(self, location: StorageLocation, tier: str, storage_class: str, day: date) -> Decimal | None:
        """The price per GiB-month of bytes on ``tier`` in ``storage_class`` at ``location`` on ``day``."""
        return price_of(self.rules(location, day), tier, storage_class)

    def changes(self, location: StorageLocation, start: date, end: date) -> list[date]:
        """The days in ``[start, end]`` on which the prices of ``location`` may change, ``start`` first."""
        days = {start}
        days.update(
            p.effective_from
            for p in self.points
            if start < p.effective_from <= end and self._rank(p, location) is not None
        )
        return sorted(days)

    def cost_of_days(
        self, location: StorageLocation, tier: str, storage_class: str, start: date, end: date
    ) -> Decimal | None:
        """What one GiB costs over the days ``[start, end]``: the sum of each day's price / its month's days.

        None when some day has no price. Prices are constant between their changes and month starts,
        so this takes a few steps, not one per day.
        """
        if end < start:
            return Decimal(0)
        breaks = set(self.changes(location, start, end))
        month = date(start.year, start.month, 1)
        while True:
            month = (month + timedelta(days=32)).replace(day=1)
            if month > end:
                break
            breaks.add(month)
        points = sorted(breaks)
        total = Decimal(0)
        for i, first in enumerate(points):
            last = points[i + 1] - timedelta(days=1) if i + 1 < len(points) else end
            price = self.price(location, tier, storage_class, first)
            if price is None:
                return None
            total += price * ((last - first).days + 1) / month_days(first)
        return total


_POINT_FIELDS = (
    "pk",
    "kind",
    "tier",
    "storage_class",
    "location_id",
    "host_id",
    "price_per_gib_month",
    "currency",
    "effective_from",
)


def price_of(rules: Iterable[Rule], tier: str, storage_class: str) -> Decimal | None:
    for rule in rules:
        if rule.tier == tier and rule.storage_class in ("", storage_class):
            return rule.price
    return None


def book_currency() -> str:
    """The currency of the price book (every point shares it); USD for an empty book."""
    newest = PricePoint.objects.order_by("-id").values_list("currency", flat=True).first()
    return newest or DEFAULT_CURRENCY


# --- adding a price -------------------------------------------------------------------------------
