"""The tiering what-if: move checkpoints of ended runs (finished, failed or abandoned; or a team's, or a run's)
off a tier to a storage class.

It answers, before anything changes: what a month costs now and after the move, the monthly
saving, the one-off charges, and how many months the saving takes to pay them back.

One-off charges modelled:

- **early deletion** of the source: bytes leaving a storage class before its minimum storage
  duration are billed for the rest of it (``fleet.early_deletion``, shared with the deletion preview and
  the retention simulator), pro-rated per day of a 30-day
  month, at the source's price. How long bytes have been stored is counted from the copy's newest
  file time, so the charge is an upper bound;
- **requests**: one PUT (for bytes leaving a host or file system) or lifecycle transition (between
  storage classes) per file, at ``fleet.early_deletion.REQUEST_PRICE_PER_1000`` of the destination class.

Also shown, not charged: the **minimum commitment** at the destination, what the moved bytes cost
for its minimum storage duration however soon they are deleted.

Not modelled (said on the page): data transfer (uploads into a bucket are free on AWS; a transfer
between regions or clouds is not), the 40 KiB of index and metadata that S3 Glacier Flexible
Retrieval and Deep Archive bill per object, multipart part requests, and retrieval fees for
bytes restored later.

Held checkpoints are never demoted (PRODUCT.md promise 1), nor disputed ones (promise 12: copies that
disagree with nothing independent to say which is right): they are left out, and counted.

Sources of the defaults (list prices, us-east-1, as published by the providers):
AWS S3 pricing, https://aws.amazon.com/s3/pricing/ ("Requests & data retrievals": PUT, COPY, POST
and lifecycle transition requests per 1,000) and the S3 User Guide, "Comparing the Amazon S3
storage classes" (minimum storage duration: Standard-IA and One Zone-IA 30 days, Glacier Instant
Retrieval 90, Glacier Flexible Retrieval 90, Glacier Deep Archive 180); Google Cloud Storage
"Storage classes" (Nearline 30, Coldline 90, Archive 365 days); Azure Blob "Access tiers" (Cool
30, Cold 90 days). Override either table in settings: ``RETENTION_MIN_STORAGE_DAYS`` and
``RETENTION_REQUEST_PRICE_PER_1000`` (dicts by storage class, merged over the defaults).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date
from decimal import ROUND_HALF_UP, Decimal

from catalog.choices import ENDED_STATUSES
from catalog.models import Run
from ckptfleet.errors import DomainError
from fleet.choices import DEFAULT_STORAGE_CLASS_TIERS, LocationKind, Tier
from fleet.early_deletion import DAYS_PER_BILLING_MONTH, early_deletion_charge, min_storage_days, request_prices
from fleet.models import StorageLocation
from fleet.pricebook import GIB, utc_today
from retention.selectors import Pricer, Scope, load_facts

TARGET_CLASSES = ("STANDARD", "STANDARD_IA", "ONEZONE_IA", "GLACIER_IR", "GLACIER", "DEEP_ARCHIVE")


@dataclass(frozen=True)
class Move:
    """What to move: bytes on ``from_tier`` (optionally only one storage class) to ``to_class``."""

    to_class: str = "GLACIER_IR"
    from_tier: str = Tier.NVME
    from_class: str = ""
    finished_only: bool = True
    to_location_id: int | None = None  # a bucket whose prices and class mapping apply; else any bucket's
    scope: Scope = field(default_factory=Scope)


@dataclass
class Sums:
    bytes: int = 0
    files: int = 0
    current: Decimal = field(default_factory=Decimal)
    after: Decimal = field(default_factory=Decimal)
    early_deletion: Decimal = field(default_factory=Decimal)
    requests: Decimal = field(default_factory=Decimal)
    commitment: Decimal = field(default_factory=Decimal)
    unpriced: int = 0
    held_bytes: int = 0
    held_checkpoints: int = 0
    disputed_bytes: int = 0
    disputed_checkpoints: int = 0
    checkpoints: int = 0

    @property
    def saving(self) -> Decimal:
        return self.current - self.after

    @property
    def one_off(self) -> Decimal:
        return self.early_deletion + self.requests

    @property
    def break_even_months(self) -> Decimal | None:
        """Months of saving that pay back the one-off charges; None when the move saves nothing."""
        if self.saving <= 0:
            return None
        return (self.one_off / self.saving).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)

    def __iadd__(self, other: Sums) -> Sums:
        for name in (
            "bytes",
            "files",
            "current",
            "after",
            "early_deletion",
            "requests",
            "commitment",
            "unpriced",
            "held_bytes",
            "held_checkpoints",
            "disputed_bytes",
            "disputed_checkpoints",
            "checkpoints",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        return self


@dataclass
class RunMove:
    run: Run
    sums: Sums


@dataclass
class WhatIf:
    move: Move
    day: date
    currency: str
    to_tier: str
    to_min_days: int
    request_price: Decimal
    runs: list[RunMove]
    total: Sums

    @property
    def assumptions(self) -> list[str]:
        return [
            f"Prices are the price book's in force on {self.day:%Y-%m-%d}; a month is a month at those prices.",
            f"Each file is one object: one request at {self.request_price} USD per 1,000 to put it into "
            f"{self.move.to_class}.",
            f"Early deletion: bytes leaving a storage class before its minimum duration are billed for the rest, "
            f"per day of a {DAYS_PER_BILLING_MONTH}-day month; days stored are counted from the copy's newest "
            "file, so this is an upper bound.",
            f"{self.move.to_class} has a minimum storage duration of {self.to_min_days} days: moved bytes deleted "
            "sooner are billed for the rest (the minimum commitment column).",
            "Not included: data transfer between regions or clouds, the per-object index overhead of Glacier "
            "Flexible Retrieval and Deep Archive (40 KiB each), multipart part requests, and restore fees.",
            "Held checkpoints are never demoted, nor disputed ones (copies that disagree with nothing "
            "independent to say which is right), so they are left out of the move.",
        ]


def _check(move: Move) -> tuple[StorageLocation, str]:
    to_class = move.to_class.strip().upper()
    if move.from_tier not in Tier.values:
        raise DomainError(f"unknown tier {move.from_tier!r}; use one of {', '.join(Tier.values)}")
    destination = None
    if move.to_location_id is not None:
        destination = (
            StorageLocation.objects.filter(pk=move.to_location_id, kind=LocationKind.BUCKET)
            .select_related("bucket")
            .first()
        )
        if destination is None:
            raise DomainError("the destination must be a bucket location")
    known = set(DEFAULT_STORAGE_CLASS_TIERS) | (set(destination.bucket.storage_class_tiers) if destination else set())
    if to_class not in known:
        raise DomainError(f"unknown storage class {to_class!r}; use one of {', '.join(TARGET_CLASSES)}")
    to_tier = destination.bucket.tier_of(to_class) if destination else DEFAULT_STORAGE_CLASS_TIERS[to_class]
    if to_tier == move.from_tier and (move.from_class or "").upper() in ("", to_class):
        raise DomainError(f"the bytes are already on {Tier(to_tier).label}: choose a colder class")
    if destination is None:
        # Any bucket's prices: the book's prices for buckets in general (no location, no host).
        destination = StorageLocation(kind=LocationKind.BUCKET, tier=to_tier, name="any bucket")
    return destination, to_tier


def tiering_whatif(*, move: Move, day: date | None = None, pricer: Pricer | None = None) -> WhatIf:
    """What moving the bytes ``move`` selects would save and cost; changes nothing."""
    day = day or utc_today()
    destination, to_tier = _check(move)
    to_class = move.to_class.strip().upper()
    from_class = (move.from_class or "").strip().upper()
    pricer = pricer or Pricer(day=day)
    min_days = min_storage_days()
    request_price = request_prices().get(to_class, Decimal(0))
    to_price = pricer.price(destination, to_tier, to_class)
    if to_price is None:
        raise DomainError(f"the price book has no price for {to_class} ({Tier(to_tier).label}); add one first")
    runs = move.scope.runs().select_related("team").order_by("team__name", "name", "pk")
    if move.finished_only:
        runs = runs.filter(status__in=ENDED_STATUSES)  # finished, failed, abandoned or deleted
    runs = list(runs)
    facts, _ = load_facts([r.pk for r in runs], day=day)
    result = WhatIf(move, day, pricer.currency, to_tier, min_days.get(to_class, 0), request_price, [], Sums())
    for run in runs:
        sums = Sums()
        for checkpoint in facts.get(run.pk, []):
            chosen = [
                c
                for c in checkpoint.copies
                if c.tier == move.from_tier and (not from_class or c.storage_class == from_class)
            ]
            if not chosen:
                continue
            if checkpoint.held:
                sums.held_checkpoints += 1
                sums.held_bytes += sum(c.bytes for c in chosen)
                continue
            if checkpoint.disputed:
                sums.disputed_checkpoints += 1
                sums.disputed_bytes += sum(c.bytes for c in chosen)
                continue
            sums.checkpoints += 1
            for copy in chosen:
                source = pricer.location(copy.location_id)
                price = pricer.price(source, copy.tier, copy.storage_class)
                sums.bytes += copy.bytes
                sums.files += copy.files
                gib = Decimal(copy.bytes) / GIB
                sums.requests += Decimal(copy.files) * request_price / 1000
                sums.commitment += gib * to_price * min_days.get(to_class, 0) / DAYS_PER_BILLING_MONTH
                if price is None:
                    sums.unpriced += copy.bytes
                    continue
                sums.current += gib * price
                sums.after += gib * to_price
                if source is not None and source.kind == LocationKind.BUCKET:
                    sums.early_deletion += early_deletion_charge(
                        nbytes=copy.bytes,
                        price_per_gib_month=price,
                        storage_class=copy.storage_class,
                        days_stored=copy.days_stored,
                        minimums=min_days,
                    )
        if sums.bytes or sums.held_bytes or sums.disputed_bytes:
            result.runs.append(RunMove(run, sums))
            result.total += sums
    return result
