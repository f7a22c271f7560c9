"""The fleet pages: hosts, their locations and last inventories, and one inventory."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from catalog.models import ShardFile
from fleet.choices import InventoryStatus
from fleet.models import Host, Inventory, StorageLocation
from tests.conftest import queries_for

pytestmark = pytest.mark.django_db


def make_host(name: str = "gpu-a01", *, site: str = "dc1", region: str = "eu-west") -> Host:
    return Host.objects.create(name=name, site=site, region=region, last_seen_at=timezone.now())


def make_location(host: Host, root: str = "/mnt/nvme0/checkpoints") -> StorageLocation:
    return StorageLocation.objects.create(
        name=f"{host.name}:{root}", kind="nvme", tier="nvme", host=host, root_path=root
    )


def make_inventory(location: StorageLocation, status: str = InventoryStatus.APPLIED, **fields) -> Inventory:
    now = timezone.now()
    values = {
        "host": location.host,
        "status": status,
        "taken_at": now - timedelta(minutes=5),
        "started_at": now - timedelta(seconds=95),
        "finished_at": now - timedelta(seconds=11),
    }
    if status == InventoryStatus.APPLIED:
        values.update(
            files_count=16384,
            bytes_total=4 * 1024**4,
            files_added=12,
            files_changed=3,
            files_gone=1,
            checkpoints_found=2,
        )
    if status == InventoryStatus.FAILED:
        values.update(error="size must be a non-negative integer", error_line=4711)
    if status in (InventoryStatus.RECEIVED, InventoryStatus.PROCESSING):
        values.update(finished_at=None)
    values.update(fields)
    inventory = Inventory.objects.create(location=location, **values)
    if status in (InventoryStatus.APPLIED, InventoryStatus.FAILED):
        StorageLocation.objects.filter(pk=location.pk).update(last_inventory=inventory)
    return inventory


@pytest.mark.parametrize("url", ["/fleet/", "/fleet/inventories/1/"])
def test_it_sends_a_stranger_to_the_login_page(client, url):
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_an_empty_fleet_says_how_to_register_a_host(signed_in):
    html = signed_in.get("/fleet/").content.decode()
    assert "No hosts registered yet" in html
    assert "python manage.py fleet_host add gpu-a01 --root /mnt/nvme0/checkpoints --tier nvme" in html
    assert "ckptfleet-agent --server http://testserver" in html
    assert 'aria-current="page">Fleet' in html


def test_the_fleet_shows_hosts_their_locations_and_last_inventory(signed_in):
    host = make_host()
    loc = make_location(host)
    inv = make_inventory(loc)
    html = signed_in.get("/fleet/").content.decode()
    assert "gpu-a01" in html and "dc1" in html and "eu-west" in html
    assert "/mnt/nvme0/checkpoints" in html
    assert f'id="location-{loc.pk}"' in html
    assert f'href="/fleet/inventories/{inv.pk}/"' in html
    assert "Applied" in html
    assert "16,384 files" in html
    assert "4.00 TiB" in html
    assert "+12 · ~3 · \u22121" in html
    assert "1 min 24 s" in html
    assert "1 host" in html


def test_a_failed_inventory_shows_its_error_and_line(signed_in):
    loc = make_location(make_host())
    make_inventory(loc, InventoryStatus.FAILED)
    html = signed_in.get("/fleet/").content.decode()
    assert "Failed" in html
    assert "Line 4,711:" in html
    assert "size must be a non-negative integer" in html
    assert "1 location</strong> rejected its last inventory" in html


def test_an_inventory_being_applied_is_shown_next_to_the_last_finished_one(signed_in):
    loc = make_location(make_host())
    make_inventory(loc)
    pending = make_inventory(loc, InventoryStatus.PROCESSING)
    html = signed_in.get("/fleet/").content.decode()
    assert "Processing" in html
    assert f'href="/fleet/inventories/{pending.pk}/"' in html


def test_a_host_without_roots_and_a_location_without_inventory_say_what_to_do(signed_in):
    make_host("gpu-b07")
    make_location(make_host("gpu-b08"))
    html = signed_in.get("/fleet/").content.decode()
    assert "fleet_host add-root gpu-b07" in html
    assert "No inventory yet" in html


def test_buckets_without_a_host_are_listed_apart(signed_in):
    StorageLocation.objects.create(name="s3://ckpt-archive/prod", kind="bucket", tier="object_standard")
    html = signed_in.get("/fleet/").content.decode()
    assert "Buckets and shared locations" in html
    assert "s3://ckpt-archive/prod" in html
    assert "No hosts registered yet" not in html


def test_the_fleet_searches_and_narrows_to_one_host(signed_in):
    a = make_host("gpu-a01", site="dc1")
    make_host("gpu-b01", site="dc2")
    assert "gpu-b01" not in signed_in.get("/fleet/?q=a01").content.decode()
    assert "gpu-a01" in signed_in.get("/fleet/?q=dc1").content.decode()
    only = signed_in.get(f"/fleet/?host={a.pk}").content.decode()
    assert "gpu-a01" in only and "gpu-b01" not in only
    assert "No hosts match" in signed_in.get("/fleet/?q=nothing-like-it").content.decode()


def test_the_fleet_query_count_does_not_grow_with_hosts(signed_in, django_assert_max_num_queries):
    loc = make_location(make_host("h-000"))
    make_inventory(loc)
    make_inventory(loc, InventoryStatus.PROCESSING)
    StorageLocation.objects.create(name="s3://b/0", kind="bucket", tier="object_standard")
    one = queries_for(signed_in, "/fleet/")
    for i in range(1, 15):
        host = make_host(f"h-{i:03d}")
        for root in ("/a", "/b"):
            loc = make_location(host, root)
            make_inventory(loc, InventoryStatus.FAILED if i % 2 else InventoryStatus.APPLIED)
            make_inventory(loc, InventoryStatus.RECEIVED)
        StorageLocation.objects.create(name=f"s3://b/{i}", kind="bucket", tier="object_standard")
    with django_assert_max_num_queries(one):
        assert signed_in.get("/fleet/").status_code == 200


def test_the_inventory_page_shows_its_outcome_with_units(signed_in):
    loc = make_location(make_host())
    inv = make_inventory(loc, upload_bytes=123456, agent="ckptfleet-agent/0.1.0")
    now = timezone.now()
    ShardFile.objects.create(
        location=loc,
        path="vision/vit/checkpoint-10/model.safetensors",
        size=2048,
        mtime=now,
        first_seen_at=now,
        changed_at=now,
        changed_by=inv,
    )
    html = signed_in.get(f"/fleet/inventories/{inv.pk}/").content.decode()
    assert f"Inventory #{inv.pk}" in html
    assert "16,384 files" in html and "4.00 TiB" in html
    assert "120.6 KiB compressed" in html
    assert "ckptfleet-agent/0.1.0" in html
    assert "1 min 24 s" in html
    assert "vision/vit/checkpoint-10/model.safetensors" in html
    assert "2 copies" in html


def test_the_inventory_page_of_a_failed_inventory_shows_the_error_and_line(signed_in):
    inv = make_inventory(make_location(make_host()), InventoryStatus.FAILED)
    html = signed_in.get(f"/fleet/inventories/{inv.pk}/").content.decode()
    assert "Rejected at line 4,711" in html
    assert "size must be a non-negative integer" in html
    assert "Nothing from this inventory was applied" in html


def test_the_inventory_page_query_count_does_not_grow(signed_in, django_assert_max_num_queries):
    loc = make_location(make_host())
    inv = make_inventory(loc)
    one = queries_for(signed_in, f"/fleet/inventories/{inv.pk}/")
    now = timezone.now()
    for _ in range(30):
        make_inventory(loc, InventoryStatus.FAILED)
    ShardFile.objects.bulk_create(
        ShardFile(location=loc, path=f"f{i}", size=i, mtime=now, first_seen_at=now, changed_at=now, changed_by=inv)
        for i in range(150)
    )
    with django_assert_max_num_queries(one):
        assert signed_in.get(f"/fleet/inventories/{inv.pk}/").status_code == 200


def test_a_missing_inventory_gets_a_friendly_404(signed_in):
    response = signed_in.get("/fleet/inventories/999999/")
    assert response.status_code == 404
    assert b"There is nothing at this address" in response.content
