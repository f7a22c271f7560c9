"""Minimum storage durations and the early-deletion charge: one rule for every page that removes or moves bytes.

An object in a storage class with a minimum storage duration that is deleted, overwritten or moved to
another class before that many days is billed for the days left, at its class's price, pro-rated per
day of a 30-day month. The deletion preview (``actions.services``) and a move's plan (``promotion.moves``),
through ``catalog.early_deletion``, the retention simulator (``retention.selectors``) and the tiering what-if
(``retention.tiering``) all price it with ``early_deletion_charge`` and count ages with ``days_stored``, so they
cannot disagree. It sits in fleet, the floor all of them import.

Sources of the defaults (list terms, as published by the providers): the S3 User Guide, "Comparing the
Amazon S3 storage classes" (minimum storage duration: Standard-IA and One Zone-IA 30 days, Glacier
Instant Retrieval 90, Glacier Flexible Retrieval 90, Glacier Deep Archive 180; "objects deleted before
... are charged a prorated charge for the remaining days"); Google Cloud Storage "Storage classes"
(Nearline 30, Coldline 90, Archive 365 days); Azure Blob "Access tiers" (Cool 30, Cold 90 days).
Override in settings with ``RETENTION_MIN_STORAGE_DAYS`` (a dict by storage class, merged over these).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from decimal import Decimal

from django.conf import settings

from fleet.pricebook import GIB

DAYS_PER_BILLING_MONTH = 30  # how AWS pro-rates a minimum storage duration

MIN_STORAGE_DAYS: dict[str, int] = {
    "STANDARD": 0,
    "INTELLIGENT_TIERING": 0,
    "STANDARD_IA": 30,
    "ONEZONE_IA": 30,
    "GLACIER_IR": 90,
    "GLACIER": 90,
    "DEEP_ARCHIVE": 180,
    "NEARLINE": 30,
    "COLDLINE": 90,
    "ARCHIVE": 365,
    "COOL": 30,
    "COLD": 90,
}


# USD per 1,000 PUT, COPY or lifecycle-transition requests into the class (AWS S3 pricing, "Requests & data
# retrievals"; Google Cloud Storage's class A operations for its classes), for the one-off charges of a move.
# Override with ``RETENTION_REQUEST_PRICE_PER_1000`` (a dict by storage class, merged over these).
REQUEST_PRICE_PER_1000: dict[str, Decimal] = {
    "STANDARD": Decimal("0.005"),
    "INTELLIGENT_TIERING": Decimal("0.005"),
    "STANDARD_IA": Decimal("0.01"),
    "ONEZONE_IA": Decimal("0.01"),
    "GLACIER_IR": Decimal("0.02"),
    "GLACIER": Decimal("0.03"),
    "DEEP_ARCHIVE": Decimal("0.05"),
    "NEARLINE": Decimal("0.01"),
    "COLDLINE": Decimal("0.02"),
    "ARCHIVE": Decimal("0.05"),
}


def request_prices() -> dict[str, Decimal]:
    """The price of 1,000 requests into each storage class: the defaults with the settings' overrides."""
    overrides = settings.RETENTION_REQUEST_PRICE_PER_1000
    return {**REQUEST_PRICE_PER_1000, **{k: Decimal(str(v)) for k, v in overrides.items()}}


def min_storage_days() -> dict[str, int]:
    """The minimum storage duration of each storage class, in days: the defaults with the settings' overrides."""
    return {**MIN_STORAGE_DAYS, **settings.RETENTION_MIN_STORAGE_DAYS}


def days_stored(since: datetime | date | None, today: date) -> int:
    """Whole UTC calendar days from ``since`` (a write time, or its UTC day) to ``today``; 0 if unknown or later.

    Every page counts an object's age this way, so a preview, a move's plan and the retention simulator priced on
    the same day agree to the cent whatever the hour.
    """
    if since is None:
        return 0
    day = since.astimezone(UTC).date() if isinstance(since, datetime) else since
    return max(0, (today - day).days)


def days_left(storage_class: str, days_stored: int, *, minimums: dict[str, int] | None = None) -> int:
    """How many days of ``storage_class``'s minimum duration are still to run after ``days_stored``; 0 if none."""
    minimums = minimums if minimums is not None else min_storage_days()
    return max(0, minimums.get((storage_class or "STANDARD").upper(), 0) - max(days_stored, 0))


def early_deletion_charge(
    *,
    nbytes: int,
    price_per_gib_month: Decimal,
    storage_class: str,
    days_stored: int,
    minimums: dict[str, int] | None = None,
) -> Decimal:
    """What removing ``nbytes`` stored ``days_stored`` days in ``storage_class`` now is billed for the days left.

    GiB x the class's price per GiB-month x days left / 30. Zero when the minimum has run (or the class has none).
    """
    left = days_left(storage_class, days_stored, minimums=minimums)
    if not left or not nbytes:
        return Decimal(0)
    return Decimal(nbytes) / GIB * price_per_gib_month * left / DAYS_PER_BILLING_MONTH


@dataclass
class EarlyDeletion:
    """Early-deletion charges summed: money, and the objects and bytes younger than their class's minimum.

    ``unpriced_objects`` are young objects whose class has no price in the book: their charge is unknown and
    not in ``charge``.
    """

    charge: Decimal = field(default_factory=Decimal)
    objects: int = 0
    bytes: int = 0
    unpriced_objects: int = 0

    def add(
        self,
        *,
        nbytes: int,
        objects: int,
        price_per_gib_month: Decimal | None,
        storage_class: str,
        days_stored: int,
        minimums: dict[str, int] | None = None,
    ) -> None:
        """Count ``objects`` holding ``nbytes`` stored ``days_stored`` days in ``storage_class``, if they are young."""
        if not days_left(storage_class, days_stored, minimums=minimums):
            return
        if price_per_gib_month is None:
            self.unpriced_objects += objects
            return
        self.objects += objects
        self.bytes += nbytes
        self.charge += early_deletion_charge(
            nbytes=nbytes,
            price_per_gib_month=price_per_gib_month,
            storage_class=storage_class,
            days_stored=days_stored,
            minimums=minimums,
        )

    def __iadd__(self, other: EarlyDeletion) -> EarlyDeletion:
        self.charge += other.charge
        self.objects += other.objects
        self.bytes += other.bytes
        self.unpriced_objects += other.unpriced_objects
        return self

    @property
    def rounded(self) -> Decimal:
        return self.charge.quantize(Decimal("0.01"))

    def describe(self, currency: str) -> str:
        """The charge in words, "2.40 USD (3 objects younger than their class's minimum)"; plainly 0.00 when none."""
        noun = "object" if self.objects == 1 else "objects"
        text = f"{self.rounded} {currency} ({self.objects:,} {noun} younger than their class's minimum)"
        if self.unpriced_objects:
            text += f"; {self.unpriced_objects:,} more have no price, so their charge is unknown"
        return text
