"""The price book: which price applies, adding one (audited, never edited), and the shipped defaults."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse

from audit.actor import Actor
from audit.models import AuditEvent
from ckptfleet.errors import DomainError
from fleet.models import PriceBasis, PricePoint, StorageLocation
from fleet.pricebook import GIB, PriceBook, utc_today
from fleet.services import host_register, location_add
from spend.models import UsageDaily
from spend.prices import price_set
from spend.usage import usage_carry_forward_all, usage_refresh
from tests.conftest import give_roles
from tests.helpers.usage import Fleet, dcp, utc

pytestmark = pytest.mark.django_db

TODAY = date(2027, 3, 10)


@pytest.fixture
def actor() -> Actor:
    return Actor.command(label="finance")


@pytest.fixture
def places(db):
    """Two NVMe hosts (one with two roots), a parallel FS and a bucket."""
    a = Actor.command(label="tests")
    h1 = host_register(name="gpu-1", actor=a)
    h2 = host_register(name="gpu-2", actor=a)
    return {
        "n1": location_add(host=h1, name="gpu-1:/a", kind="nvme", tier="nvme", root_path="/a", actor=a),
        "n1b": location_add(host=h1, name="gpu-1:/b", kind="nvme", tier="nvme", root_path="/b", actor=a),
        "n2": location_add(host=h2, name="gpu-2:/a", kind="nvme", tier="nvme", root_path="/a", actor=a),
        "fs": location_add(host=h2, name="gpu-2:/lustre", kind="pfs", tier="pfs", root_path="/lustre", actor=a),
        "s3": location_add(host=None, name="s3://ckpt", kind="bucket", tier="object_standard", actor=a),
        "h1": h1,
    }


def point(**fields) -> PricePoint:
    fields.setdefault("effective_from", date(2000, 1, 1))
    price = Decimal(fields.pop("price"))
    return PricePoint.objects.create(price_per_gib_month=price, entered_price=price, **fields)


def test_the_narrowest_price_wins_location_then_host_then_kind_then_any(places):
    point(kind="nvme", tier="nvme", price="0.05")
    point(host=places["h1"], tier="nvme", price="0.04")
    point(location=places["n1"], kind="nvme", tier="nvme", price="0.03")
    book = PriceBook.load()
    day = date(2027, 1, 1)
    assert book.price(places["n1"], "nvme", "", day) == Decimal("0.03")
    assert book.price(places["n1b"], "nvme", "", day) == Decimal("0.04")
    assert book.price(places["n2"], "nvme", "", day) == Decimal("0.05")
    assert book.price(places["fs"], "pfs", "", day) == Decimal("0.145")  # the shipped default, of any kind


def test_an_exact_storage_class_wins_over_any_class_of_its_tier(places):
    book = PriceBook.load()
    day = date(2027, 1, 1)
    assert book.price(places["s3"], "object_infrequent", "ONEZONE_IA", day) == Decimal("0.01")
    assert book.price(places["s3"], "object_infrequent", "STANDARD_IA", day) == Decimal("0.0125")


def test_a_price_applies_from_its_day_and_the_newest_in_force_wins(places):
    point(kind="nvme", tier="nvme", price="0.05", effective_from=date(2027, 1, 1))
    point(kind="nvme", tier="nvme", price="0.07", effective_from=date(2027, 2, 1))
    book = PriceBook.load()
    assert book.price(places["n1"], "nvme", "", date(2026, 12, 31)) == Decimal("0.08")  # the default
    assert book.price(places["n1"], "nvme", "", date(2027, 1, 31)) == Decimal("0.05")
    assert book.price(places["n1"], "nvme", "", date(2027, 2, 1)) == Decimal("0.07")
    # One GiB over Jan 16 - Feb 14: 16/31 of January's price and 14/28 of February's.
    cost = book.cost_of_days(places["n1"], "nvme", "", date(2027, 1, 16), date(2027, 2, 14))
    assert cost == Decimal("0.05") * 16 / 31 + Decimal("0.07") * 14 / 28


def test_the_shipped_book_prices_every_tier_at_every_kind_of_location(places):
    from fleet.choices import Tier

    book = PriceBook.load()
    for name in ("n1", "fs", "s3"):
        for tier in Tier.values:
            assert book.price(places[name], tier, "", date(2027, 1, 1)) is not None, (name, tier)
    s3 = {tier: book.price(places["s3"], tier, "", date(2027, 1, 1)) for tier in Tier.values}
    assert s3["object_standard"] == Decimal("0.023")
    assert s3["object_infrequent"] == Decimal("0.0125")
    assert s3["archive_instant"] == Decimal("0.004")
    assert s3["archive"] == Decimal("0.0036")
    assert s3["deep_archive"] == Decimal("0.00099")
    assert all(p.source for p in PricePoint.objects.all())


def test_adding_a_price_writes_it_and_its_audit_event_together(places, actor):
    p = price_set(
        tier="nvme",
        kind="nvme",
        price="0.12",
        effective_from=TODAY,
        actor=actor,
        source="quote 42",
        today=TODAY,
    )
    assert p.price_per_gib_month == Decimal("0.12")
    event = AuditEvent.objects.get(action="price.set")
    assert event.target_id == p.pk
    assert event.actor_label == "finance"
    assert event.reason == "quote 42"
    assert event.after["price_per_gib_month"] == "0.120000000000"
    assert event.after["effective_from"] == "2027-03-10"


def test_a_price_per_tib_month_or_per_host_month_is_kept_per_gib(places, actor):
    tib = price_set(
        tier="pfs",
        kind="pfs",
        price="102.4",
        basis=PriceBasis.TIB_MONTH,
        effective_from=TODAY,
        actor=actor,
        today=TODAY,
    )
    assert tib.price_per_gib_month == Decimal("0.1")
    assert (tib.entered_price, tib.basis) == (Decimal("102.4"), "tib_month")
    # 8 drives of 3.84 TB for 400 a month: 400 / (30.72e12 / 2**30) per GiB-month.
    host = price_set(
        tier="nvme",
        host=places["h1"],
        price="400",
        basis=PriceBasis.HOST_MONTH,
        host_capacity_bytes=8 * 3_840_000_000_000,
        effective_from=TODAY,
        actor=actor,
        today=TODAY,
    )
    assert host.price_per_gib_month == (Decimal(400) * GIB / (8 * 3_840_000_000_000)).quantize(Decimal("1e-12"))
    assert PriceBook.load().price(places["n1b"], "nvme", "", TODAY) == host.price_per_gib_month


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"effective_from": date(2027, 2, 28)}, "before 2027-03-01"),
        ({"tier": "floppy"}, "unknown tier"),
        ({"currency": "EUR"}, "the price book is in USD"),
        ({"currency": "dollars"}, "three-letter"),
        ({"price": "-1"}, "zero or more"),
        ({"price": "lots"}, "must be a number"),
        ({"price": "250000"}, "check the unit"),
        ({"storage_class": "standard ia"}, "not a storage class"),
        ({"basis": PriceBasis.HOST_MONTH}, "needs the host"),
    ],
)
def test_a_bad_price_is_refused_and_changes_nothing(places, actor, fields, words):
    before = PricePoint.objects.count()
    arguments = {"tier": "nvme", "kind": "nvme", "price": "0.1", "effective_from": TODAY, **fields}
    with pytest.raises(DomainError, match=words):
        price_set(actor=actor, today=TODAY, **arguments)
    assert PricePoint.objects.count() == before
    assert not AuditEvent.objects.filter(action="price.set").exists()


def test_a_host_price_is_for_host_locations_only(places, actor):
    with pytest.raises(DomainError, match="not to buckets"):
        price_set(
            tier="nvme", kind="bucket", host=places["h1"], price="1", effective_from=TODAY, actor=actor, today=TODAY
        )


def test_a_second_price_for_the_same_scope_and_day_is_refused(places, actor):
    price_set(tier="nvme", kind="nvme", price="0.1", effective_from=TODAY, actor=actor, today=TODAY)
    with pytest.raises(DomainError, match="already takes effect that day"):
        price_set(tier="nvme", kind="nvme", price="0.2", effective_from=TODAY, actor=actor, today=TODAY)


def test_prices_are_never_edited_or_deleted(places):
    p = point(kind="nvme", tier="nvme", price="0.05")
    p.price_per_gib_month = Decimal("0.01")
    with pytest.raises(PermissionError):
        p.save()
    with pytest.raises(PermissionError):
        p.delete()
    with pytest.raises(PermissionError):
        PricePoint.objects.filter(pk=p.pk).update(price_per_gib_month=Decimal("0.01"))
    with pytest.raises(PermissionError):
        PricePoint.objects.filter(pk=p.pk).delete()


def test_a_price_entered_late_this_month_prices_its_days_again_and_no_earlier_ones(
    make_host, client, monkeypatch, django_capture_on_commit_callbacks, actor
):
    fleet = Fleet(client, monkeypatch, django_capture_on_commit_callbacks)
    kit = make_host()
    point(kind="nvme", tier="nvme", price="0.10")
    fleet.push(kit, dcp("llm", "alpha", 1, 10 * GIB), at=utc(2027, 2, 27, 12))
    fleet.at(utc(2027, 3, 10, 1))
    usage_carry_forward_all()
    before = dict(UsageDaily.objects.values_list("day", "cost_nanos"))
    price_set(tier="nvme", kind="nvme", price="0.20", effective_from=date(2027, 3, 5), actor=actor, today=TODAY)
    after = dict(UsageDaily.objects.values_list("day", "cost_nanos"))
    for day, cost in after.items():
        if day < date(2027, 3, 5):
            assert cost == before[day], day
        else:
            assert cost == 2 * before[day] or abs(cost - 2 * before[day]) <= 1, day
    assert AuditEvent.objects.get(action="price.set").after["usage_rows_repriced"] == 6
    # A refresh after the change uses it too.
    location = StorageLocation.objects.get(pk=kit.location.pk)
    usage_refresh(location=location, day=date(2027, 3, 10), now=utc(2027, 3, 10, 12))
    assert UsageDaily.objects.get(day=date(2027, 3, 10)).cost_nanos == after[date(2027, 3, 10)]


# --- the price book page, API and admin ----------------------------------------------------------


@pytest.fixture
def finance_user(django_user_model):
    user = django_user_model.objects.create_user(username="fin", password="a-long-password-1")
    user.user_permissions.add(Permission.objects.get(codename="add_pricepoint"))
    give_roles(user, "finance")  # the price book is the finance role's (access.roles)
    return user


FORM = {
    "scope": "kind",
    "kind": "nvme",
    "tier": "nvme",
    "storage_class": "",
    "basis": "tib_month",
    "price": "51.2",
    "currency": "USD",
    "source": "2027 hardware refresh",
}


def test_finance_adds_a_price_on_the_price_book_page(client, finance_user):
    client.force_login(finance_user)
    page = client.get("/spend/prices/").content.decode()
    assert "Add a price" in page
    assert "0.023 USD" in page
    today = utc_today().isoformat()
    response = client.post("/spend/prices/", {**FORM, "effective_from": today}, follow=True)
    assert response.status_code == 200
    assert "Price added" in response.content.decode()
    new = PricePoint.objects.get(source="2027 hardware refresh")
    assert new.price_per_gib_month == Decimal("0.05")
    event = AuditEvent.objects.get(action="price.set")
    assert (event.source, event.actor_label) == ("ui", "fin")


def test_a_refused_price_is_explained_on_the_form_and_nothing_is_written(client, finance_user):
    client.force_login(finance_user)
    before = PricePoint.objects.count()
    response = client.post("/spend/prices/", {**FORM, "effective_from": "2001-01-01"})
    assert response.status_code == 200
    assert "spend of earlier months is closed" in response.content.decode()
    assert PricePoint.objects.count() == before


def test_a_person_without_the_permission_reads_the_book_but_cannot_add(signed_in_as):
    signed_in = signed_in_as("viewer")
    page = signed_in.get("/spend/prices/").content.decode()
    assert "Add a price" not in page
    before = PricePoint.objects.count()
    response = signed_in.post("/spend/prices/", {**FORM, "effective_from": utc_today().isoformat()})
    assert response.status_code == 302
    assert PricePoint.objects.count() == before
    api = signed_in.post("/api/v1/spend/price-points/", {**FORM, "effective_from": utc_today().isoformat()})
    assert api.status_code == 403


def test_the_api_lists_and_adds_prices(client, finance_user):
    client.force_login(finance_user)
    listed = client.get("/api/v1/spend/price-points/").json()
    assert {p["tier"] for p in listed} >= {"nvme", "object_standard"}
    response = client.post(
        "/api/v1/spend/price-points/",
        {"tier": "pfs", "kind": "pfs", "price": "0.2", "effective_from": utc_today().isoformat(), "source": "api"},
        content_type="application/json",
    )
    assert response.status_code == 201, response.content
    assert response.json()["price_per_gib_month"] == "0.200000000000"
    assert AuditEvent.objects.get(action="price.set").source == "api"
    refused = client.post(
        "/api/v1/spend/price-points/",
        {"tier": "pfs", "kind": "pfs", "price": "0.2", "effective_from": "2001-01-01"},
        content_type="application/json",
    )
    assert refused.status_code == 400
    assert "closed" in refused.json()["detail"]


def test_the_admin_adds_a_price_through_the_service_and_never_changes_one(admin_client):
    url = reverse("admin:fleet_pricepoint_add")
    response = admin_client.post(
        url,
        {
            "kind": "pfs",
            "tier": "pfs",
            "storage_class": "",
            "basis": "gib_month",
            "price": "0.3",
            "currency": "USD",
            "effective_from": utc_today().isoformat(),
            "source": "admin entry",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    new = PricePoint.objects.get(source="admin entry")
    assert AuditEvent.objects.get(action="price.set").source == "admin"
    change = reverse("admin:fleet_pricepoint_change", args=[new.pk])
    assert admin_client.post(change, {"source": "edited"}).status_code == 403
    delete = reverse("admin:fleet_pricepoint_delete", args=[new.pk])
    assert admin_client.post(delete, {"post": "yes"}).status_code == 403
    assert admin_client.get(reverse("admin:spend_usagedaily_changelist")).status_code == 200
    assert admin_client.get(reverse("admin:spend_usagedaily_add")).status_code == 403


def test_the_admin_explains_a_refused_price(admin_client):
    response = admin_client.post(
        reverse("admin:fleet_pricepoint_add"),
        {
            "kind": "pfs",
            "tier": "pfs",
            "basis": "gib_month",
            "price": "0.3",
            "currency": "EUR",
            "effective_from": utc_today().isoformat(),
        },
    )
    assert response.status_code == 200
    assert "the price book is in USD" in response.content.decode()
