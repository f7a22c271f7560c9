"""Non-current object versions in spend: a versioned bucket on moto's server, an object overwritten.

The bucket is scanned once a day on known UTC days. Each version's bytes count on the days a scan
found it (current, then non-current, then deleted), priced from the price book, to the cent against
a computation from the list of events alone. The non-current ones are their own waste line.
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import ROUND_HALF_UP, Decimal

import pytest
from django.utils import timezone

from catalog.models import Run
from fleet.choices import InventoryStatus
from fleet.models import PricePoint
from spend import report as spend
from spend.models import UsageDaily
from tests.conftest import give_roles
from tests.helpers.trees import tree_files

pytestmark = [pytest.mark.services, pytest.mark.django_db]

KEY = "vision/resnet-tiny/epoch=0-step=100.ckpt"
FIRST = tree_files("nvme-a")[KEY]  # 3,639 bytes: a Lightning checkpoint
SECOND = tree_files("pfs")["llm/gpt-megatron/iter_0000200/mp_rank_00/model_optim_rng.pt"]  # 7,277 bytes
STRAY = b"n" * 5000  # put and deleted the same day: only a non-current version and a delete marker remain
PRICE = Decimal(30 * 2**20)  # per GiB-month: in a 30-day month a KiB costs 1 USD a day
APRIL = spend.Period.month(2027, 4)
D1, D2, D3 = date(2027, 4, 10), date(2027, 4, 11), date(2027, 4, 12)


def cents(value: Decimal) -> Decimal:
    return value.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)


def cost(byte_days: int) -> Decimal:
    """The independent computation: bytes x days x price / 2**30 / the 30 days of April."""
    return Decimal(byte_days) * PRICE / Decimal(2**30) / 30


@pytest.fixture
def versioned(s3, scan_now, monkeypatch):
    """Three daily scans of a versioned bucket; returns the bucket's location."""
    name = s3.bucket(versioned=True)
    bucket = s3.register(name)
    PricePoint.objects.create(
        location=bucket.location,
        tier="object_standard",
        storage_class="STANDARD",
        price_per_gib_month=PRICE,
        entered_price=PRICE,
        effective_from=date(2000, 1, 1),
        source="tests",
    )

    def scan_on(day: date):
        monkeypatch.setattr(timezone, "now", lambda: datetime(day.year, day.month, day.day, 12, tzinfo=UTC))
        inventory = scan_now(bucket)
        assert inventory.status == InventoryStatus.APPLIED, inventory.error

    first = s3.put(name, KEY, FIRST)
    scan_on(D1)  # the first version is current
    s3.put(name, KEY, SECOND)
    s3.put(name, "scratch/notes.bin", STRAY)
    s3.client.delete_object(Bucket=name, Key="scratch/notes.bin")
    scan_on(D2)  # the first version is non-current, so is the stray object's only version
    s3.client.delete_object(Bucket=name, Key=KEY, VersionId=first["VersionId"])  # a lifecycle rule expires it
    scan_on(D3)
    return bucket.location


def test_non_current_versions_are_rolled_up_by_run_tier_and_storage_class(versioned):
    run = Run.objects.get(name="resnet-tiny")
    rows = {
        (r.day, r.run_id, r.tier, r.storage_class, r.state): r.bytes
        for r in UsageDaily.objects.filter(location=versioned, state="noncurrent")
    }
    assert rows == {
        (D2, run.pk, "object_standard", "STANDARD", "noncurrent"): len(FIRST),  # the key maps to a run
        (D2, None, "object_standard", "STANDARD", "noncurrent"): len(STRAY),  # unattributed
        (D3, None, "object_standard", "STANDARD", "noncurrent"): len(STRAY),
    }


def test_spend_counts_both_versions_on_the_days_they_existed_to_the_cent(versioned):
    basis = spend.basis_for(APRIL, today=D3)
    assert basis.as_of == D3
    first, second, stray = len(FIRST), len(SECOND), len(STRAY)
    days = {D1: [first], D2: [second, first, stray], D3: [second, stray]}

    assert cents(spend.summary(basis).spend) == cents(cost(sum(sum(b) for b in days.values())))
    waste = {r["key"]: r for r in spend.waste(basis).rows}
    noncurrent = waste["noncurrent"]
    assert noncurrent["kind"] == "Non-current versions"
    assert cents(noncurrent["spend"]) == cents(cost(first + stray + stray)) == Decimal("13.32")
    assert (noncurrent["stored"], noncurrent["files"]) == (stray, 1)  # on the newest day
    by_run = {r["run_id"]: r["spend"] for r in spend.by_run(basis).rows}
    run = Run.objects.get(name="resnet-tiny")
    assert cents(by_run[run.pk]) == cents(cost(first + second + first + second)) == Decimal("21.32")
    assert cents(by_run[None]) == cents(cost(stray + stray)) == Decimal("9.77")  # unattributed


def test_the_spend_page_and_api_show_non_current_versions_as_waste(versioned, client, django_user_model):
    user = django_user_model.objects.create_user(username="fin", password="a-long-password-1")
    give_roles(user, "finance")
    client.force_login(user)  # at the patched time, so that the session is valid then

    page = client.get("/spend/?month=2027-04").content.decode()
    assert "Non-current versions" in page and "13.32 USD" in page

    body = client.get("/api/v1/spend/waste/?month=2027-04").json()
    [row] = [r for r in body["rows"] if r["kind"] == "Non-current versions"]
    assert row["spend"] == "13.32" and row["stored"] == len(STRAY)
