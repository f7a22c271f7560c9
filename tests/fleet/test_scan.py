"""Bucket scans against a real S3 HTTP endpoint (moto's server): listing, reports, facts, checksums, locks.

Buckets are filled with the committed fixture trees (demo/README.md), uploaded with SHA256
checksums the way a copy job would, so recognition sees the same real checkpoints a host reports.
"""

from __future__ import annotations

import base64
import csv
import gzip
import hashlib
import io
import json
import uuid
import zipfile
from datetime import UTC, datetime, timedelta
from urllib.parse import quote_plus

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

import fleet.s3 as s3lib
from audit.models import AuditEvent
from catalog.models import Checkpoint, CheckpointCopy, Run, ShardFile
from ckptfleet.errors import DomainError
from fleet.agent import scan_root, stream_facts
from fleet.choices import InventorySource, InventoryStatus
from fleet.models import Bucket, Inventory, MultipartUpload, StorageLocation
from ingest import inventory as ingest
from ingest.scan import bucket_add, scan_due, scan_run, scan_start
from ingest.scan import listing as scan_listing
from ingest.scan import scanner as scan_scanner
from ingest.tasks import ingest_inventory
from tests.helpers.scan import copies_at, snapshot
from tests.helpers.trees import EXPECTED, tree_files
from tests.s3 import TREES

pytestmark = [pytest.mark.services, pytest.mark.django_db]


# --- listing real checkpoints ---------------------------------------------------------------------


def test_a_scan_recognises_real_checkpoints_and_joins_the_runs_of_the_host_copies(
    s3, scan_now, make_host, client, django_capture_on_commit_callbacks
):
    kit = make_host()
    lines = [{k: v for k, v in line.items() if k != "type"} for line in scan_root(str(TREES / "nvme-a"))]
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            "/api/v1/inventories/",
            data=kit.body(lines),
            content_type="application/x-ndjson",
            HTTP_CONTENT_ENCODING="gzip",
            **kit.auth(),
        )
    assert response.status_code == 202
    name = s3.bucket()
    s3.upload_tree(name, "nvme-a", prefix="fleet/")
    bucket = s3.register(name, prefix="fleet/", site="aws-use1")

    inventory = scan_now(bucket)

    assert inventory.status == InventoryStatus.APPLIED, inventory.error
    assert inventory.source == InventorySource.BUCKET_LISTING
    assert (inventory.files_count, inventory.files_added, inventory.checkpoints_found) == (9, 9, 4)
    assert inventory.error == ""
    expected = {(path, fmt, step, "complete") for path, fmt, step in EXPECTED["nvme-a"]}
    assert copies_at(bucket.location) == expected
    assert copies_at(kit.location) == expected
    # One run per {team}/{run}, whichever location holds it: each checkpoint has a host and a bucket copy.
    assert set(Run.objects.values_list("team__name", "name")) == {("llm", "llama-tiny"), ("vision", "resnet-tiny")}
    for checkpoint in Checkpoint.objects.all():
        assert set(checkpoint.copies.values_list("location_id", flat=True)) == {kit.location.pk, bucket.location.pk}
    assert bucket.location.failure_region == "us-east-1"
    assert bucket.location.failure_site == "aws-use1"


def test_storage_classes_map_to_tiers_with_the_buckets_own_overrides(s3, scan_now):
    name = s3.bucket()
    s3.upload_tree(
        name,
        "nvme-a",
        classes={"llm/llama-tiny/step-200/*": "DEEP_ARCHIVE", "*.distcp": "GLACIER_IR", "vision/*": "STANDARD_IA"},
    )
    bucket = s3.register(name, storage_class_tiers={"STANDARD_IA": "archive_instant"})

    inventory = scan_now(bucket)

    assert inventory.status == InventoryStatus.APPLIED, inventory.error
    files = {f.path: (f.storage_class, f.tier) for f in ShardFile.objects.all()}
    assert files["llm/llama-tiny/step-100/.metadata"] == ("STANDARD", "object_standard")
    assert files["llm/llama-tiny/step-100/__0_0.distcp"] == ("GLACIER_IR", "archive_instant")
    assert files["llm/llama-tiny/step-200/__0_0.distcp"] == ("DEEP_ARCHIVE", "deep_archive")
    assert files["vision/resnet-tiny/epoch=0-step=100.ckpt"] == ("STANDARD_IA", "archive_instant")  # overridden


def test_a_manifest_in_an_archive_class_is_not_read_and_the_copy_is_judged_from_names(s3, scan_now, s3_calls):
    name = s3.bucket()
    s3.upload_tree(name, "nvme-a", classes={"llm/llama-tiny/step-200/*": "DEEP_ARCHIVE"})
    bucket = s3.register(name)

    inventory = scan_now(bucket)

    assert inventory.status == InventoryStatus.APPLIED, inventory.error
    manifest = ShardFile.objects.get(path="llm/llama-tiny/step-200/.metadata")
    assert manifest.facts is None  # not read: a GET would need a restore first
    assert "archive storage classes were not read" in inventory.error
    copy = CheckpointCopy.objects.get(location=bucket.location, path="llm/llama-tiny/step-200")
    assert copy.state != "corrupt"
    assert any("was not read" in r for r in copy.reasons), copy.reasons
    assert s3_calls[("GetObject", name)] == 3  # step-100's .metadata and the two .ckpt files


def test_stored_sha256_checksums_are_recorded_in_hex_and_checked_against_the_sidecar(s3, scan_now):
    name = s3.bucket()
    s3.upload_tree(name, "nvme-a")
    bucket = s3.register(name)

    assert scan_now(bucket).status == InventoryStatus.APPLIED
    content = tree_files("nvme-a")
    for f in ShardFile.objects.all():
        assert (f.checksum_algo, f.checksum) == ("sha256", hashlib.sha256(content[f.path]).hexdigest()), f.path

    # The same size, other bytes: only the checksum S3 kept can tell, against the sidecar's sha256.
    damaged = bytearray(content["llm/llama-tiny/step-200/__0_0.distcp"])
    damaged[len(damaged) // 2] ^= 0xFF
    s3.put(name, "llm/llama-tiny/step-200/__0_0.distcp", bytes(damaged))
    inventory = scan_now(bucket)
    assert inventory.files_changed == 1
    copy = CheckpointCopy.objects.get(location=bucket.location, path="llm/llama-tiny/step-200")
    assert copy.state == "corrupt"
    assert any("sha256" in r for r in copy.reasons), copy.reasons


def test_a_multipart_objects_composite_checksum_is_not_taken_for_a_sha256_of_it(s3, scan_now):
    name = s3.bucket()
    parts = [b"a" * (5 * 1024 * 1024), b"b" * 1000]
    key = "llm/llama-tiny/exports/weights.dat"
    upload = s3.client.create_multipart_upload(Bucket=name, Key=key, ChecksumAlgorithm="SHA256")
    done = []
    for number, body in enumerate(parts, 1):
        answer = s3.client.upload_part(
            Bucket=name, Key=key, UploadId=upload["UploadId"], PartNumber=number, Body=body, ChecksumAlgorithm="SHA256"
        )
        done.append({"PartNumber": number, "ETag": answer["ETag"], "ChecksumSHA256": answer["ChecksumSHA256"]})
    s3.client.complete_multipart_upload(
        Bucket=name, Key=key, UploadId=upload["UploadId"], MultipartUpload={"Parts": done}
    )
    bucket = s3.register(name)

    assert scan_now(bucket).status == InventoryStatus.APPLIED
    f = ShardFile.objects.get(path=key)
    assert f.checksum_algo == "sha256-composite"
    assert f.checksum != hashlib.sha256(b"".join(parts)).hexdigest()
    assert f.etag.endswith("-2")


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        pytest.param(
            {"ChecksumSHA256": base64.b64encode(bytes(range(32))).decode(), "ChecksumType": "FULL_OBJECT"},
            (bytes(range(32)).hex(), "sha256"),
            id="full-object-sha256-as-hex",
        ),
        pytest.param(
            {"ChecksumSHA256": base64.b64encode(bytes(32)).decode() + "-3", "ETag": '"e-3"'},
            (base64.b64encode(bytes(32)).decode() + "-3", "sha256-composite"),
            id="s3-composite-with-part-count",
        ),
        pytest.param(
            {"ChecksumSHA256": base64.b64encode(bytes(32)).decode(), "ChecksumType": "COMPOSITE"},
            (base64.b64encode(bytes(32)).decode(), "sha256-composite"),
            id="said-composite",
        ),
        pytest.param(
            {"ChecksumSHA256": base64.b64encode(bytes(32)).decode(), "ETag": '"e-2"'},
            (base64.b64encode(bytes(32)).decode(), "sha256-composite"),
            id="multipart-without-a-type-is-composite",
        ),
        pytest.param(
            {"ChecksumCRC32C": base64.b64encode(b"\x01\x02\x03\x04").decode(), "ChecksumType": "FULL_OBJECT"},
            ("01020304", "crc32c"),
            id="full-object-crc32c",
        ),
        pytest.param(
            {"ChecksumCRC64NVME": base64.b64encode(bytes(8)).decode(), "ETag": '"e-9"'},
            ("00" * 8, "crc64nvme"),
            id="crc64nvme-is-always-full-object",
        ),
        pytest.param({"ChecksumSHA256": "not base64!"}, ("", ""), id="garbage"),
        pytest.param({"ETag": '"e"'}, ("", ""), id="none"),
    ],
)
def test_stored_checksums_are_read_as_full_object_or_composite(answer, expected):
    assert s3lib.stored_checksum(answer) == expected


def test_a_locked_versioned_bucket_records_versions_legal_holds_and_retention(s3, scan_now):
    name = s3.bucket(object_lock=True)
    until = datetime(2031, 1, 1, tzinfo=UTC)
    held = "llm/llama-tiny/step-100/.metadata"
    retained = "llm/llama-tiny/step-100/__0_0.distcp"
    answers = s3.upload_tree(
        name,
        "nvme-a",
        extra={
            held: {"ObjectLockLegalHoldStatus": "ON"},
            retained: {"ObjectLockMode": "GOVERNANCE", "ObjectLockRetainUntilDate": until},
        },
    )
    bucket = s3.register(name, fetch_checksums=False)

    inventory = scan_now(bucket)

    assert inventory.status == InventoryStatus.APPLIED, inventory.error
    bucket.refresh_from_db()
    assert (bucket.versioning, bucket.object_lock) == ("Enabled", True)
    files = {f.path: f for f in ShardFile.objects.all()}
    assert {path: f.version_id for path, f in files.items()} == {k: a["VersionId"] for k, a in answers.items()}
    assert files[held].legal_hold is True
    assert files[retained].retain_until == until
    assert files["vision/resnet-tiny/epoch=0-step=100.ckpt"].legal_hold is not True

    # A hold lifted in the bucket changes neither the object nor its ETag; the next scan still sees it.
    s3.client.put_object_legal_hold(Bucket=name, Key=held, LegalHold={"Status": "OFF"})
    inventory = scan_now(bucket)
    assert inventory.files_changed == 1
    assert ShardFile.objects.get(path=held).legal_hold is False


def test_a_versioned_bucket_records_the_current_version_of_each_object(s3, scan_now):
    name = s3.bucket(versioned=True)
    s3.put(name, "vision/vit/run.ckpt", b"first")
    second = s3.put(name, "vision/vit/run.ckpt", b"second!")
    bucket = s3.register(name, fetch_checksums=False)

    assert scan_now(bucket).status == InventoryStatus.APPLIED
    bucket.refresh_from_db()
    assert (bucket.versioning, bucket.object_lock) == ("Enabled", False)
    assert ShardFile.objects.get().version_id == second["VersionId"]


def test_incomplete_multipart_uploads_are_listed_and_marked_gone_once_aborted(s3, scan_now):
    name = s3.bucket()
    s3.upload_tree(name, "nvme-a", prefix="fleet/")
    key = "fleet/llm/llama-tiny/step-300/__0_0.distcp"
    upload = s3.client.create_multipart_upload(Bucket=name, Key=key, StorageClass="STANDARD_IA")
    s3.client.upload_part(Bucket=name, Key=key, UploadId=upload["UploadId"], PartNumber=1, Body=b"x" * 1000)
    s3.client.create_multipart_upload(Bucket=name, Key="elsewhere/big.bin")  # outside the prefix
    bucket = s3.register(name, prefix="fleet/")

    assert scan_now(bucket).status == InventoryStatus.APPLIED
    found = MultipartUpload.objects.get(location=bucket.location)
    assert (found.key, found.upload_id, found.parts, found.bytes) == (key, upload["UploadId"], 1, 1000)
    assert found.storage_class  # as the store reports it (moto says STANDARD whatever was asked)
    assert found.gone_at is None

    assert scan_now(bucket).status == InventoryStatus.APPLIED
    again = MultipartUpload.objects.get(location=bucket.location)
    assert (again.pk, again.first_seen_at, again.gone_at) == (found.pk, found.first_seen_at, None)

    s3.client.abort_multipart_upload(Bucket=name, Key=key, UploadId=upload["UploadId"])
    assert scan_now(bucket).status == InventoryStatus.APPLIED
    assert MultipartUpload.objects.get(location=bucket.location).gone_at is not None


# --- re-scans ------------------------------------------------------------------------------------


def test_rescanning_an_unchanged_bucket_changes_nothing_and_fetches_nothing_again(s3, scan_now, s3_calls):
    name = s3.bucket()
    s3.upload_tree(name, "nvme-a")
    bucket = s3.register(name)
    assert scan_now(bucket).status == InventoryStatus.APPLIED
    assert s3_calls["HeadObject"] == 9
    assert s3_calls["GetObject"] == 5  # two .metadata, the sidecar and the two .ckpt files, one range each
    before = snapshot(bucket.location)
    s3_calls.clear()

    inventory = scan_now(bucket)

    assert inventory.status == InventoryStatus.APPLIED
    assert (inventory.files_added, inventory.files_changed, inventory.files_gone) == (0, 0, 0)
    assert snapshot(bucket.location) == before
    assert s3_calls["GetObject"] == 0
    assert s3_calls["HeadObject"] == 0
    assert s3_calls["ListObjectsV2"] == 1

    # A rewritten manifest is read again, and only it.
    sidecar = "llm/llama-tiny/step-200/ckptfleet.json"
    s3.put(name, sidecar, json.dumps(json.loads(tree_files("nvme-a")[sidecar]), indent=2).encode())
    s3_calls.clear()
    inventory = scan_now(bucket)
    assert (inventory.files_added, inventory.files_changed, inventory.files_gone) == (0, 1, 0)
    assert (s3_calls["GetObject"], s3_calls["HeadObject"]) == (1, 1)


def test_an_object_deleted_from_the_bucket_is_marked_gone_and_its_copy_partial(s3, scan_now):
    name = s3.bucket()
    s3.upload_tree(name, "nvme-a")
    bucket = s3.register(name)
    assert scan_now(bucket).status == InventoryStatus.APPLIED

    s3.client.delete_object(Bucket=name, Key="llm/llama-tiny/step-100/__1_0.distcp")
    inventory = scan_now(bucket)

    assert inventory.status == InventoryStatus.APPLIED
    assert inventory.files_gone == 1
    gone = ShardFile.objects.get(path="llm/llama-tiny/step-100/__1_0.distcp")
    assert gone.gone_at is not None and gone.last_seen_at is not None
    copy = CheckpointCopy.objects.get(location=bucket.location, path="llm/llama-tiny/step-100")
    assert copy.state == "partial"
    assert any("__1_0.distcp" in r for r in copy.reasons)


def test_keys_that_are_no_safe_path_are_skipped_and_counted_and_odd_ones_kept(s3, scan_now):
    name = s3.bucket()
    s3.upload_tree(name, "nvme-a", prefix="fleet/")
    hostile = [
        "fleet/llm/llama-tiny/../../../etc/passwd",
        "fleet/llm//double-slash",
        "fleet/llm/back\\slash",
        "fleet/llm/bell\x07char",
        "fleet//leading-slash",
    ]
    for key in hostile:
        s3.put(name, key, b"x")
    s3.put(name, "fleet/vision/folder/", b"")  # a console's "folder"
    odd = "vision/resnet-tiny/notes ünï 😀 + 100% <b>&amp;.txt"
    s3.put(name, "fleet/" + odd, b"hello")
    s3.put(name, "outside/llm/x", b"x")
    bucket = s3.register(name, prefix="fleet/")

    inventory = scan_now(bucket)

    assert inventory.status == InventoryStatus.APPLIED, inventory.error
    assert "skipped 5 key(s) that are not safe paths" in inventory.error
    assert "\\x07" in inventory.error and "\x07" not in inventory.error
    paths = set(ShardFile.objects.values_list("path", flat=True))
    assert odd in paths
    assert len(paths) == 10
    assert not any(".." in p.split("/") or "\\" in p or "//" in p for p in paths)
    assert inventory.checkpoints_found == 4


def test_a_second_scan_of_a_bucket_is_refused_while_the_first_one_runs(s3, actor):
    bucket = s3.register(s3.bucket())
    first = scan_start(location=bucket.location, actor=actor)  # queued on commit, which this test never reaches

    with pytest.raises(DomainError) as refused:
        scan_start(location=bucket.location, actor=actor)

    assert refused.value.code == "scan_running"
    assert f"#{first.pk}" in refused.value.message
    assert Inventory.objects.filter(location=bucket.location).count() == 1
    assert scan_run(first.pk).status == InventoryStatus.APPLIED
    scan_start(location=bucket.location, actor=actor)  # the first one finished: another may start


def test_a_host_location_is_not_scanned_by_the_server(make_host, actor):
    kit = make_host()
    with pytest.raises(DomainError) as refused:
        scan_start(location=kit.location, actor=actor)
    assert refused.value.code == "not_a_bucket"
    assert not Inventory.objects.exists()


def test_a_big_bucket_is_listed_prefix_by_prefix_in_parallel_with_the_same_result(s3, scan_now, monkeypatch):
    name = s3.bucket()
    s3.upload_tree(name, "pfs")
    bucket = s3.register(name)
    monkeypatch.setattr(s3lib, "PAGE_SIZE", 4)
    split: list[list[str]] = []
    original = scan_listing.parallel_pages

    def spy(client, name, probe, top):
        split.append(list(probe.prefixes))
        yield from original(client, name, probe, top)

    monkeypatch.setattr(scan_listing, "parallel_pages", spy)  # looked up by listing_pages, in its module

    inventory = scan_now(bucket)

    assert inventory.status == InventoryStatus.APPLIED, inventory.error
    assert split and set(split[0]) == {"llm/", "nlp/", "speech/"}
    assert inventory.files_count == len(tree_files("pfs"))
    assert copies_at(bucket.location) == {(p, f, s, "complete") for p, f, s in EXPECTED["pfs"]}
    before = snapshot(bucket.location)

    # Listed in one sequence instead, the bucket is the same snapshot.
    monkeypatch.setattr(scan_listing, "PARALLEL_MIN_PREFIXES", 10**6)
    split.clear()
    inventory = scan_now(bucket)
    assert not split
    assert (inventory.files_added, inventory.files_changed, inventory.files_gone) == (0, 0, 0)
    assert snapshot(bucket.location) == before


def test_progress_is_recorded_as_each_chunk_is_staged(s3, scan_now, settings, monkeypatch):
    settings.INGEST_CHUNK_ROWS = 4
    name = s3.bucket()
    s3.upload_tree(name, "nvme-a")
    bucket = s3.register(name)
    seen: list[tuple[int, int]] = []
    original = scan_scanner.Scanner._progress

    def spy(self, files, total):
        original(self, files, total)
        row = Inventory.objects.values_list("files_count", "bytes_total").get(pk=self.inventory.pk)
        seen.append(row)

    monkeypatch.setattr(scan_scanner.Scanner, "_progress", spy)

    inventory = scan_now(bucket)

    assert [files for files, _ in seen] == [4, 8, 9]
    assert seen[-1] == (inventory.files_count, inventory.bytes_total)


# --- S3 Inventory reports ------------------------------------------------------------------------

COLUMNS = [
    "Bucket",
    "Key",
    "VersionId",
    "IsLatest",
    "IsDeleteMarker",
    "Size",
    "LastModifiedDate",
    "ETag",
    "StorageClass",
    "ObjectLockRetainUntilDate",
    "ObjectLockMode",
    "ObjectLockLegalHoldStatus",
    "ChecksumAlgorithm",
]


def report_rows(s3, bucket: str) -> list[dict]:
    """What S3 Inventory would write for ``bucket`` (all versions), from the bucket itself."""
    versions = s3.client.list_object_versions(Bucket=bucket)
    rows = []
    for v in versions.get("Versions", []):
        rows.append(
            {
                "Bucket": bucket,
                "Key": quote_plus(v["Key"], safe="/"),
                "VersionId": v["VersionId"],
                "IsLatest": str(v["IsLatest"]).lower(),
                "IsDeleteMarker": "false",
                "Size": str(v["Size"]),
                "LastModifiedDate": v["LastModified"].astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z"),
                "ETag": v["ETag"].strip('"'),
                "StorageClass": v.get("StorageClass", "STANDARD"),
                "ObjectLockRetainUntilDate": "",
                "ObjectLockMode": "",
                "ObjectLockLegalHoldStatus": "OFF",
                "ChecksumAlgorithm": "SHA256",
            }
        )
    for m in versions.get("DeleteMarkers", []):
        rows.append(
            dict.fromkeys(COLUMNS, "")
            | {
                "Bucket": bucket,
                "Key": quote_plus(m["Key"], safe="/"),
                "VersionId": m["VersionId"],
                "IsLatest": str(m["IsLatest"]).lower(),
                "IsDeleteMarker": "true",
            }
        )
    return rows


def write_report(
    s3, source: str, dest: str, rows: list[dict], *, stamp: str, fmt: str = "CSV", bad_md5: bool = False
) -> str:
    """Write a report the way S3 Inventory does: CSV.gz data files, then manifest.json and manifest.checksum."""
    base = f"inventory/{source}/all-versions"
    files = []
    for part in (rows[: len(rows) // 2], rows[len(rows) // 2 :]):
        text = io.StringIO()
        writer = csv.writer(text, quoting=csv.QUOTE_ALL, lineterminator="\n")
        for row in part:
            writer.writerow([row[c] for c in COLUMNS])
        data = gzip.compress(text.getvalue().encode())
        key = f"{base}/data/{uuid.uuid4()}.csv.gz"
        s3.client.put_object(Bucket=dest, Key=key, Body=data)
        md5 = hashlib.md5(data).hexdigest()
        files.append({"key": key, "size": len(data), "MD5checksum": "0" * 32 if bad_md5 else md5})
    manifest = json.dumps(
        {
            "sourceBucket": source,
            "destinationBucket": f"arn:aws:s3:::{dest}",
            "version": "2016-11-30",
            "creationTimestamp": "1795046400000",
            "fileFormat": fmt,
            "fileSchema": ", ".join(COLUMNS),
            "files": files,
        }
    ).encode()
    s3.client.put_object(Bucket=dest, Key=f"{base}/{stamp}/manifest.json", Body=manifest)
    s3.client.put_object(Bucket=dest, Key=f"{base}/{stamp}/manifest.checksum", Body=hashlib.md5(manifest).hexdigest())
    return f"{base}/{stamp}/manifest.json"


@pytest.fixture
def reported(s3):
    """A versioned bucket with an overwritten object, a deleted one and a key with a space, and a report bucket."""
    source = s3.bucket(versioned=True)
    s3.upload_tree(source, "nvme-a")
    s3.put(source, "vision/resnet-tiny/notes.txt", b"old")
    s3.put(source, "vision/resnet-tiny/notes.txt", b"new notes")
    s3.put(source, "vision/resnet-tiny/deleted.txt", b"x")
    s3.client.delete_object(Bucket=source, Key="vision/resnet-tiny/deleted.txt")
    s3.put(source, "vision/resnet-tiny/read me.txt", b"spaces")
    dest = s3.bucket()
    return source, dest


def test_an_s3_inventory_report_is_read_instead_of_listing_the_bucket(s3, scan_now, s3_calls, reported):
    source, dest = reported
    rows = report_rows(s3, source)
    write_report(s3, source, dest, rows[:3], stamp="2026-11-20T00-00Z")  # an older, smaller report
    write_report(s3, source, dest, rows, stamp="2026-11-21T00-00Z")
    bucket = s3.register(source, inventory_report_uri=f"s3://{dest}/inventory/{source}/")

    inventory = scan_now(bucket)

    assert inventory.status == InventoryStatus.APPLIED, inventory.error
    assert inventory.source == InventorySource.S3_INVENTORY
    assert inventory.taken_at == datetime.fromtimestamp(1795046400, UTC)
    assert s3_calls[("ListObjectsV2", source)] == 0
    files = {f.path: f for f in ShardFile.objects.all()}
    assert set(files) == set(tree_files("nvme-a")) | {"vision/resnet-tiny/notes.txt", "vision/resnet-tiny/read me.txt"}
    latest = s3.client.head_object(Bucket=source, Key="vision/resnet-tiny/notes.txt")
    assert files["vision/resnet-tiny/notes.txt"].version_id == latest["VersionId"]
    assert files["vision/resnet-tiny/notes.txt"].size == len(b"new notes")
    assert files["llm/llama-tiny/step-100/.metadata"].legal_hold is False
    assert copies_at(bucket.location) == {(p, f, s, "complete") for p, f, s in EXPECTED["nvme-a"]}


def test_a_report_whose_md5_does_not_match_fails_and_changes_nothing(s3, scan_now, reported):
    source, dest = reported
    rows = report_rows(s3, source)
    write_report(s3, source, dest, rows, stamp="2026-11-20T00-00Z")
    bucket = s3.register(source, inventory_report_uri=f"s3://{dest}/inventory/{source}/")
    assert scan_now(bucket).status == InventoryStatus.APPLIED
    before = snapshot(bucket.location)
    applied_at = StorageLocation.objects.get(pk=bucket.location.pk).last_applied_at

    write_report(s3, source, dest, rows[:5], stamp="2026-11-21T00-00Z", bad_md5=True)
    inventory = scan_now(bucket)

    assert inventory.status == InventoryStatus.FAILED
    assert "MD5" in inventory.error and "Nothing was applied or marked gone" in inventory.error
    assert snapshot(bucket.location) == before
    assert StorageLocation.objects.get(pk=bucket.location.pk).last_applied_at == applied_at
    assert not ShardFile.objects.filter(gone_at__isnull=False).exists()


def test_a_parquet_report_is_refused_with_a_clear_reason(s3, scan_now, reported):
    source, dest = reported
    write_report(s3, source, dest, report_rows(s3, source), stamp="2026-11-21T00-00Z", fmt="Parquet")
    bucket = s3.register(source, inventory_report_uri=f"s3://{dest}/inventory/")

    inventory = scan_now(bucket)

    assert inventory.status == InventoryStatus.FAILED
    assert "only CSV reports are read" in inventory.error


# --- reading objects without downloading them ----------------------------------------------------


def test_the_ranged_reader_reads_a_safetensors_header_and_never_the_shard(s3):
    name = s3.bucket()
    header = json.dumps({"w": {"dtype": "F32", "shape": [524288], "data_offsets": [0, 2097152]}}).encode()
    body = len(header).to_bytes(8, "little") + header + bytes(2097152)
    answer = s3.put(name, "model-00001-of-00002.safetensors", body)
    client = s3lib.make_client(endpoint_url=s3.url, addressing_style="path")
    reader = s3lib.RangedReader(client, name, "model-00001-of-00002.safetensors", len(body), etag=answer["ETag"])

    facts = stream_facts("model-00001-of-00002.safetensors", reader, len(body))

    assert facts == {"kind": "safetensors", "expected_size": len(body), "tensors": 1}
    assert reader.requests == 1
    assert reader.bytes_fetched <= s3lib.READ_AHEAD


def test_the_ranged_reader_checks_a_torch_zip_by_its_head_and_tail_only(s3):
    name = s3.bucket()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data/0", bytes(3 * 1024 * 1024))
        z.writestr("archive/data.pkl", b"\x80\x02}q\x00.")
    whole = buffer.getvalue()
    client = s3lib.make_client(endpoint_url=s3.url, addressing_style="path")
    for key, body, complete in (("whole.pt", whole, True), ("cut.pt", whole[:-100], False)):
        answer = s3.put(name, key, body)
        reader = s3lib.RangedReader(client, name, key, len(body), etag=answer["ETag"])
        facts = stream_facts(key, reader, len(body))
        assert facts == {"kind": "torch_file", "container": "zip", "complete": complete}
        assert reader.requests == 2
        assert reader.bytes_fetched <= 2 * s3lib.READ_AHEAD + 22


def test_a_rewritten_object_is_reported_unreadable_rather_than_mixed(s3):
    name = s3.bucket()
    first = s3.put(name, "latest", b"global_step100")
    s3.put(name, "latest", b"global_step200")
    client = s3lib.make_client(endpoint_url=s3.url, addressing_style="path")
    reader = s3lib.RangedReader(client, name, "latest", 14, etag=first["ETag"])

    facts = stream_facts("latest", reader, 14)

    assert facts["kind"] == "text" and "PreconditionFailed" in facts["error"]
    assert reader.error is not None and not reader.error.transient


# --- credentials by reference --------------------------------------------------------------------


def test_file_credentials_come_from_the_secrets_dir_and_are_never_logged(s3, scan_now, settings, tmp_path, caplog):
    settings.S3_SECRETS_DIR = tmp_path
    secret = "wJalrXUtnFEMI-not-a-real-secret"
    (tmp_path / "lab-ro").write_text(json.dumps({"aws_access_key_id": "AKIALAB", "aws_secret_access_key": secret}))
    name = s3.bucket()
    s3.upload_tree(name, "nvme-a")
    bucket = s3.register(name, credentials="file:lab-ro")

    with caplog.at_level("DEBUG"):
        inventory = scan_now(bucket)

    assert inventory.status == InventoryStatus.APPLIED, inventory.error
    assert secret not in caplog.text
    assert not AuditEvent.objects.filter(after__icontains=secret).exists()


def test_a_missing_or_malformed_secrets_file_fails_the_scan_without_echoing_it(s3, scan_now, settings, tmp_path):
    settings.S3_SECRETS_DIR = tmp_path
    (tmp_path / "broken").write_text(json.dumps({"aws_access_key_id": "AKIA-LEAK-ME", "aws_secret_access_key": 5}))
    missing = s3.register(s3.bucket(), credentials="file:absent")
    broken = s3.register(s3.bucket(), credentials="file:broken")

    failed = scan_now(missing)
    assert failed.status == InventoryStatus.FAILED
    assert "'absent'" in failed.error and "does not exist" in failed.error
    failed = scan_now(broken)
    assert failed.status == InventoryStatus.FAILED
    assert "aws_secret_access_key" in failed.error
    assert "AKIA-LEAK-ME" not in failed.error


def test_profile_credentials_come_from_the_workers_aws_config(s3, scan_now, monkeypatch, tmp_path):
    shared = tmp_path / "credentials"
    shared.write_text("[lab]\naws_access_key_id = AKIALAB\naws_secret_access_key = lab-secret\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(shared))
    name = s3.bucket()
    s3.put(name, "team/run/model.ckpt", b"x")
    good = s3.register(name, credentials="profile:lab")
    assert scan_now(good).status == InventoryStatus.APPLIED
    other = s3.register(s3.bucket(), credentials="profile:nobody")
    failed = scan_now(other)
    assert failed.status == InventoryStatus.FAILED
    assert "'nobody' is not configured" in failed.error


# --- registering, scheduling, the API and the command ---------------------------------------------


def test_a_bucket_registration_is_audited_with_its_credentials_reference_only(db, actor):
    bucket = bucket_add(
        name="ckpt-eu",
        bucket_name="ckpt-eu",
        prefix="/fleet",
        region_name="eu-west-1",
        credentials="file:ckpt-eu-ro",
        storage_class_tiers={"glacier_ir": "archive"},
        actor=actor,
    )
    assert bucket.prefix == "fleet/"
    assert bucket.storage_class_tiers == {"GLACIER_IR": "archive"}
    assert bucket.tier_of("GLACIER_IR") == "archive"
    assert bucket.location.kind == "bucket" and bucket.location.root_path == "s3://ckpt-eu/fleet/"
    assert bucket.location.region == "eu-west-1"
    event = AuditEvent.objects.get(action="bucket.add")
    assert event.target_id == bucket.location.pk
    assert event.after["credentials"] == "file:ckpt-eu-ro"
    assert AuditEvent.objects.filter(action="location.add", target_id=bucket.location.pk).exists()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"endpoint_url": "https://AKIAX:hunter2@s3.example.com"}, "must not carry credentials"),
        ({"credentials": "AKIAIOSFODNN7EXAMPLE"}, "must be a reference"),
        ({"credentials": "file:../etc/passwd"}, "must be a reference"),
        ({"bucket_name": "Not_A_Bucket"}, "is not a bucket name"),
        ({"scan_every_minutes": 2}, "5 minutes or more"),
        ({"storage_class_tiers": {"GLACIER": "cold"}}, "unknown tier"),
        ({"inventory_report_uri": "https://example.com/reports"}, "not an s3://"),
        ({"prefix": "a/../b"}, "is not usable"),
        ({"addressing_style": "sideways"}, "unknown addressing style"),
    ],
)
def test_bucket_add_refuses_bad_input_and_changes_nothing(db, actor, change, message):
    kwargs = {"name": "b", "bucket_name": "ckpt-b", "actor": actor} | change
    with pytest.raises(DomainError) as refused:
        bucket_add(**kwargs)
    assert message in refused.value.message
    assert not StorageLocation.objects.exists()
    assert not AuditEvent.objects.exists()


def test_bucket_add_refuses_a_prefix_that_overlaps_one_registered(db, actor):
    bucket_add(name="all", bucket_name="ckpt-b", prefix="teams/", actor=actor)
    with pytest.raises(DomainError) as refused:
        bucket_add(name="llm", bucket_name="ckpt-b", prefix="teams/llm/", actor=actor)
    assert refused.value.code == "exists"
    bucket_add(
        name="other-store", bucket_name="ckpt-b", prefix="teams/llm/", endpoint_url="http://minio:9000", actor=actor
    )


def test_scheduled_scans_start_when_due_and_not_before(s3):
    due = s3.register(s3.bucket(), scan_every_minutes=60)
    s3.register(s3.bucket(), scan_every_minutes=0)

    started = scan_due()
    assert [i.location_id for i in started] == [due.location.pk]
    assert scan_due() == []  # still running
    assert scan_run(started[0].pk).status == InventoryStatus.APPLIED
    assert scan_due() == []  # just scanned
    assert scan_due(now=started[0].received_at + timedelta(minutes=30)) == []
    assert len(scan_due(now=started[0].received_at + timedelta(minutes=61))) == 1
    assert not AuditEvent.objects.filter(action="location.scan").exists()


def test_a_scan_requeued_by_the_inventory_sweep_runs_as_a_scan(s3, actor):
    name = s3.bucket()
    s3.upload_tree(name, "nvme-a")
    bucket = s3.register(name)
    inventory = scan_start(location=bucket.location, actor=actor)  # its message "lost": on_commit never runs

    counts = ingest.sweep(now=timezone.now() + timedelta(minutes=30))
    assert counts.resent == 1
    inventory.refresh_from_db()
    assert inventory.status == InventoryStatus.APPLIED
    assert inventory.checkpoints_found == 4
    # The upload path never claims a scan: it has no upload to read.
    assert ingest_inventory.delay(inventory.pk).get() == "skipped"


def test_only_the_same_task_may_take_over_a_scan_left_processing(s3, actor):
    bucket = s3.register(s3.bucket())
    inventory = scan_start(location=bucket.location, actor=actor)
    Inventory.objects.filter(pk=inventory.pk).update(status=InventoryStatus.PROCESSING, claimed_by="task-1")

    assert scan_run(inventory.pk, claim="task-2") is None
    assert scan_run(inventory.pk, claim="task-1").status == InventoryStatus.APPLIED


def test_a_signed_in_person_starts_a_scan_through_the_api_and_polls_it(
    s3, signed_in, django_capture_on_commit_callbacks
):
    name = s3.bucket()
    s3.upload_tree(name, "nvme-a")
    bucket = s3.register(name)

    with django_capture_on_commit_callbacks(execute=True):
        response = signed_in.post(f"/api/v1/locations/{bucket.location.pk}/scan/")

    assert response.status_code == 202, response.content
    body = response.json()
    assert body["url"] == f"/api/v1/inventories/{body['id']}/"
    polled = signed_in.get(body["url"]).json()
    assert polled["status"] == "applied" and polled["source"] == "bucket_listing"
    assert polled["checkpoints_found"] == 4
    event = AuditEvent.objects.get(action="location.scan")
    assert (event.actor_label, event.source, event.target_id) == ("ada", "api", bucket.location.pk)


def test_the_api_answers_409_while_a_scan_runs_and_400_for_a_host(s3, signed_in, make_host, actor):
    bucket = s3.register(s3.bucket())
    scan_start(location=bucket.location, actor=actor)
    response = signed_in.post(f"/api/v1/locations/{bucket.location.pk}/scan/")
    assert response.status_code == 409
    assert response.json()["error"] == "scan_running"
    kit = make_host()
    response = signed_in.post(f"/api/v1/locations/{kit.location.pk}/scan/")
    assert response.status_code == 400
    assert response.json()["error"] == "not_a_bucket"


def test_nobody_signed_out_starts_a_scan(s3, client):
    bucket = s3.register(s3.bucket())
    response = client.post(f"/api/v1/locations/{bucket.location.pk}/scan/")
    assert response.status_code in (401, 403)
    assert not Inventory.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_the_command_adds_scans_and_lists_a_bucket(s3):
    name = s3.bucket()
    s3.upload_tree(name, "nvme-a", prefix="ckpt/")
    out = io.StringIO()
    call_command(
        "fleet_bucket",
        "add",
        "lab",
        "--bucket",
        name,
        "--prefix",
        "ckpt",
        "--endpoint-url",
        s3.url,
        "--region",
        "us-east-1",
        "--addressing-style",
        "path",
        "--tier-map",
        "STANDARD_IA=archive_instant",
        "--site",
        "lab1",
        "--every",
        "30",
        stdout=out,
    )
    bucket = Bucket.objects.get()
    assert (bucket.prefix, bucket.scan_every_minutes, bucket.location.site) == ("ckpt/", 30, "lab1")
    assert bucket.storage_class_tiers == {"STANDARD_IA": "archive_instant"}

    call_command("fleet_bucket", "scan", "lab", "--wait", stdout=out)
    assert "applied: 9 objects" in out.getvalue()
    assert "4 checkpoint copies" in out.getvalue()

    listing = io.StringIO()
    call_command("fleet_bucket", "list", stdout=listing)
    assert "lab" in listing.getvalue() and "last scan applied" in listing.getvalue()


def test_the_command_refuses_a_key_in_place_of_a_credentials_reference(db):
    with pytest.raises(CommandError, match="must be a reference"):
        call_command("fleet_bucket", "add", "lab", "--bucket", "ckpt-lab", "--credentials", "AKIAIOSFODNN7EXAMPLE")
    assert not Bucket.objects.exists()


def test_clients_share_botocore_models_but_read_a_rotated_secrets_file_afresh(settings, tmp_path):
    """The S3 model is loaded once per process (a new botocore session per client cost 164 ms of CPU each); the
    credentials are not cached with it: a secrets file rotated between two clients gives the second the new key."""
    settings.S3_SECRETS_DIR = tmp_path
    secrets = tmp_path / "lab-rw"
    secrets.write_text(json.dumps({"aws_access_key_id": "AKIAOLD", "aws_secret_access_key": "old-secret"}))
    first = s3lib.make_client(endpoint_url="http://127.0.0.1:9", region_name="eu-west-1", credentials="file:lab-rw")
    secrets.write_text(json.dumps({"aws_access_key_id": "AKIANEW", "aws_secret_access_key": "new-secret"}))
    paths = list(s3lib.DATA_LOADER.search_paths)
    second = s3lib.make_client(endpoint_url="http://127.0.0.1:9", region_name="eu-west-1", credentials="file:lab-rw")
    default = s3lib.make_client(endpoint_url="http://127.0.0.1:9", region_name="eu-west-1")

    assert first._request_signer._credentials.access_key == "AKIAOLD"
    assert second._request_signer._credentials.access_key == "AKIANEW"
    assert default._request_signer._credentials is not None
    assert list(s3lib.DATA_LOADER.search_paths) == paths  # boto3's folder is not appended once per client
