"""Failure is not absence: a bucket scan that meets throttling, refusals or timeouts.

The scanner talks to a failing endpoint: a small HTTP proxy in front of moto's server that answers
chosen requests with an S3 error (or too late) and forwards the rest, so botocore's real retry
machinery is what the scan goes through. Backoff delays are shortened; the attempts are real.
"""

from __future__ import annotations

from collections.abc import Callable

import botocore.retries.standard
import pytest

import fleet.s3 as s3lib
from catalog.models import CheckpointCopy, ShardFile
from fleet.choices import InventoryStatus
from fleet.models import MultipartUpload, StorageLocation
from ingest.scan import listing as scan_listing
from tests.helpers.faults import FaultyEndpoint
from tests.helpers.scan import snapshot
from tests.helpers.trees import tree_files

pytestmark = [pytest.mark.services, pytest.mark.django_db]


def mid_listing(method: str, path: str, query: dict) -> bool:
    """Any ListObjectsV2 page after the first."""
    return method == "GET" and "list-type" in query and "continuation-token" in query


def listing_of(prefix: str) -> Callable[[str, str, dict], bool]:
    return lambda method, path, query: "list-type" in query and query.get("prefix") == [prefix]


def get_of(suffix: str) -> Callable[[str, str, dict], bool]:
    return lambda method, path, query: method == "GET" and not query and path.endswith(suffix)


def head_of_any(method: str, path: str, query: dict) -> bool:
    return method == "HEAD"


@pytest.fixture
def faulty(s3, monkeypatch):
    """A failing endpoint in front of the test server, three attempts per request and no waiting between them."""
    monkeypatch.setattr(s3lib, "MAX_ATTEMPTS", 3)
    monkeypatch.setattr(botocore.retries.standard.ExponentialBackoff, "delay_amount", lambda self, context: 0.0)
    endpoint = FaultyEndpoint(s3.url)
    yield endpoint
    endpoint.close()


@pytest.fixture
def listed(s3, faulty, scan_now, monkeypatch):
    """The nvme-a tree in a bucket reached through the failing endpoint, scanned once without faults.

    Pages of 4 keys and no parallel listing, so that "mid-listing" is the same request every time.
    """
    monkeypatch.setattr(s3lib, "PAGE_SIZE", 4)
    monkeypatch.setattr(scan_listing, "PARALLEL_MIN_PREFIXES", 10**6)
    name = s3.bucket()
    s3.upload_tree(name, "nvme-a")
    bucket = s3.register(name, endpoint_url=faulty.url)
    first = scan_now(bucket)
    assert first.status == InventoryStatus.APPLIED, first.error
    return name, bucket


def assert_nothing_changed(location, before, applied_at) -> None:
    assert snapshot(location) == before
    assert not ShardFile.objects.filter(location=location, gone_at__isnull=False).exists()
    location.refresh_from_db()
    assert location.last_applied_at == applied_at
    assert not CheckpointCopy.objects.filter(location=location, gone_at__isnull=False).exists()


def test_slowdown_mid_listing_is_retried_and_the_scan_applies(s3, faulty, listed, scan_now):
    name, bucket = listed
    s3.client.delete_object(Bucket=name, Key="vision/resnet-tiny/epoch=1-step=200.ckpt")
    fault = faulty.fail(mid_listing, times=2)

    inventory = scan_now(bucket)

    assert inventory.status == InventoryStatus.APPLIED, inventory.error
    assert fault.served == 2
    assert (inventory.files_count, inventory.files_gone) == (8, 1)


def test_a_listing_that_keeps_failing_fails_the_scan_and_marks_nothing_gone(s3, faulty, listed, scan_now):
    name, bucket = listed
    before = snapshot(bucket.location)
    applied_at = StorageLocation.objects.get(pk=bucket.location.pk).last_applied_at
    for key in ("llm/llama-tiny/step-200/__1_0.distcp", "vision/resnet-tiny/epoch=1-step=200.ckpt"):
        s3.client.delete_object(Bucket=name, Key=key)  # gone for real, but this scan cannot know
    fault = faulty.fail(mid_listing)

    inventory = scan_now(bucket)

    assert inventory.status == InventoryStatus.FAILED
    assert fault.served == 3  # every attempt botocore was allowed
    assert "SlowDown: Please reduce your request rate." in inventory.error
    assert "3 attempts" in inventory.error
    assert "Nothing was applied or marked gone" in inventory.error
    assert_nothing_changed(bucket.location, before, applied_at)
    assert StorageLocation.objects.get(pk=bucket.location.pk).last_inventory_id == inventory.pk


def test_access_denied_mid_listing_is_not_retried_and_fails_the_scan(faulty, listed, scan_now):
    _, bucket = listed
    before = snapshot(bucket.location)
    applied_at = StorageLocation.objects.get(pk=bucket.location.pk).last_applied_at
    fault = faulty.fail(mid_listing, status=403, code="AccessDenied", message="Access Denied")

    inventory = scan_now(bucket)

    assert inventory.status == InventoryStatus.FAILED
    assert fault.served == 1
    assert "AccessDenied: Access Denied (ListObjectsV2 of s3://" in inventory.error
    assert_nothing_changed(bucket.location, before, applied_at)


def test_a_listing_that_times_out_is_retried_then_fails_the_scan(faulty, listed, scan_now, monkeypatch):
    _, bucket = listed
    before = snapshot(bucket.location)
    applied_at = StorageLocation.objects.get(pk=bucket.location.pk).last_applied_at
    monkeypatch.setattr(s3lib, "READ_TIMEOUT", 0.3)
    fault = faulty.fail(mid_listing, delay=1.0)

    inventory = scan_now(bucket)

    assert inventory.status == InventoryStatus.FAILED
    assert fault.served == 3
    assert "ReadTimeoutError" in inventory.error
    assert_nothing_changed(bucket.location, before, applied_at)


def test_one_prefix_failing_in_a_parallel_listing_fails_the_whole_scan(s3, faulty, scan_now, monkeypatch):
    monkeypatch.setattr(s3lib, "PAGE_SIZE", 4)
    name = s3.bucket()
    s3.upload_tree(name, "pfs")
    bucket = s3.register(name, endpoint_url=faulty.url)
    assert scan_now(bucket).status == InventoryStatus.APPLIED
    before = snapshot(bucket.location)
    applied_at = StorageLocation.objects.get(pk=bucket.location.pk).last_applied_at
    s3.client.delete_object(Bucket=name, Key="speech/ds-tiny/latest")
    fault = faulty.fail(listing_of("nlp/"), status=503, code="ServiceUnavailable", message="Service Unavailable")

    inventory = scan_now(bucket)

    assert inventory.status == InventoryStatus.FAILED
    assert fault.served == 3
    assert "ServiceUnavailable" in inventory.error and "s3://" in inventory.error
    assert_nothing_changed(bucket.location, before, applied_at)


def test_a_store_struggling_with_head_requests_keeps_the_listing_and_says_checksums_are_missing(s3, faulty, scan_now):
    # HEADs come after the snapshot is applied: the listing stands, the checksums are simply not known.
    name = s3.bucket()
    s3.upload_tree(name, "nvme-a")
    bucket = s3.register(name, endpoint_url=faulty.url)
    fault = faulty.fail(head_of_any)

    inventory = scan_now(bucket)

    assert inventory.status == InventoryStatus.APPLIED
    assert fault.served >= 3
    assert "HeadObject" in inventory.error and "stored checksums" in inventory.error
    assert ShardFile.objects.filter(location=bucket.location).count() == len(tree_files("nvme-a"))
    assert not ShardFile.objects.exclude(checksum="").exists()
    assert not CheckpointCopy.objects.filter(location=bucket.location, verification="verified").exists()


def test_a_manifest_get_that_slows_down_once_is_retried(s3, faulty, scan_now):
    name = s3.bucket()
    s3.upload_tree(name, "nvme-a")
    bucket = s3.register(name, endpoint_url=faulty.url)
    fault = faulty.fail(get_of("/step-100/.metadata"), times=1)

    inventory = scan_now(bucket)

    assert inventory.status == InventoryStatus.APPLIED, inventory.error
    assert fault.served == 1
    assert ShardFile.objects.get(path="llm/llama-tiny/step-100/.metadata").facts["kind"] == "dcp_metadata"
    assert "error" not in ShardFile.objects.get(path="llm/llama-tiny/step-100/.metadata").facts


def test_a_manifest_refused_to_the_scanner_is_unreadable_and_read_again_next_time(s3, faulty, scan_now):
    name = s3.bucket()
    s3.upload_tree(name, "nvme-a")
    bucket = s3.register(name, endpoint_url=faulty.url)
    fault = faulty.fail(
        get_of("/step-100/.metadata"), status=403, code="AccessDenied", message="Access Denied", times=1
    )

    inventory = scan_now(bucket)

    assert inventory.status == InventoryStatus.APPLIED, inventory.error
    assert fault.served == 1
    facts = ShardFile.objects.get(path="llm/llama-tiny/step-100/.metadata").facts
    assert facts["kind"] == "dcp_metadata" and "AccessDenied" in facts["error"]
    copy = CheckpointCopy.objects.get(location=bucket.location, path="llm/llama-tiny/step-100")
    assert copy.state == "corrupt" and any("cannot be read" in r for r in copy.reasons)

    # An unreadable fact is never reused: the next scan reads the manifest again, and now it can.
    inventory = scan_now(bucket)
    assert inventory.files_changed == 1
    copy.refresh_from_db()
    assert copy.state == "complete"


def test_uploads_that_cannot_be_listed_are_unknown_not_gone(s3, faulty, scan_now):
    name = s3.bucket()
    s3.upload_tree(name, "nvme-a")
    s3.client.create_multipart_upload(Bucket=name, Key="llm/llama-tiny/step-300/__0_0.distcp")
    bucket = s3.register(name, endpoint_url=faulty.url)
    assert scan_now(bucket).status == InventoryStatus.APPLIED
    assert MultipartUpload.objects.filter(location=bucket.location, gone_at__isnull=True).count() == 1
    faulty.fail(lambda m, p, q: "uploads" in q, status=403, code="AccessDenied", message="Access Denied")

    inventory = scan_now(bucket)

    assert inventory.status == InventoryStatus.APPLIED, inventory.error
    assert "incomplete multipart uploads could not be listed" in inventory.error
    assert MultipartUpload.objects.filter(location=bucket.location, gone_at__isnull=True).count() == 1


def test_a_refused_bucket_configuration_keeps_the_last_known_one(s3, faulty, scan_now):
    name = s3.bucket(versioned=True)
    s3.put(name, "team/run/model.ckpt", b"x")
    bucket = s3.register(name, endpoint_url=faulty.url)
    assert scan_now(bucket).status == InventoryStatus.APPLIED
    faulty.fail(lambda m, p, q: "versioning" in q, status=403, code="AccessDenied", message="Access Denied")

    inventory = scan_now(bucket)

    assert inventory.status == InventoryStatus.APPLIED, inventory.error
    assert "versioning or Object Lock configuration could not be read" in inventory.error
    bucket.refresh_from_db()
    assert bucket.versioning == "Enabled"
