"""Changing the price book: a new price point is validated against the book's own rules, recorded with its audit
event, and the days already rolled up are priced again, in one transaction. Reading prices (``PriceBook``) stays
in ``fleet.pricebook``, below every app that prices bytes."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from decimal import Decimal, InvalidOperation

from django.db import transaction

from audit.services import audit
from ckptfleet.errors import DomainError
from ckptfleet.rules import is_storage_class
from fleet.choices import LocationKind, Tier
from fleet.models import Host, PriceBasis, PricePoint, StorageLocation
from fleet.pricebook import (
    CURRENCY_PATTERN,
    DEFAULT_CURRENCY,
    GIB,
    MAX_PRICE,
    PRICE_PLACES,
    TIB_IN_GIB,
    utc_today,
)
from spend.usage import usage_reprice


def _decimal(value, what: str) -> Decimal:
    try:
        number = value if isinstance(value, Decimal) else Decimal(str(value).strip())
    except (InvalidOperation, ValueError):
        raise DomainError(f"{what} must be a number, e.g. 0.023") from None
    if not number.is_finite() or number < 0:
        raise DomainError(f"{what} must be zero or more")
    return number


@dataclass(frozen=True)
class PriceChange:
    """A checked, normalised request for a new price point (``price_validate``)."""

    tier: str
    kind: str
    storage_class: str
    location: StorageLocation | None
    host: Host | None
    basis: str
    entered: Decimal
    per_gib: Decimal
    host_capacity_bytes: int | None
    currency: str
    effective_from: date
    source: str

    @property
    def scope(self) -> dict:
        if self.location is not None:
            return {"location": self.location}
        if self.host is not None:
            return {"host": self.host}
        return {"kind": self.kind, "location__isnull": True, "host__isnull": True}


def price_validate(
    *,
    tier: str,
    price: Decimal | str,
    effective_from: date,
    basis: str = PriceBasis.GIB_MONTH,
    kind: str = "",
    storage_class: str = "",
    location: StorageLocation | None = None,
    host: Host | None = None,
    host_capacity_bytes: int | None = None,
    currency: str = DEFAULT_CURRENCY,
    source: str = "",
    today: date | None = None,
) -> PriceChange:
    """Check a new price and derive its price per GiB-month; raises DomainError saying what is wrong.

    Also checks it against the book (one currency; one point per scope, tier, class and day), so a
    form can show the error before anything is written; ``price_set`` checks again under its lock.
    """
    today = today or utc_today()
    if tier not in Tier.values:
        raise DomainError(f"unknown tier {tier!r}; use one of {', '.join(Tier.values)}")
    if kind and kind not in LocationKind.values:
        raise DomainError(f"unknown location kind {kind!r}; use one of {', '.join(LocationKind.values)}")
    storage_class = (storage_class or "").strip().upper()
    if storage_class and not is_storage_class(storage_class):
        raise DomainError(f"{storage_class!r} is not a storage class name (e.g. STANDARD_IA, GLACIER)")
    currency = (currency or "").strip().upper()
    if not CURRENCY_PATTERN.match(currency):
        raise DomainError("the currency must be a three-letter ISO 4217 code, e.g. USD or EUR")
    if location is not None and host is not None:
        raise DomainError("a price applies to one location or to one host's locations, not both")
    if location is not None:
        kind = location.kind
    if host is not None and kind not in ("", LocationKind.NVME, LocationKind.PFS):
        raise DomainError("a host price applies to its NVMe or parallel-FS locations, not to buckets")
    if host is not None:
        kind = ""
    first_of_month = today.replace(day=1)
    if effective_from < first_of_month:
        raise DomainError(
            f"a price cannot take effect before {first_of_month:%Y-%m-%d}: spend of earlier months is closed "
            "and never changes"
        )
    entered = _decimal(price, "the price")
    if basis == PriceBasis.GIB_MONTH:
        per_gib = entered
        host_capacity_bytes = None
    elif basis == PriceBasis.TIB_MONTH:
        per_gib = entered / TIB_IN_GIB
        host_capacity_bytes = None
    elif basis == PriceBasis.HOST_MONTH:
        if host is None:
            raise DomainError("a monthly cost of drives needs the host it is for")
        if not host_capacity_bytes or host_capacity_bytes <= 0:
            raise DomainError("a monthly cost of drives needs their capacity, to derive a price per GiB")
        per_gib = entered * GIB / host_capacity_bytes
    else:
        raise DomainError(f"unknown price basis {basis!r}; use one of {', '.join(PriceBasis.values)}")
    per_gib = per_gib.quantize(PRICE_PLACES)
    if per_gib > MAX_PRICE:
        raise DomainError(f"{per_gib} {currency} per GiB-month is not a storage price: check the unit")
    change = PriceChange(
        tier=tier,
        kind=kind,
        storage_class=storage_class,
        location=location,
        host=host,
        basis=basis,
        entered=entered,
        per_gib=per_gib,
        host_capacity_bytes=host_capacity_bytes,
        currency=currency,
        effective_from=effective_from,
        source=(source or "").strip(),
    )
    _check_against_book(change)
    return change


def _check_against_book(change: PriceChange) -> None:
    existing = PricePoint.objects.order_by("-id").values_list("currency", flat=True).first()
    if existing and existing != change.currency:
        raise DomainError(
            f"the price book is in {existing}; enter this price in {existing} as well, so that spend adds up"
        )
    same = PricePoint.objects.filter(
        tier=change.tier, storage_class=change.storage_class, effective_from=change.effective_from, **change.scope
    )
    if same.exists():
        raise DomainError(
            "a price for this scope, tier and storage class already takes effect that day; prices are never "
            "edited, so choose another day for the change",
            code="exists",
        )


def price_set(
    *,
    tier: str,
    price: Decimal | str,
    effective_from: date,
    actor,
    basis: str = PriceBasis.GIB_MONTH,
    kind: str = "",
    storage_class: str = "",
    location: StorageLocation | None = None,
    host: Host | None = None,
    host_capacity_bytes: int | None = None,
    currency: str = DEFAULT_CURRENCY,
    source: str = "",
    today: date | None = None,
) -> PricePoint:
    """Add a price point, and price again the usage rows it changes; one transaction, one audit event.

    Takes the arguments of ``price_validate``: ``price`` is in ``basis``: per GiB-month, per
    TiB-month, or (for a host) the monthly cost of its drives, which with ``host_capacity_bytes``
    gives the price per GiB-month. A point may take effect today, later, or earlier this month (a
    late-entered change of this month); never in an earlier month, whose spend is closed. Points
    are never edited: a change is a new point.
    """
    change = price_validate(
        tier=tier,
        price=price,
        effective_from=effective_from,
        basis=basis,
        kind=kind,
        storage_class=storage_class,
        location=location,
        host=host,
        host_capacity_bytes=host_capacity_bytes,
        currency=currency,
        source=source,
        today=today,
    )
    with transaction.atomic():
        # The locations whose usage this price changes are locked first, in the order an ingest
        # locks one: a refresh running now either finishes before this point exists (and is priced
        # again below) or starts after it commits (and sees it).
        affected = StorageLocation.objects.order_by("pk")
        if change.location is not None:
            affected = affected.filter(pk=change.location.pk)
        elif change.host is not None:
            affected = affected.filter(host=change.host)
        elif change.kind:
            affected = affected.filter(kind=change.kind)
        affected_ids = list(affected.locked().values_list("pk", flat=True))
        _check_against_book(change)
        point = PricePoint.objects.create(
            kind=change.kind,
            tier=change.tier,
            storage_class=change.storage_class,
            location=change.location,
            host=change.host,
            price_per_gib_month=change.per_gib,
            entered_price=change.entered,
            basis=change.basis,
            host_capacity_bytes=change.host_capacity_bytes,
            currency=change.currency,
            effective_from=change.effective_from,
            source=change.source,
            created_by=actor.label,
        )
        repriced = usage_reprice(location_ids=affected_ids, since=change.effective_from)
        audit(
            actor,
            "price.set",
            target_type="price_point",
            target_id=point.pk,
            target_label=str(point),
            reason=point.source,
            after={
                "scope": point.scope_label,
                "kind": change.kind,
                "tier": change.tier,
                "storage_class": change.storage_class,
                "price_per_gib_month": str(change.per_gib),
                "entered_price": str(change.entered),
                "basis": change.basis,
                "host_capacity_bytes": change.host_capacity_bytes,
                "currency": change.currency,
                "effective_from": change.effective_from.isoformat(),
                "usage_rows_repriced": repriced,
            },
        )
    return point
