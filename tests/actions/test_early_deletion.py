"""The early-deletion charge in the deletion preview (page and API): objects younger than their class's minimum.

A bucket copy of three 1 GiB GLACIER objects written 10 days ago: Glacier Flexible Retrieval's minimum is 90 days,
so each is billed 80 more days at its price (0.30 USD per GiB-month here): 3 x 0.30 x 80 / 30 = 2.40 USD.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from actions import services
from catalog.models import CheckpointCopy, ShardFile
from fleet.early_deletion import EarlyDeletion, days_stored, early_deletion_charge
from fleet.models import PricePoint, StorageLocation
from tests.actions.conftest import add_copy
from tests.factories import CheckpointFactory, StorageLocationFactory

GIB = 1024**3


def glacier_copy(fleet, *, ages: tuple[int, ...] = (10, 10, 10), storage_class: str = "GLACIER") -> CheckpointCopy:
    """Step 300 of the fleet also in a bucket: one 1 GiB object per age (days since written) in ``storage_class``."""
    bucket: StorageLocation = StorageLocationFactory(bucket=True)
    PricePoint.objects.create(
        location=bucket,
        kind="bucket",
        tier="archive",
        storage_class=storage_class,
        price_per_gib_month=Decimal("0.30"),
        entered_price=Decimal("0.30"),
        effective_from=date(2020, 1, 1),
    )
    copy = add_copy(fleet.checkpoints[300], bucket, files=len(ages), size=GIB)
    # Ages count in UTC calendar days (the charge's rule): written at noon ``age`` days ago, whatever the hour now.
    today = timezone.now().astimezone(UTC).date()
    for f, age in zip(ShardFile.objects.filter(copy=copy).order_by("path"), ages, strict=True):
        written = datetime.combine(today - timedelta(days=age), time(12), tzinfo=UTC)
        f.storage_class, f.tier, f.mtime = storage_class, "archive", written
        f.save(update_fields=["storage_class", "tier", "mtime"])
    return copy


def test_glacier_objects_ten_days_old_are_charged_the_80_days_left(fleet):
    copy = glacier_copy(fleet)
    p = services.preview(checkpoint=fleet.checkpoints[300], copy=copy)
    assert p.early_deletion.objects == 3 and p.early_deletion.bytes == 3 * GIB
    assert p.early_deletion.rounded == Decimal("2.40")
    assert p.early_deletion.describe("USD") == "2.40 USD (3 objects younger than their class's minimum)"


def test_objects_past_their_minimum_and_host_copies_are_not_charged(fleet):
    copy = glacier_copy(fleet, ages=(10, 95))
    p = services.preview(checkpoint=fleet.checkpoints[300])  # the whole checkpoint: NVMe and Lustre copies too
    assert p.early_deletion.objects == 1
    assert p.early_deletion.rounded == Decimal("0.80")
    assert {part.copy.pk for part in p.parts} >= {copy.pk}


def test_none_young_shows_zero_plainly(fleet, signed_in):
    p = services.preview(checkpoint=fleet.checkpoints[300])
    assert p.early_deletion.rounded == Decimal("0.00") and p.early_deletion.objects == 0
    html = signed_in.get(f"/actions/checkpoints/{fleet.checkpoints[300].pk}/delete/").content.decode()
    assert "Early-deletion charge" in html
    assert "0.00 USD" in html and "0 objects younger than their class" in html


def test_the_page_and_the_api_show_the_same_charge(fleet, signed_in):
    copy = glacier_copy(fleet)
    ck = fleet.checkpoints[300]
    body = signed_in.get(f"/api/v1/actions/deletions/preview/?checkpoint={ck.pk}&copy={copy.pk}").json()
    assert body["early_deletion"] == {
        "charge": "2.40",
        "objects": 3,
        "bytes": 3 * GIB,
        "unpriced_objects": 0,
        "text": "early-deletion charge: 2.40 USD (3 objects younger than their class's minimum)",
    }
    html = signed_in.get(f"/actions/checkpoints/{ck.pk}/delete/?copy={copy.pk}").content.decode()
    assert "2.40 USD" in html and "3 objects younger than their class" in html


def test_a_young_object_without_a_price_is_counted_apart():
    early = EarlyDeletion()
    early.add(nbytes=GIB, objects=3, price_per_gib_month=None, storage_class="GLACIER", days_stored=1)
    early.add(nbytes=GIB, objects=5, price_per_gib_month=None, storage_class="GLACIER", days_stored=91)  # past it
    assert early.unpriced_objects == 3 and early.objects == 0 and early.charge == 0
    assert early.describe("USD") == (
        "0.00 USD (0 objects younger than their class's minimum); 3 more have no price, so their charge is unknown"
    )


@pytest.mark.parametrize(
    ("storage_class", "days_stored", "left"),
    [("STANDARD_IA", 10, 20), ("ONEZONE_IA", 30, 0), ("GLACIER_IR", 1, 89), ("DEEP_ARCHIVE", 10, 170), ("", 0, 0)],
)
def test_the_shared_rule_bills_the_days_left(storage_class, days_stored, left):
    charge = early_deletion_charge(
        nbytes=30 * GIB, price_per_gib_month=Decimal("1"), storage_class=storage_class, days_stored=days_stored
    )
    assert charge == Decimal(left)


def test_an_age_is_whole_utc_calendar_days_whatever_the_hour():
    today = date(2026, 11, 28)
    assert days_stored(datetime(2026, 11, 27, 23, 59, tzinfo=UTC), today) == 1  # a minute before midnight, yesterday
    assert days_stored(datetime(2026, 11, 28, 0, 1, tzinfo=UTC), today) == 0
    assert days_stored(date(2026, 10, 29), today) == 30
    # A write time in another zone counts by its UTC day: 20:00 at UTC-5 on the 26th is 01:00 UTC on the 27th.
    eastern = timezone.get_fixed_timezone(-5 * 60)
    assert days_stored(datetime(2026, 11, 26, 20, 0, tzinfo=eastern), today) == 1
    assert days_stored(None, today) == 0 and days_stored(date(2026, 12, 1), today) == 0  # unknown, or a clock ahead


def test_a_checkpoint_factory_copy_in_standard_is_never_charged(fleet):
    ck = CheckpointFactory(run=fleet.run, step=400)
    add_copy(ck, StorageLocationFactory(bucket=True))
    assert services.preview(checkpoint=ck).early_deletion.objects == 0


def test_a_bulk_deletion_preview_sums_the_early_deletion_charge(fleet, signed_in):
    copy = glacier_copy(fleet)
    body = {"action": "delete", "items": [{"checkpoint": fleet.checkpoints[300].pk, "copy": copy.pk}], "reason": "x"}
    data = signed_in.post("/api/v1/actions/bulk/", body, content_type="application/json").json()
    assert data["early_deletion"] == {"charge": "2.40", "objects": 3, "bytes": 3 * GIB, "unpriced_objects": 0}
    pins = {"action": "pin", "items": [{"checkpoint": fleet.checkpoints[300].pk}], "reason": "x"}
    assert "early_deletion" not in signed_in.post("/api/v1/actions/bulk/", pins, content_type="application/json").json()
