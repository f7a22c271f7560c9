"""Scans against moto's S3 server: non-current versions, the listing's fast paths, checksums after the snapshot.

Non-current versions cost money and no object listing shows them; a scan of a versioned bucket lists
them (ListObjectVersions) and records them apart from the objects. The rest checks the speed-ups of
the listing path keep its answers: one range query per page to find what is known, ISO timestamps
parsed without dateutil, ranged GETs of several pages in flight, HEADs after the snapshot is applied.
"""

from __future__ import annotations

import hashlib
import threading
from datetime import UTC, datetime

import pytest
from botocore.utils import parse_timestamp
from django.db import connection
from django.test.utils import CaptureQueriesContext

import fleet.s3 as s3lib
from catalog.models import CheckpointCopy, ShardFile
from fleet.choices import InventoryStatus
from fleet.models import ObjectVersion
from ingest.scan import fetch as scan_fetch
from ingest.scan import listing as scan_listing
from ingest.scan import objects as scan_objects
from ingest.scan import scanner as scan_scanner
from tests.helpers.scan import copies_at, snapshot
from tests.helpers.trees import EXPECTED, tree_files

pytestmark = [pytest.mark.services, pytest.mark.django_db]


def versions_at(location, *, present: bool = True) -> dict[tuple[str, str], tuple[int, bool]]:
    rows = ObjectVersion.objects.filter(location=location, gone_at__isnull=present is True)
    return {(v.key, v.version_id): (v.size, v.delete_marker) for v in rows}


# --- versioned buckets ----------------------------------------------------------------------------


def test_a_versioned_bucket_records_its_non_current_versions_with_their_bytes(s3, scan_now):
    name = s3.bucket(versioned=True)
    old = s3.put(name, "vision/vit/run.ckpt", b"first save")
    current = s3.put(name, "vision/vit/run.ckpt", b"second save!")
    removed = s3.put(name, "vision/vit/old.ckpt", b"x" * 300)
    marker = s3.client.delete_object(Bucket=name, Key="vision/vit/old.ckpt")  # a delete marker is now current
    bucket = s3.register(name, fetch_checksums=False)

    inventory = scan_now(bucket)

    assert inventory.status == InventoryStatus.APPLIED, inventory.error
    # The objects are what a listing shows; the older versions are recorded apart, with their bytes.
    assert [(f.path, f.version_id) for f in ShardFile.objects.filter(location=bucket.location)] == [
        ("vision/vit/run.ckpt", current["VersionId"])
    ]
    assert versions_at(bucket.location) == {
        ("vision/vit/run.ckpt", old["VersionId"]): (len(b"first save"), False),
        ("vision/vit/old.ckpt", removed["VersionId"]): (300, False),
    }
    assert marker["DeleteMarker"] is True

    # A version deleted for good (a lifecycle rule, a person) is marked gone by the next scan; an
    # overwrite makes the current version non-current; a delete marker that is no longer current is kept.
    s3.client.delete_object(Bucket=name, Key="vision/vit/run.ckpt", VersionId=old["VersionId"])
    s3.put(name, "vision/vit/old.ckpt", b"restored")
    newest = s3.put(name, "vision/vit/run.ckpt", b"third save!!")

    inventory = scan_now(bucket)

    assert inventory.status == InventoryStatus.APPLIED, inventory.error
    present = versions_at(bucket.location)
    assert present[("vision/vit/run.ckpt", current["VersionId"])] == (len(b"second save!"), False)
    assert present[("vision/vit/old.ckpt", removed["VersionId"])] == (300, False)
    assert present[("vision/vit/old.ckpt", marker["VersionId"])] == (0, True)
    assert len(present) == 3
    assert versions_at(bucket.location, present=False) == {
        ("vision/vit/run.ckpt", old["VersionId"]): (len(b"first save"), False)
    }
    assert ShardFile.objects.get(path="vision/vit/run.ckpt", gone_at__isnull=True).version_id == newest["VersionId"]

    # Scanning again changes nothing.
    before = list(ObjectVersion.objects.order_by("pk").values_list("pk", "gone_at", "storage_class"))
    assert scan_now(bucket).status == InventoryStatus.APPLIED
    assert list(ObjectVersion.objects.order_by("pk").values_list("pk", "gone_at", "storage_class")) == before


def test_a_bucket_without_versioning_is_not_asked_for_versions(s3, scan_now, s3_calls):
    name = s3.bucket()
    s3.put(name, "vision/vit/run.ckpt", b"only")
    bucket = s3.register(name, fetch_checksums=False)

    assert scan_now(bucket).status == InventoryStatus.APPLIED
    assert s3_calls["ListObjectVersions"] == 0
    assert not ObjectVersion.objects.exists()


def test_versions_the_store_refuses_to_list_are_kept_as_last_known(s3, scan_now, monkeypatch):
    name = s3.bucket(versioned=True)
    first = s3.put(name, "vision/vit/run.ckpt", b"one")
    s3.put(name, "vision/vit/run.ckpt", b"two")
    bucket = s3.register(name, fetch_checksums=False)
    assert scan_now(bucket).status == InventoryStatus.APPLIED
    assert set(versions_at(bucket.location)) == {("vision/vit/run.ckpt", first["VersionId"])}

    def refused(client, bucket_name, prefix):
        raise s3lib.S3Error("AccessDenied: Access Denied (ListObjectVersions)", code="AccessDenied")
        yield  # a generator, like the real one

    monkeypatch.setattr(s3lib, "noncurrent_versions", refused)
    s3.client.delete_object(Bucket=name, Key="vision/vit/run.ckpt", VersionId=first["VersionId"])
    inventory = scan_now(bucket)

    assert inventory.status == InventoryStatus.APPLIED
    assert "non-current versions could not be listed" in inventory.error
    assert set(versions_at(bucket.location)) == {("vision/vit/run.ckpt", first["VersionId"])}  # unknown is not gone


# --- the listing's fast paths ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        "2026-11-22T01:02:03.000Z",
        "2026-11-22T01:02:03Z",
        "2026-11-22T01:02:03.123456+02:00",
        "Sun, 22 Nov 2026 01:02:03 GMT",  # HEAD's Last-Modified: botocore's own parser
        "1795046400",
    ],
)
def test_listing_timestamps_are_read_as_botocore_reads_them(value):
    assert s3lib._timestamp(value) == parse_timestamp(value)
    assert s3lib._timestamp(value).utcoffset().total_seconds() == 0


def test_a_client_parses_listing_times_without_dateutil(s3, monkeypatch):
    name = s3.bucket()
    s3.put(name, "a.ckpt", b"a")
    seen: list[str] = []
    original = s3lib._timestamp

    def spy(value):
        seen.append(value)
        return original(value)

    monkeypatch.setattr(s3lib, "_timestamp", spy)
    client = s3lib.make_client(endpoint_url=s3.url, region_name="us-east-1", addressing_style="path")
    [page] = list(s3lib.list_pages(client, name, ""))
    assert seen and seen[0].endswith("Z")
    assert page.objects[0].last_modified.tzinfo is not None


def test_a_rescan_finds_what_it_knows_with_one_range_query_per_page(s3, scan_now, monkeypatch):
    monkeypatch.setattr(s3lib, "PAGE_SIZE", 4)
    monkeypatch.setattr(scan_listing, "PARALLEL_MIN_PREFIXES", 10**6)  # one sequence of pages
    name = s3.bucket()
    s3.upload_tree(name, "pfs")
    bucket = s3.register(name)
    assert scan_now(bucket).status == InventoryStatus.APPLIED
    before = snapshot(bucket.location)
    pages = -(-len(tree_files("pfs")) // 4)

    with CaptureQueriesContext(connection) as ctx:
        inventory = scan_now(bucket)

    assert (inventory.files_added, inventory.files_changed, inventory.files_gone) == (0, 0, 0)
    assert snapshot(bucket.location) == before
    lookups = [q["sql"] for q in ctx.captured_queries if '"catalog_shardfile"."facts"' in q["sql"]]
    assert len(lookups) == pages
    assert all(">=" in sql and "<=" in sql and " IN (" not in sql for sql in lookups)


def test_the_rows_of_each_page_keep_their_order_while_later_pages_are_read(s3, scan_now, monkeypatch):
    # Several pages' ranged GETs in flight; the first page's manifest is slow, the others are not.
    monkeypatch.setattr(s3lib, "PAGE_SIZE", 3)
    monkeypatch.setattr(scan_listing, "PARALLEL_MIN_PREFIXES", 10**6)
    name = s3.bucket()
    s3.upload_tree(name, "nvme-a")
    bucket = s3.register(name, fetch_checksums=False)
    original = scan_fetch.Fetcher.fetch
    started = threading.Event()
    order: list[str] = []

    def slow_first(self, path, obj, **kwargs):
        if not started.is_set():
            started.set()
            threading.Event().wait(0.3)
        order.append(path)
        return original(self, path, obj, **kwargs)

    monkeypatch.setattr(scan_fetch.Fetcher, "fetch", slow_first)
    staged: list[str] = []
    original_row = scan_objects.ObjectRows._row

    def record(self, job, info, fetched):
        staged.append(job.path)
        return original_row(self, job, info, fetched)

    monkeypatch.setattr(scan_objects.ObjectRows, "_row", record)

    inventory = scan_now(bucket)

    assert inventory.status == InventoryStatus.APPLIED, inventory.error
    assert staged and staged == sorted(staged)  # pages are staged in listing order, whatever finished first
    assert len(order) >= 2
    assert copies_at(bucket.location) == {(p, f, s, "complete") for p, f, s in EXPECTED["nvme-a"]}


def test_checksums_are_fetched_after_the_snapshot_and_verify_the_copies(s3, scan_now, monkeypatch):
    name = s3.bucket()
    content = tree_files("nvme-a")
    s3.upload_tree(name, "nvme-a")
    bucket = s3.register(name)
    seen_applied: list[str] = []
    original = scan_scanner.Scanner.fetch_stored

    def after_apply(self):
        # By the time HEADs start, the listing is applied and visible, without checksums yet.
        seen_applied.append(self.inventory.__class__.objects.get(pk=self.inventory.pk).status)
        assert not ShardFile.objects.filter(location=bucket.location).exclude(checksum="").exists()
        original(self)

    monkeypatch.setattr(scan_scanner.Scanner, "fetch_stored", after_apply)

    inventory = scan_now(bucket)

    assert inventory.status == InventoryStatus.APPLIED, inventory.error
    assert seen_applied == [InventoryStatus.APPLIED]
    for f in ShardFile.objects.filter(location=bucket.location):
        assert (f.checksum_algo, f.checksum) == ("sha256", hashlib.sha256(content[f.path]).hexdigest()), f.path
    verified = CheckpointCopy.objects.filter(location=bucket.location, verification="verified")
    assert verified.exists()  # the sidecar's sha256s agree with what S3 kept

    # Nothing changed: the next scan HEADs nothing.
    heads: list[str] = []
    monkeypatch.setattr(scan_fetch.Fetcher, "head", lambda self, item: heads.append(item[1]))
    assert scan_now(bucket).status == InventoryStatus.APPLIED
    assert heads == []


def test_an_object_rewritten_between_listing_and_head_keeps_no_checksum_of_other_content(s3, scan_now, monkeypatch):
    name = s3.bucket()
    s3.put(name, "vision/vit/run.ckpt", b"listed content")
    bucket = s3.register(name)
    original = scan_scanner.Scanner.fetch_stored

    def rewrite_first(self):
        s3.put(name, "vision/vit/run.ckpt", b"other content, written after the listing")
        original(self)

    monkeypatch.setattr(scan_scanner.Scanner, "fetch_stored", rewrite_first)
    inventory = scan_now(bucket)

    assert inventory.status == InventoryStatus.APPLIED, inventory.error
    f = ShardFile.objects.get(path="vision/vit/run.ckpt")
    assert f.size == len(b"listed content")
    assert f.checksum == ""  # the conditional HEAD saw another ETag: no checksum is paired with this size
    assert datetime.now(UTC) >= f.mtime
