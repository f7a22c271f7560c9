"""Usage rollups: what the ingest writes per UTC day, how days without an inventory are carried, and history."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

import pytest

from audit.actor import Actor
from catalog.models import CopyTierUsage, Run
from fleet.models import MultipartUpload, PricePoint, StorageLocation
from fleet.services import host_register, location_add
from spend.models import UsageCursor, UsageDaily, UsageMonthly
from spend.usage import money, usage_carry_forward_all, usage_monthly_rebuild, usage_refresh
from tests.helpers.usage import (
    GIB,
    assert_monthly_is_the_sum_of_the_daily_rows,
    checkpoint_bytes,
    dcp,
    flat_prices,
    utc,
)


def rows(location, day: date) -> dict[tuple, tuple]:
    return {
        (r.run.name if r.run else None, r.tier, r.storage_class, r.state): (r.bytes, r.files, r.carried)
        for r in UsageDaily.objects.filter(location=location, day=day).select_related("run")
    }


def test_an_inventory_rolls_up_its_location_by_run_tier_and_state(make_host, fleet):
    flat_prices(nvme="0.10")
    kit = make_host()
    stray = {"path": "llm/alpha/notes.txt", "size": 5, "mtime": 1790000000.0}
    fleet.push(
        kit,
        dcp("llm", "alpha", 100, 1000)
        + dcp("llm", "alpha", 200, 1000, missing=1)
        + dcp("cv", "gamma", 1, 70)
        + [stray],
        at=utc(2027, 3, 4, 10),
    )
    assert rows(kit.location, date(2027, 3, 4)) == {
        ("alpha", "nvme", "", "complete"): (checkpoint_bytes(1000), 3, False),
        ("alpha", "nvme", "", "partial"): (900 + 1000, 2, False),
        ("gamma", "nvme", "", "complete"): (checkpoint_bytes(70), 3, False),
        (None, "nvme", "", "unclaimed"): (5, 1, False),
    }
    alpha = UsageDaily.objects.get(run__name="alpha", state="complete")
    assert alpha.team.name == "llm"
    assert alpha.run_status == "active"
    # bytes x price / 2**30 / 31 days of March, in billionths, rounded once.
    expected = Decimal(checkpoint_bytes(1000)) * Decimal("0.10") / GIB / 31
    assert abs(money(alpha.cost_nanos) - expected) <= Decimal("0.0000000005")
    cursor = UsageCursor.objects.get(location=kit.location)
    assert (cursor.day, cursor.refreshed_day) == (date(2027, 3, 4), date(2027, 3, 4))


def test_a_second_inventory_the_same_day_replaces_that_day(make_host, fleet):
    flat_prices(nvme="0.10")
    kit = make_host()
    fleet.push(kit, dcp("llm", "alpha", 100, 1000) + dcp("llm", "beta", 1, 50), at=utc(2027, 3, 4, 1))
    fleet.push(kit, dcp("llm", "alpha", 100, 1000), at=utc(2027, 3, 4, 23, 59))
    assert set(rows(kit.location, date(2027, 3, 4))) == {("alpha", "nvme", "", "complete")}
    assert UsageDaily.objects.count() == 1


def test_days_without_an_inventory_carry_the_last_state_forward(make_host, fleet):
    flat_prices(nvme="0.10")
    kit = make_host()
    fleet.push(kit, dcp("llm", "alpha", 100, 1000), at=utc(2027, 3, 28, 12))
    # Beat carries the location to today (March 31)...
    fleet.at(utc(2027, 3, 31, 0, 5))
    assert usage_carry_forward_all() == {"locations": 1, "days": 3}
    assert usage_carry_forward_all() == {"locations": 0, "days": 0}  # idempotent
    # ...and an inventory after a gap beat missed fills the gap before writing its own day.
    fleet.push(kit, dcp("llm", "alpha", 100, 1000) + dcp("llm", "alpha", 200, 1000), at=utc(2027, 4, 3, 9))
    days = dict(
        UsageDaily.objects.filter(location=kit.location).values_list("day", "carried").order_by("day").distinct()
    )
    assert days == {
        date(2027, 3, 28): False,
        date(2027, 3, 29): True,
        date(2027, 3, 30): True,
        date(2027, 3, 31): True,
        date(2027, 4, 1): True,
        date(2027, 4, 2): True,
        date(2027, 4, 3): False,
    }
    one = checkpoint_bytes(1000)
    assert UsageDaily.objects.get(day=date(2027, 4, 2)).bytes == one
    assert UsageDaily.objects.filter(day=date(2027, 4, 3)).get().bytes == 2 * one
    # A carried day is priced by its own month: 30 days in April, 31 in March.
    march = UsageDaily.objects.get(day=date(2027, 3, 31)).cost_nanos
    april = UsageDaily.objects.get(day=date(2027, 4, 1)).cost_nanos
    assert march == round(one * Decimal("0.10") * 10**9 / GIB / 31)
    assert april == round(one * Decimal("0.10") * 10**9 / GIB / 30)


def test_an_emptied_location_carries_nothing(make_host, fleet):
    flat_prices(nvme="0.10")
    kit = make_host()
    fleet.push(kit, dcp("llm", "alpha", 100, 1000), at=utc(2027, 3, 1, 12))
    fleet.push(kit, [], at=utc(2027, 3, 2, 12), allow_empty=True)
    fleet.at(utc(2027, 3, 5, 1))
    usage_carry_forward_all()
    assert list(UsageDaily.objects.values_list("day", flat=True)) == [date(2027, 3, 1)]
    assert UsageCursor.objects.get(location=kit.location).day == date(2027, 3, 5)


def test_days_are_utc_days_whatever_the_time_zone(make_host, fleet, settings):
    settings.TIME_ZONE = "Pacific/Kiritimati"  # UTC+14: 23:30 UTC on the 31st is already the 1st there
    flat_prices(nvme="0.10")
    kit = make_host()
    fleet.push(kit, dcp("llm", "alpha", 100, 1000), at=utc(2027, 1, 31, 23, 30))
    assert list(UsageDaily.objects.values_list("day", flat=True)) == [date(2027, 1, 31)]
    fleet.push(kit, dcp("llm", "alpha", 100, 1000), at=utc(2027, 2, 1, 0, 0, 30))
    assert sorted(UsageDaily.objects.values_list("day", flat=True)) == [date(2027, 1, 31), date(2027, 2, 1)]


def test_a_deletion_today_leaves_earlier_days_alone(make_host, fleet):
    flat_prices(nvme="0.10")
    kit = make_host()
    fleet.push(kit, dcp("llm", "alpha", 100, 1000) + dcp("llm", "alpha", 200, 1000), at=utc(2027, 3, 1, 12))
    fleet.push(kit, dcp("llm", "alpha", 100, 1000) + dcp("llm", "alpha", 200, 1000), at=utc(2027, 3, 2, 12))
    before = list(UsageDaily.objects.filter(day__lt=date(2027, 3, 3)).order_by("pk").values())
    fleet.push(kit, dcp("llm", "alpha", 200, 1000), at=utc(2027, 3, 3, 12))
    after = list(UsageDaily.objects.filter(day__lt=date(2027, 3, 3)).order_by("pk").values())
    assert after == before
    assert UsageDaily.objects.get(day=date(2027, 3, 3)).bytes == checkpoint_bytes(1000)


def test_a_run_cannot_be_deleted_while_it_has_history(make_host, fleet):
    from django.db.models import ProtectedError

    flat_prices(nvme="0.10")
    kit = make_host()
    fleet.push(kit, dcp("llm", "alpha", 100, 1000), at=utc(2027, 3, 1, 12))
    with pytest.raises(ProtectedError):
        Run.objects.get(name="alpha").delete()


def test_an_older_day_than_the_newest_rolled_up_is_not_rewritten(make_host, fleet):
    flat_prices(nvme="0.10")
    kit = make_host()
    fleet.push(kit, dcp("llm", "alpha", 100, 1000), at=utc(2027, 3, 5, 12))
    location = StorageLocation.objects.get(pk=kit.location.pk)
    written = usage_refresh(location=location, day=date(2027, 3, 3))
    assert written == date(2027, 3, 5)
    assert list(UsageDaily.objects.values_list("day", flat=True)) == [date(2027, 3, 5)]


def test_the_copy_tier_usage_holds_each_present_copy_now(make_host, fleet):
    flat_prices(nvme="0.10")
    kit = make_host()
    fleet.push(kit, dcp("llm", "alpha", 100, 1000) + dcp("llm", "alpha", 200, 10), at=utc(2027, 3, 1, 12))
    fleet.push(kit, dcp("llm", "alpha", 200, 10), at=utc(2027, 3, 2, 12))
    assert list(CopyTierUsage.objects.values_list("copy__checkpoint__step", "tier", "bytes", "files")) == [
        (200, "nvme", checkpoint_bytes(10), 3)
    ]


def test_a_bucket_is_rolled_up_by_storage_class_with_its_incomplete_uploads(db):
    from catalog.models import ShardFile

    flat_prices(object_standard="0.023", object_infrequent="0.0125")
    actor = Actor.command(label="tests")
    location = location_add(host=None, name="s3://ckpt", kind="bucket", tier="object_standard", actor=actor)
    now = utc(2027, 3, 1, 12)
    for path, size, storage_class, tier in [
        ("a/b/1", 10 * GIB, "STANDARD", "object_standard"),
        ("a/b/2", 4 * GIB, "STANDARD_IA", "object_infrequent"),
        ("a/b/3", 2 * GIB, "ONEZONE_IA", "object_infrequent"),
    ]:
        ShardFile.objects.create(
            location=location,
            path=path,
            size=size,
            mtime=now,
            storage_class=storage_class,
            tier=tier,
            first_seen_at=now,
            changed_at=now,
        )
    MultipartUpload.objects.create(
        location=location, key="a/b/4", upload_id="u1", storage_class="STANDARD", bytes=GIB, first_seen_at=now
    )
    PricePoint.objects.create(
        kind="bucket",
        tier="object_infrequent",
        storage_class="ONEZONE_IA",
        price_per_gib_month=Decimal("0.01"),
        entered_price=Decimal("0.01"),
        effective_from=date(2000, 1, 1),
    )
    usage_refresh(location=location, day=date(2027, 3, 1), now=now)
    got = {
        (r.tier, r.storage_class, r.state): (r.bytes, money(r.cost_nanos) * 31)
        for r in UsageDaily.objects.filter(location=location)
    }
    # A whole month of each row costs GiB x its storage class's price (to within the per-day rounding).
    expected = {
        ("object_standard", "STANDARD", "unclaimed"): (10 * GIB, Decimal("0.23")),
        ("object_infrequent", "STANDARD_IA", "unclaimed"): (4 * GIB, Decimal("0.05")),
        ("object_infrequent", "ONEZONE_IA", "unclaimed"): (2 * GIB, Decimal("0.02")),
        ("object_standard", "STANDARD", "multipart"): (GIB, Decimal("0.023")),
    }
    assert set(got) == set(expected)
    for key, (size, month) in expected.items():
        assert got[key][0] == size
        assert abs(got[key][1] - month) < Decimal("0.0000001"), key


def test_bytes_of_a_tier_without_a_price_cost_nothing(db):
    actor = Actor.command(label="tests")
    host = host_register(name="gw", actor=actor)
    location = location_add(host=host, name="gw:/odd", kind="pfs", tier="pfs", root_path="/odd", actor=actor)
    from catalog.models import ShardFile

    now = utc(2027, 3, 1, 12)
    ShardFile.objects.create(
        location=location, path="x/y/z", size=GIB, mtime=now, tier="weird", first_seen_at=now, changed_at=now
    )
    usage_refresh(location=location, day=date(2027, 3, 1), now=now)
    row = UsageDaily.objects.get()
    assert (row.tier, row.bytes, row.cost_nanos) == ("weird", GIB, None)


def test_beat_carries_usage_forward_every_hour():
    from ckptfleet.celery import app
    from ingest.tasks import carry_usage_forward

    entry = app.conf.beat_schedule["carry-usage-forward"]
    assert entry == {"task": "ingest.tasks.carry_usage_forward", "schedule": 3600.0}
    assert carry_usage_forward.name == entry["task"]


def test_the_beat_task_carries_every_location_behind(make_host, fleet):
    from ingest.tasks import carry_usage_forward

    flat_prices(nvme="0.10")
    a = make_host("gpu-a", "/a")
    b = make_host("gpu-b", "/b")
    fleet.push(a, dcp("llm", "alpha", 1, 10), at=utc(2027, 3, 1, 12))
    fleet.push(b, dcp("llm", "beta", 1, 10), at=utc(2027, 3, 3, 12))
    fleet.at(utc(2027, 3, 4, 0, 10))
    assert carry_usage_forward.delay().get() == {"locations": 2, "days": 4}
    assert set(UsageCursor.objects.values_list("day", flat=True)) == {date(2027, 3, 4)}


# --- the monthly rollup ----------------------------------------------------------------------------


def test_every_write_of_daily_rows_keeps_each_month_the_sum_of_its_days(make_host, fleet):
    flat_prices(nvme="0.10")
    kit = make_host()
    fleet.push(kit, dcp("llm", "alpha", 100, 1000) + dcp("llm", "beta", 1, 50), at=utc(2027, 3, 30, 1))
    assert_monthly_is_the_sum_of_the_daily_rows()
    fleet.push(kit, dcp("llm", "alpha", 100, 1000), at=utc(2027, 3, 30, 23))  # the same day again, smaller
    assert_monthly_is_the_sum_of_the_daily_rows()
    fleet.at(utc(2027, 5, 2, 0, 5))
    usage_carry_forward_all()  # across two month ends
    assert assert_monthly_is_the_sum_of_the_daily_rows() == 3
    fleet.push(kit, dcp("llm", "alpha", 100, 1000) + dcp("cv", "gamma", 7, 10), at=utc(2027, 5, 2, 9))
    assert assert_monthly_is_the_sum_of_the_daily_rows() == 3
    may = UsageMonthly.objects.filter(month=date(2027, 5, 1), run__name="alpha").get()
    assert (may.days, may.byte_days) == (2, 2 * checkpoint_bytes(1000))
    # Rebuilding every month from the daily rows (the migration's and the benchmark's way) finds the same rows.
    fields = ("month", "location", "team", "run", "run_status", "tier", "storage_class", "state", "days")
    before = set(UsageMonthly.objects.values_list(*fields, "byte_days", "file_days", "cost_nanos"))
    assert usage_monthly_rebuild() == len(before)
    assert set(UsageMonthly.objects.values_list(*fields, "byte_days", "file_days", "cost_nanos")) == before
