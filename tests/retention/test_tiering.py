"""The tiering what-if against numbers worked out by hand.

Moving 100 GiB in 2,000 files of a finished run off NVMe (0.08 USD per GiB-month here) to
GLACIER_IR (0.004): now 8.00 a month, after 0.40, saving 7.60; requests 2,000 x 0.02 / 1,000 =
0.04; no early deletion (NVMe has no minimum); break-even 0.04 / 7.60 = 0.0053 -> 0.01 months;
minimum commitment 100 x 0.004 x 90 / 30 = 1.20.

Moving 50 GiB in 500 files of STANDARD_IA (0.0125), stored 10 days, to DEEP_ARCHIVE (0.00099):
now 0.625, after 0.0495, saving 0.5755; early deletion 50 x 0.0125 x (30 - 10) / 30 = 0.41666...;
requests 500 x 0.05 / 1,000 = 0.025; one-off 0.44166...; break-even 0.44166 / 0.5755 = 0.767 ->
0.77 months; minimum commitment 50 x 0.00099 x 180 / 30 = 0.297.
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from ckptfleet.errors import DomainError
from retention.selectors import Scope
from retention.tiering import Move, tiering_whatif
from tests.retention.fleet import GIB, Fleet


@pytest.fixture
def fleet(db) -> Fleet:
    f = Fleet()
    f.price(f.nvme, "nvme", "0.08")
    f.price(None, "archive_instant", "0.004", kind="bucket")
    f.price(None, "deep_archive", "0.00099", kind="bucket")
    f.price(f.bucket, "object_infrequent", "0.0125")
    return f


def test_moving_a_finished_run_off_nvme(fleet):
    run = fleet.run("gamma")
    fleet.copy(fleet.checkpoint(run, 1000), fleet.nvme, 60 * GIB, files=1200)
    fleet.copy(fleet.checkpoint(run, 2000), fleet.nvme, 40 * GIB, files=800)
    active = fleet.run("delta", status="active")
    fleet.copy(fleet.checkpoint(active, 5), fleet.nvme, 7 * GIB)  # not finished: stays
    w = tiering_whatif(move=Move(to_class="GLACIER_IR"))
    t = w.total
    assert [r.run.name for r in w.runs] == ["gamma"]
    assert (t.bytes, t.files, t.checkpoints) == (100 * GIB, 2000, 2)
    assert t.current == Decimal("8.00")
    assert t.after == Decimal("0.400")
    assert t.saving == Decimal("7.600")
    assert t.requests == Decimal("0.04")
    assert t.early_deletion == 0
    assert t.break_even_months == Decimal("0.01")
    assert t.commitment == Decimal("1.2")
    assert w.to_min_days == 90


def test_moving_infrequent_access_bytes_early_costs_the_rest_of_their_minimum(fleet):
    run = fleet.run("epsilon")
    c = fleet.checkpoint(run, 10)
    fleet.copy(c, fleet.bucket, 50 * GIB, files=500, tier="object_infrequent", storage_class="STANDARD_IA", age_days=10)
    w = tiering_whatif(move=Move(to_class="DEEP_ARCHIVE", from_tier="object_infrequent"))
    t = w.total
    assert t.current == Decimal("0.625")
    assert t.after == Decimal("0.0495")
    assert t.saving == Decimal("0.5755")
    assert t.early_deletion.quantize(Decimal("0.000001")) == Decimal("0.416667")
    assert t.requests == Decimal("0.025")
    assert t.break_even_months == Decimal("0.77")
    assert t.commitment == Decimal("0.297")


def test_the_minimum_durations_can_be_overridden_in_settings(fleet, settings):
    settings.RETENTION_MIN_STORAGE_DAYS = {"STANDARD_IA": 0, "DEEP_ARCHIVE": 365}
    settings.RETENTION_REQUEST_PRICE_PER_1000 = {"DEEP_ARCHIVE": "0"}
    run = fleet.run("epsilon")
    c = fleet.checkpoint(run, 10)
    fleet.copy(c, fleet.bucket, 50 * GIB, files=500, tier="object_infrequent", storage_class="STANDARD_IA", age_days=10)
    w = tiering_whatif(move=Move(to_class="DEEP_ARCHIVE", from_tier="object_infrequent"))
    assert w.total.early_deletion == 0 and w.total.requests == 0
    assert w.total.break_even_months == Decimal("0.00")
    assert w.to_min_days == 365


def test_held_checkpoints_are_never_demoted(fleet):
    run = fleet.run("gamma")
    kept = fleet.checkpoint(run, 1)
    fleet.copy(kept, fleet.nvme, 10 * GIB)
    fleet.copy(fleet.checkpoint(run, 2), fleet.nvme, 30 * GIB)
    fleet.hold(run, kept)
    t = tiering_whatif(move=Move(to_class="GLACIER_IR", scope=Scope(run_id=run.pk))).total
    assert (t.bytes, t.held_bytes, t.held_checkpoints) == (30 * GIB, 10 * GIB, 1)


def test_it_refuses_a_move_onto_the_same_tier_and_an_unknown_class(fleet):
    with pytest.raises(DomainError, match="already on"):
        tiering_whatif(move=Move(to_class="STANDARD_IA", from_tier="object_infrequent"))
    with pytest.raises(DomainError, match="unknown storage class"):
        tiering_whatif(move=Move(to_class="PAPER_TAPE"))
    with pytest.raises(DomainError, match="must be a bucket"):
        tiering_whatif(move=Move(to_class="GLACIER", to_location_id=fleet.nvme.pk))


def test_the_page_and_the_api(fleet, signed_in):
    run = fleet.run("gamma")
    fleet.copy(fleet.checkpoint(run, 1000), fleet.nvme, 100 * GIB, files=2000)
    page = signed_in.get("/retention/tiering/?to_class=GLACIER_IR&from_tier=nvme&finished_only=on")
    assert page.status_code == 200
    html = page.content.decode()
    assert "8.00 USD" in html and "+7.60 USD" in html and "0.01 months" in html and "1.20 USD" in html
    assert "Not included: data transfer" in html
    body = signed_in.get("/api/v1/retention/tiering/?to_class=GLACIER_IR").json()
    assert body["total"]["monthly_saving"] == "7.600000"
    assert body["total"]["break_even_months"] == "0.01"
    assert body["to_min_storage_days"] == 90
    bad = signed_in.get("/retention/tiering/?to_class=STANDARD_IA&from_tier=object_infrequent")
    assert "already on" in bad.content.decode()
    assert (
        signed_in.get("/api/v1/retention/tiering/?to_class=STANDARD_IA&from_tier=object_infrequent").status_code == 400
    )


def test_from_a_run_page_the_what_if_covers_that_run_whatever_its_status(fleet, signed_in):
    active = fleet.run("delta", status="active")
    fleet.copy(fleet.checkpoint(active, 5), fleet.nvme, 7 * GIB)
    html = signed_in.get(f"/retention/tiering/?run={active.pk}").content.decode()
    assert "7.0 GiB" in html and "0.56 USD" in html  # 7 GiB x 0.08
