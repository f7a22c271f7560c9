"""The early-deletion charge of removing bucket copies today, per copy, from their objects' own write times.

One grouped query over the copies' present objects in a class with a minimum storage duration
(``fleet.early_deletion``). The deletion preview (``actions.services``) sums it over the copies a deletion
removes; a move's plan (``promotion.moves.plan``) prices each source copy it would leave. Both count an object's
age in UTC calendar days (``fleet.early_deletion.days_stored``), as the retention simulator does.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from django.db.models import Count, Sum
from django.db.models.functions import TruncDate

from catalog.models import CheckpointCopy, ShardFile
from fleet.choices import LocationKind
from fleet.early_deletion import EarlyDeletion, days_stored, min_storage_days
from fleet.pricebook import PriceBook, utc_today


def early_deletion_by_copy(
    copies: list[CheckpointCopy],
    *,
    today: date | None = None,
    book: PriceBook | None = None,
    left_in_place: dict[int, frozenset[str]] | None = None,
) -> dict[int, EarlyDeletion]:
    """{copy id: what removing its objects today is billed for their classes' minimum storage durations}.

    Only bucket copies can be billed; a copy with no young object is absent. ``copies`` need their location loaded.
    ``left_in_place`` ({copy id: storage classes}) names objects the removal leaves where they are: not billed.
    """
    in_buckets = {c.pk: c for c in copies if c.location.kind == LocationKind.BUCKET}
    minimums = min_storage_days()
    classes = sorted(name for name, days in minimums.items() if days > 0)
    if not in_buckets or not classes:
        return {}
    today = today or utc_today()
    since = datetime.combine(today - timedelta(days=max(minimums.values())), datetime.min.time(), tzinfo=UTC)
    rows = (
        ShardFile.objects.filter(
            copy_id__in=list(in_buckets), gone_at__isnull=True, storage_class__in=classes, mtime__gte=since
        )
        .annotate(day=TruncDate("mtime", tzinfo=UTC))
        .values("copy_id", "tier", "storage_class", "day")
        .annotate(n_objects=Count("pk"), size=Sum("size"))
        .order_by()
    )
    book = book or PriceBook.load(until=today)
    result: dict[int, EarlyDeletion] = {}
    left_in_place = left_in_place or {}
    for row in rows:
        if row["storage_class"] in left_in_place.get(row["copy_id"], ()):
            continue
        location = in_buckets[row["copy_id"]].location
        result.setdefault(row["copy_id"], EarlyDeletion()).add(
            nbytes=row["size"] or 0,
            objects=row["n_objects"],
            price_per_gib_month=book.price(location, row["tier"] or location.tier, row["storage_class"], today),
            storage_class=row["storage_class"],
            days_stored=days_stored(row["day"], today),
            minimums=minimums,
        )
    return {copy_id: charge for copy_id, charge in result.items() if charge.objects or charge.unpriced_objects}
