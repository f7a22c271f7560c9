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
    assert "vision/vit/checkpoint-10/model.safetensors" in html.replace("<wbr>", "")  # a path may wrap after a /
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


# --- buckets --------------------------------------------------------------------------------------


def make_bucket(name: str = "ckpt-eu", **fields):
    from audit.actor import Actor
    from ingest.scan import bucket_add

    fields.setdefault("endpoint_url", "http://127.0.0.1:9")
    fields.setdefault("region_name", "eu-west-1")
    return bucket_add(
        name=f"s3:{name}", bucket_name=name, prefix="fleet/", actor=Actor.command(label="tests"), **fields
    )


def make_scan(location: StorageLocation, status: str = InventoryStatus.APPLIED, **fields) -> Inventory:
    return make_inventory(location, status, host=None, source="bucket_listing", **fields)


def add_files(
    location: StorageLocation, tiers: dict[str, tuple[int, int]], *, gone: int = 0, prefix: str = "f"
) -> None:
    """``tiers`` maps a tier to (files, bytes per file); ``gone`` files of 1 GiB each are present no more."""
    now = timezone.now()
    rows = []
    for tier, (n, size) in tiers.items():
        rows += [
            ShardFile(
                location=location,
                path=f"{prefix}/{tier}/{i}",
                size=size,
                mtime=now,
                tier=tier,
                storage_class=tier.upper(),
                first_seen_at=now,
                changed_at=now,
            )
            for i in range(n)
        ]
    rows += [
        ShardFile(
            location=location,
            path=f"{prefix}/gone/{i}",
            size=2**30,
            mtime=now,
            tier="object_standard",
            first_seen_at=now,
            changed_at=now,
            gone_at=now,
        )
        for i in range(gone)
    ]
    ShardFile.objects.bulk_create(rows)
    refresh_usage(location)


def refresh_usage(location: StorageLocation) -> None:
    """Roll the location's present files up, as applying a scan does in the same transaction."""
    from fleet.pricebook import utc_today
    from spend.usage import usage_refresh

    usage_refresh(location=location, day=utc_today())


def add_version(location: StorageLocation, key: str, size: int, *, marker: bool = False, gone: bool = False):
    from fleet.models import ObjectVersion

    now = timezone.now()
    return ObjectVersion.objects.create(
        location=location,
        key=key,
        version_id=f"v-{key}-{size}-{marker}",
        size=0 if marker else size,
        last_modified=now,
        storage_class="" if marker else "STANDARD",
        delete_marker=marker,
        first_seen_at=now,
        gone_at=now if gone else None,
    )


def add_upload(location: StorageLocation, key: str = "fleet/llm/run/step-9/__0_0.distcp", size: int | None = 5 * 2**20):
    from fleet.models import MultipartUpload

    now = timezone.now()
    return MultipartUpload.objects.create(
        location=location, key=key, upload_id=f"u-{key}", initiated_at=now, parts=1, bytes=size, first_seen_at=now
    )


def test_buckets_show_their_last_scan_objects_bytes_by_tier_and_incomplete_uploads(signed_in):
    bucket = make_bucket(site="aws-euw1")
    loc = bucket.location
    inv = make_scan(loc, files_count=12, bytes_total=3 * 2**20, files_added=12, files_changed=0, files_gone=0)
    add_files(loc, {"object_standard": (10, 2**20), "deep_archive": (2, 3 * 2**30)}, gone=4)
    add_upload(loc)
    refresh_usage(loc)
    make_location(make_host())

    response = signed_in.get("/fleet/")
    html = response.content.decode()

    assert response.status_code == 200
    assert 'id="buckets"' in html and f'id="location-{loc.pk}"' in html
    assert "s3://ckpt-eu/fleet/" in html and "http://127.0.0.1:9" in html
    assert "failure domain eu-west-1 / aws-euw1" in html
    assert "credentials <code>default</code>" in html and "scanned every 60 minutes" in html
    assert "checksums read again every 7 days" in html
    assert f'href="/fleet/inventories/{inv.pk}/"' in html and "Applied" in html
    assert "12 objects" in html and "1 min 24 s" in html
    # Present objects only (the 4 GiB that are gone do not count), hottest tier first, with units.
    standard = html.index("Object storage, standard: <strong")
    deep = html.index("Deep archive (restore in hours): <strong")
    assert standard < deep
    assert '10.0 MiB</strong> <span class="muted">in 10 objects' in html
    assert '6.0 GiB</strong> <span class="muted">in 2 objects' in html
    assert "1 upload</a>" in html and "5.0 MiB of parts" in html
    assert f'action="/fleet/locations/{loc.pk}/scan/"' in html
    assert f'data-scan-api="/api/v1/locations/{loc.pk}/scan/"' in html
    assert "js/scan.js" in html
    assert "1 bucket" in html and "1 host" in html


def test_a_bucket_never_scanned_and_empty_says_so(signed_in):
    make_bucket()
    html = signed_in.get("/fleet/").content.decode()
    assert "Never scanned" in html
    assert "No objects known yet" in html
    assert "No host reports to this fleet yet" in html  # buckets only: the hosts part says how to add one
    assert "Scan now" in html


def test_a_failed_scan_shows_its_error_and_that_nothing_was_applied(signed_in):
    loc = make_bucket().location
    make_scan(
        loc,
        InventoryStatus.FAILED,
        error="listing s3://ckpt-eu/fleet/ failed: AccessDenied: Access Denied (1 attempt)",
    )
    html = signed_in.get("/fleet/").content.decode()
    assert "Scan failed" in html
    assert "AccessDenied: Access Denied" in html
    assert "nothing of this bucket is known yet" in html
    assert "1 location</strong> rejected its last inventory" in html


def test_the_warnings_of_an_applied_scan_are_listed_under_the_bucket(signed_in):
    loc = make_bucket().location
    make_scan(loc, error="warning: skipped 2 key(s) that are not safe paths\nnote: 1 manifest object(s)")
    html = signed_in.get("/fleet/").content.decode()
    assert "<li>warning: skipped 2 key(s) that are not safe paths</li>" in html
    assert "<li>note: 1 manifest object(s)</li>" in html
    assert "Scan failed" not in html


def test_a_running_scan_shows_the_objects_counted_so_far_and_is_followed(signed_in):
    loc = make_bucket().location
    make_scan(loc)
    running = make_scan(loc, InventoryStatus.PROCESSING, files_count=12345, bytes_total=2**30)
    html = signed_in.get("/fleet/").content.decode()
    assert f"Scan #{running.pk} is running: 12,345 objects (1.0 GiB) so far." in html
    assert f'data-running="/api/v1/inventories/{running.pk}/"' in html
    assert "disabled" in html


def test_the_fleet_query_count_does_not_grow_with_buckets_their_files_and_uploads(
    signed_in, django_assert_max_num_queries
):
    loc = make_bucket("ckpt-000").location
    make_scan(loc)
    make_scan(loc, InventoryStatus.PROCESSING)
    add_files(loc, {"object_standard": (2, 10)})
    make_location(make_host("h-000"))
    one = queries_for(signed_in, "/fleet/")
    for i in range(1, 12):
        loc = make_bucket(f"ckpt-{i:03d}").location
        make_scan(loc, InventoryStatus.FAILED if i % 3 == 0 else InventoryStatus.APPLIED)
        if i % 2:
            make_scan(loc, InventoryStatus.PROCESSING)
        add_upload(loc, size=None if i % 4 == 0 else 100)
        add_version(loc, f"fleet/llm/{i}", 10)
        add_version(loc, f"fleet/llm/{i}", 0, marker=True)
        add_files(loc, {"object_standard": (3, 10), "archive": (2, 10), "deep_archive": (1, 10)}, gone=1)
    with django_assert_max_num_queries(one):
        assert signed_in.get("/fleet/").status_code == 200


def test_bytes_by_tier_come_from_the_usage_rollup_never_from_shard_files(signed_in):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    loc = make_bucket().location
    make_scan(loc)
    add_files(loc, {"object_standard": (3, 2**20)})
    # Files written after the last rollup are not on the page until a scan rolls them up again:
    # proof that the page reads the rollup, not a GROUP BY over shard files.
    now = timezone.now()
    ShardFile.objects.create(
        location=loc, path="late/0", size=2**30, mtime=now, tier="archive", first_seen_at=now, changed_at=now
    )
    with CaptureQueriesContext(connection) as ctx:
        html = signed_in.get("/fleet/").content.decode()
    assert '3.0 MiB</strong> <span class="muted">in 3 objects' in html
    assert "Archive" not in html.split('id="buckets"')[1].split("</section>")[0]
    assert not [q["sql"] for q in ctx.captured_queries if "catalog_shardfile" in q["sql"]]

    refresh_usage(loc)
    html = signed_in.get("/fleet/").content.decode()
    assert '1.0 GiB</strong> <span class="muted">in 1 object' in html


def test_a_versioned_bucket_shows_the_bytes_of_its_non_current_versions(signed_in):
    loc = make_bucket().location
    make_scan(loc)
    add_version(loc, "fleet/llm/run/step-1/__0_0.distcp", 3 * 2**20)
    add_version(loc, "fleet/llm/run/step-1/__1_0.distcp", 2**20)
    add_version(loc, "fleet/llm/run/step-1/__1_0.distcp", 0, marker=True)
    add_version(loc, "fleet/llm/run/step-0/__0_0.distcp", 2**30, gone=True)  # expired: no longer billed

    html = signed_in.get("/fleet/").content.decode()

    assert "Non-current versions: <strong" in html
    assert "4.0 MiB</strong>" in html
    assert "in 2 versions, 1 delete marker" in html


def test_a_bucket_without_non_current_versions_does_not_mention_them(signed_in):
    loc = make_bucket().location
    make_scan(loc)
    add_files(loc, {"object_standard": (1, 10)})
    assert "Non-current versions" not in signed_in.get("/fleet/").content.decode()


def test_it_sends_a_stranger_to_the_login_page_instead_of_scanning(client):
    loc = make_bucket().location
    response = client.post(f"/fleet/locations/{loc.pk}/scan/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    assert not Inventory.objects.exists()


def test_the_scan_button_is_a_post(signed_in):
    loc = make_bucket().location
    assert signed_in.get(f"/fleet/locations/{loc.pk}/scan/").status_code == 405
    assert not Inventory.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_scan_now_without_javascript_scans_and_says_how_it_went(signed_in, s3):
    from audit.models import AuditEvent

    name = s3.bucket()
    s3.upload_tree(name, "nvme-a", prefix="fleet/")
    bucket = s3.register(name, prefix="fleet/")

    # Committed as it goes, as in production: without a worker the scan runs once scan_start commits.
    response = signed_in.post(f"/fleet/locations/{bucket.location.pk}/scan/", follow=True)

    inventory = Inventory.objects.get(location=bucket.location)
    assert inventory.status == InventoryStatus.APPLIED, inventory.error
    assert response.redirect_chain[-1][0] == f"/fleet/locations/{bucket.location.pk}/"
    html = response.content.decode()
    assert f"Scan #{inventory.pk} of {bucket.location.name} applied: 9 objects" in html
    event = AuditEvent.objects.get(action="location.scan")
    assert (event.actor_label, event.source) == ("ada", "ui")


def test_scan_now_while_a_scan_runs_says_so_in_words(signed_in):
    loc = make_bucket().location
    running = make_scan(loc, InventoryStatus.PROCESSING)
    response = signed_in.post(f"/fleet/locations/{loc.pk}/scan/", follow=True)
    html = response.content.decode()
    assert response.status_code == 200
    assert f"is already processing (inventory #{running.pk})" in html
    assert "Traceback" not in html
    assert Inventory.objects.filter(location=loc).count() == 1


def test_scan_now_of_a_host_location_is_refused_in_words(signed_in):
    loc = make_location(make_host())
    response = signed_in.post(f"/fleet/locations/{loc.pk}/scan/", follow=True)
    assert "is not a bucket: hosts report their own inventories" in response.content.decode()
    assert not Inventory.objects.exists()


def test_the_api_the_button_uses_needs_the_csrf_token_and_answers_409_while_a_scan_runs(django_user_model):
    from django.test import Client

    from tests.conftest import give_roles

    user = django_user_model.objects.create_user(username="ada", password="a-long-password-1")
    give_roles(user, "operator")
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(user)
    loc = make_bucket().location
    page = browser.get("/fleet/")
    token = page.context["csrf_token"]
    url = f"/api/v1/locations/{loc.pk}/scan/"

    assert browser.post(url).status_code == 403  # no token: refused before anything starts
    assert not Inventory.objects.exists()

    running = make_scan(loc, InventoryStatus.PROCESSING)
    refused = browser.post(url, HTTP_X_CSRFTOKEN=str(token), HTTP_ACCEPT="application/json")
    assert refused.status_code == 409
    assert refused.json()["error"] == "scan_running"
    assert f"#{running.pk}" in refused.json()["detail"]

    Inventory.objects.filter(pk=running.pk).update(status=InventoryStatus.APPLIED)
    started = browser.post(url, HTTP_X_CSRFTOKEN=str(token), HTTP_ACCEPT="application/json")
    assert started.status_code == 202
    assert started.json()["url"] == f"/api/v1/inventories/{started.json()['id']}/"
    polled = browser.get(started.json()["url"], HTTP_ACCEPT="application/json").json()
    assert {"status", "files_count", "bytes_total", "error"} <= set(polled)


@pytest.mark.parametrize(
    ("model_name", "shown"), [("bucket", "s3://ckpt-eu/fleet/"), ("multipartupload", "fleet/llm/run/step-9/__0_0")]
)
def test_the_admin_shows_buckets_and_incomplete_uploads_and_changes_nothing(admin_client, model_name, shown):
    loc = make_bucket().location
    add_upload(loc, size=None)
    listing = admin_client.get(f"/admin/fleet/{model_name}/")
    assert listing.status_code == 200
    assert shown in listing.content.decode()
    assert admin_client.get(f"/admin/fleet/{model_name}/add/").status_code == 403
    pk = loc.pk if model_name == "bucket" else loc.multipart_uploads.get().pk
    assert admin_client.post(f"/admin/fleet/{model_name}/{pk}/delete/", {"post": "yes"}).status_code == 403
    assert admin_client.get(f"/admin/fleet/{model_name}/{pk}/change/").status_code == 200  # a read-only view
