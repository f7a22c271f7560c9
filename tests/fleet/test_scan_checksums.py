"""Every checksum S3 keeps is stored with a bucket's objects, and verifies (or accuses) the copies it can.

Objects go up the way boto3 uploads them (``upload_fileobj``: one PutObject below 8 MiB, 8 MiB parts
above, a CRC32 unless told otherwise), to moto's real HTTP server; the expected values are computed
here from the bytes, independently of the code under test (zlib, awscrt, hashlib; a composite as the
checksum of the concatenated part checksums, AWS "Checking object integrity").
"""

from __future__ import annotations

import base64
import hashlib
import importlib.machinery
import io
import random
import sys
import time
import types
import zipfile
import zlib
from datetime import UTC, datetime, timedelta

import pytest
from awscrt import checksums as crt
from django.core.management import call_command

from audit.actor import Actor
from audit.models import AuditEvent
from catalog.choices import CopyState, Verification, VerificationBasis
from catalog.models import CheckpointCopy, ShardFile
from catalog.verification import checkpoints_verify
from fleet import s3 as s3lib
from fleet.agent import stream_facts
from fleet.choices import InventoryStatus
from fleet.models import Bucket, HeadChunk
from ingest.scan import bucket_set, recheck_due

pytestmark = [pytest.mark.services, pytest.mark.django_db]

MIB = 1 << 20
PART = 8 * MIB  # boto3's multipart threshold and part size (s3transfer TransferConfig)
BIG = 20 * MIB + 123  # three parts: 8 MiB, 8 MiB, 4 MiB + 123 bytes
SMALL = 3 * MIB + 7
BLOCK = MIB  # the agent's block size for block CRCs
CKPT = "llm/llama-sums/epoch=0-step=100.ckpt"


@pytest.fixture(autouse=True)
def moto_crc32c(monkeypatch):
    """moto computes a multipart object's CRC32C with the ``crc32c`` package and falls back to CRC32
    without it (a wrong value); the server runs in this process, so awscrt's CRC32C stands in for it."""
    module = types.ModuleType("crc32c")
    module.__spec__ = importlib.machinery.ModuleSpec("crc32c", None)  # moto asks importlib whether it exists
    module.crc32c = lambda data: crt.crc32c(data)
    monkeypatch.setitem(sys.modules, "crc32c", module)


def payload(size: int, seed: int = 7) -> bytes:
    return random.Random(seed).randbytes(size)


def digest(algo: str, data: bytes) -> bytes:
    """The raw big-endian digest S3 keeps for ``data`` under ``algo``."""
    if algo == "crc32":
        return zlib.crc32(data).to_bytes(4, "big")
    if algo == "crc32c":
        return crt.crc32c(data).to_bytes(4, "big")
    if algo == "crc64nvme":
        return crt.crc64nvme(data).to_bytes(8, "big")
    return hashlib.new(algo, data).digest()


def composite(algo: str, data: bytes, part: int = PART) -> str:
    parts = b"".join(digest(algo, data[i : i + part]) for i in range(0, len(data), part))
    return digest(algo, parts).hex()


def upload(s3, bucket: str, key: str, data: bytes, algorithm: str | None = None) -> dict:
    """Upload as boto3 does by default (or with one ChecksumAlgorithm) and return the object's HEAD."""
    extra = {"ChecksumAlgorithm": algorithm} if algorithm else None
    s3.client.upload_fileobj(io.BytesIO(data), bucket, key, ExtraArgs=extra)
    return s3.client.head_object(Bucket=bucket, Key=key)


def stored(location, path: str) -> dict:
    return ShardFile.objects.get(location=location, path=path).digests


# --- what a scan stores ---------------------------------------------------------------------------


def test_every_checksum_boto3_uploads_with_is_stored_single_part_and_multipart(s3, scan_now):
    name = s3.bucket()
    big, small = payload(BIG), payload(SMALL, seed=8)
    heads = {}
    for algorithm in (None, "CRC32", "CRC32C", "SHA1", "SHA256", "CRC64NVME"):
        label = (algorithm or "default").lower()
        heads[f"sums/{label}-multipart.bin"] = upload(s3, name, f"sums/{label}-multipart.bin", big, algorithm)
        heads[f"sums/{label}-single.bin"] = upload(s3, name, f"sums/{label}-single.bin", small, algorithm)
    bucket = s3.register(name)
    before = time.time()

    inventory = scan_now(bucket)

    after = time.time()
    assert inventory.status == InventoryStatus.APPLIED, inventory.error
    assert inventory.checksums_total == 12 and inventory.checksums_finished_at is not None

    def multipart(algo: str) -> dict:
        return {"composite": {"algo": algo, "value": composite(algo, big), "parts": 3, "part_size": PART}}

    md5 = hashlib.md5(small, usedforsecurity=False).hexdigest()
    expected = {
        "sums/default-multipart.bin": multipart("crc32"),
        "sums/default-single.bin": {"crc32": digest("crc32", small).hex(), "md5": md5},
        "sums/crc32-multipart.bin": multipart("crc32"),
        "sums/crc32-single.bin": {"crc32": digest("crc32", small).hex(), "md5": md5},
        "sums/crc32c-multipart.bin": multipart("crc32c"),
        "sums/crc32c-single.bin": {"crc32c": digest("crc32c", small).hex(), "md5": md5},
        "sums/sha1-multipart.bin": multipart("sha1"),
        "sums/sha1-single.bin": {"sha1": digest("sha1", small).hex(), "md5": md5},
        "sums/sha256-multipart.bin": multipart("sha256"),
        "sums/sha256-single.bin": {"sha256": digest("sha256", small).hex(), "md5": md5},
        # S3 keeps CRC64NVME of a multipart upload whole (FULL_OBJECT), never as a composite.
        "sums/crc64nvme-multipart.bin": {"crc64nvme": digest("crc64nvme", big).hex()},
        "sums/crc64nvme-single.bin": {"crc64nvme": digest("crc64nvme", small).hex(), "md5": md5},
    }
    got = {}
    for path in expected:
        digests = dict(stored(bucket.location, path))
        at, taken = digests.pop("at"), digests.pop("taken")
        assert before <= at <= after, path  # when it was HEADed
        assert taken == heads[path]["LastModified"].timestamp(), path  # when the store computed it: the upload
        got[path] = digests
    assert got == expected
    # The main checksum stays what it was: a composite is still no digest of the content.
    main = dict(ShardFile.objects.filter(location=bucket.location).values_list("path", "checksum_algo"))
    assert main["sums/default-multipart.bin"] == "crc32-composite"
    assert main["sums/sha256-single.bin"] == "sha256"


def test_an_etag_is_kept_as_md5_only_where_it_is_the_contents_md5(s3, scan_now):
    name = s3.bucket()
    small = payload(1000)
    s3.client.put_object(Bucket=name, Key="plain.bin", Body=small, ChecksumAlgorithm="CRC32")
    s3.client.put_object(Bucket=name, Key="kms.bin", Body=small, ServerSideEncryption="aws:kms")
    upload(s3, name, "multipart.bin", payload(BIG))
    bucket = s3.register(name)

    scan_now(bucket)

    assert stored(bucket.location, "plain.bin")["md5"] == hashlib.md5(small, usedforsecurity=False).hexdigest()
    assert "md5" not in stored(bucket.location, "kms.bin")  # SSE-KMS: the ETag is no MD5 of the content
    assert "md5" not in stored(bucket.location, "multipart.bin")  # an MD5 of the parts' MD5s


def test_s3s_own_composite_answer_keeps_its_part_count_and_its_full_object_answer_is_hex():
    """Real S3 says what kind of checksum it returns and suffixes a composite with its part count."""
    data = payload(BIG)
    modified = datetime(2026, 11, 20, 8, 30, 5, tzinfo=UTC)
    value = base64.b64encode(bytes.fromhex(composite("crc32c", data))).decode()
    answer = {
        "ChecksumCRC32C": f"{value}-3",
        "ChecksumType": "COMPOSITE",
        "ETag": '"0123456789abcdef0123456789abcdef-3"',
        "LastModified": modified,
    }
    assert s3lib.stored_digests(answer, now=1_800_000_000.12345) == {
        "composite": {"algo": "crc32c", "value": composite("crc32c", data), "parts": 3, "part_size": 0},
        "at": 1_800_000_000.123,
        "taken": modified.timestamp(),
    }
    full = base64.b64encode(digest("crc32", data)).decode()
    answer = {"ChecksumCRC32": full, "ChecksumType": "FULL_OBJECT", "ETag": '"abc-3"', "LastModified": modified}
    assert s3lib.stored_digests(answer, now=1.0) == {
        "crc32": digest("crc32", data).hex(),
        "at": 1.0,
        "taken": modified.timestamp(),
    }
    encrypted = {"ETag": '"0123456789abcdef0123456789abcdef"', "ServerSideEncryption": "aws:kms:dsse"}
    assert s3lib.stored_digests(encrypted, now=1.0) == {}  # nothing a content checksum: nothing stored


def test_a_composites_part_size_is_unknown_when_the_part_head_is_refused(s3, monkeypatch):
    name = s3.bucket()
    upload(s3, name, "big.bin", payload(BIG))
    client = s3lib.make_client(endpoint_url=s3.url, region_name="us-east-1", addressing_style="path")
    original = client.head_object

    def refuse_parts(**kwargs):
        if "PartNumber" in kwargs:
            raise s3lib.ClientError({"Error": {"Code": "AccessDenied", "Message": "no"}}, "HeadObject")
        return original(**kwargs)

    monkeypatch.setattr(client, "head_object", refuse_parts)

    info = s3lib.head(client, name, "big.bin")

    assert info.digests["composite"]["parts"] == 3
    assert info.digests["composite"]["part_size"] == 0


# --- the same checkpoint on a host and in a bucket ------------------------------------------------


def torch_checkpoint(size: int = BIG) -> bytes:
    """A torch.save-style zip (stored, not compressed) of about ``size`` bytes: a real single-file checkpoint."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", b"\x80\x02}q\x00.")
        z.writestr("archive/data/0", payload(size - 400))
    return buf.getvalue()


def flipped(data: bytes) -> bytes:
    """One byte flipped in the middle of the tensor data (part 2 of the upload): the zip stays well-formed."""
    middle = len(data) // 2
    return data[:middle] + bytes([data[middle] ^ 0x01]) + data[middle + 1 :]


def host_line(data: bytes, *, checksummed_at: float, mtime: float) -> dict:
    """The file line the agent sends with --checksums: its sha256, CRC32 and a CRC32 of every MiB block."""
    blocks = b"".join(zlib.crc32(data[i : i + BLOCK]).to_bytes(4, "big") for i in range(0, len(data), BLOCK))
    return {
        "path": CKPT,
        "size": len(data),
        "mtime": mtime,
        "sha256": hashlib.sha256(data).hexdigest(),
        "facts": stream_facts(CKPT.rsplit("/", 1)[1], io.BytesIO(data), len(data)),
        "checksums": {
            "crc32": digest("crc32", data).hex(),
            "blocks": {"size": BLOCK, "crc32": base64.b64encode(blocks).decode()},
        },
        "checksummed_at": checksummed_at,
    }


@pytest.fixture
def push(client, django_capture_on_commit_callbacks):
    """Upload a host's inventory through the API and let its ingestion run, as the worker would."""

    def push(kit, files: list[dict]) -> None:
        with django_capture_on_commit_callbacks(execute=True):
            response = client.post(
                "/api/v1/inventories/",
                data=kit.body(files),
                content_type="application/x-ndjson",
                HTTP_CONTENT_ENCODING="gzip",
                **kit.auth(),
            )
        assert response.status_code == 202, response.content

    return push


def copy_at(location) -> CheckpointCopy:
    return CheckpointCopy.objects.get(location=location, checkpoint__step=100, gone_at__isnull=True)


def host_and_bucket(s3, make_host, push, scan_now, *, bucket_bytes: bytes, host_bytes: bytes, host_first: bool):
    """Upload the bucket copy (boto3's defaults: a CRC32 composite of 3 parts), report the host copy with
    its checksums taken an hour before the upload (``host_first``) or a minute after it, then scan."""
    name = s3.bucket()
    head = upload(s3, name, "fleet/" + CKPT, bucket_bytes)
    uploaded = head["LastModified"].timestamp()
    kit = make_host()
    taken = uploaded - 3600 if host_first else uploaded + 60
    push(kit, [host_line(host_bytes, checksummed_at=taken, mtime=uploaded - 7200)])
    bucket = s3.register(name, prefix="fleet/")
    inventory = scan_now(bucket)
    assert inventory.status == InventoryStatus.APPLIED, inventory.error
    assert stored(bucket.location, CKPT)["composite"]["parts"] == 3
    return copy_at(kit.location), copy_at(bucket.location)


def test_a_bucket_copy_uploaded_with_boto3s_defaults_and_its_host_copy_verify_each_other(s3, make_host, push, scan_now):
    data = torch_checkpoint()

    host, bucket = host_and_bucket(s3, make_host, push, scan_now, bucket_bytes=data, host_bytes=data, host_first=True)

    assert (bucket.state, bucket.verification) == (CopyState.COMPLETE, Verification.VERIFIED)
    assert bucket.verification_reasons == [f"all 1 file agree with the copy at {host.location.name}"]
    assert host.verification == Verification.VERIFIED
    assert host.verification_reasons == [f"all 1 file agree with the copy at {bucket.location.name}"]
    # The HEAD phase's own transaction verified both: its chunk counts the copies whose verdict it wrote.
    assert HeadChunk.objects.get().copies == 2


def test_a_composite_whose_part_size_is_unknown_still_verifies_on_the_hosts_block_boundaries(
    s3, make_host, push, scan_now, monkeypatch
):
    original = s3lib.client_for

    def refusing_part_heads(bucket):
        client = original(bucket)
        head_object = client.head_object

        def head(**kwargs):
            if "PartNumber" in kwargs:
                raise s3lib.ClientError({"Error": {"Code": "AccessDenied", "Message": "no"}}, "HeadObject")
            return head_object(**kwargs)

        client.head_object = head
        return client

    monkeypatch.setattr(s3lib, "client_for", refusing_part_heads)
    data = torch_checkpoint()

    host, bucket = host_and_bucket(s3, make_host, push, scan_now, bucket_bytes=data, host_bytes=data, host_first=True)

    assert stored(bucket.location, CKPT)["composite"]["part_size"] == 0
    assert bucket.verification == Verification.VERIFIED, bucket.verification_reasons
    assert host.verification == Verification.VERIFIED, host.verification_reasons


def test_a_bucket_copy_written_after_the_hosts_checksum_is_judged_against_it_only_where_it_was_made_from_it(
    s3, make_host, push, scan_now
):
    data = torch_checkpoint()

    host, bucket = host_and_bucket(
        s3, make_host, push, scan_now, bucket_bytes=flipped(data), host_bytes=data, host_first=True
    )

    # The host's checksum was taken before the bucket copy was written, but nothing records that the bucket copy
    # was made from the host's: an order of writing proves nothing about where a copy came from.
    assert bucket.verification == host.verification == Verification.DISPUTED, bucket.verification_reasons
    assert bucket.state == host.state == CopyState.COMPLETE
    # The product's record that an offload made it from the host copy (after the host's checksum) settles it.
    uploaded = ShardFile.objects.get(location=bucket.location, gone_at__isnull=True).mtime
    CheckpointCopy.objects.filter(pk=bucket.pk).update(
        made_from=host, made_at=uploaded - timedelta(minutes=1), made_by="offload #1"
    )
    checkpoints_verify([bucket.checkpoint_id])
    bucket.refresh_from_db()
    host.refresh_from_db()
    assert (bucket.state, bucket.verification, bucket.verification_basis) == (
        CopyState.CORRUPT,
        Verification.MISMATCH,
        VerificationBasis.SOURCE,
    )
    assert bucket.verification_reasons == [
        f"epoch=0-step=100.ckpt: crc32 composite of 3 parts differs from the copy at {host.location.name}, which "
        "this copy was made from by offload #1, whose checksum was taken before the copy was made (a copy cannot be "
        "more right than its source was)"
    ]
    # The source is not accused by the copy made from it.
    assert host.state == CopyState.COMPLETE
    assert host.verification not in (Verification.MISMATCH, Verification.DISPUTED), host.verification_reasons


def test_a_newer_bucket_copy_that_differs_from_an_older_host_copy_is_not_condemned_when_most_copies_agree_with_it(
    s3, make_host, push, scan_now
):
    data = torch_checkpoint()
    host, bucket = host_and_bucket(
        s3, make_host, push, scan_now, bucket_bytes=flipped(data), host_bytes=data, host_first=True
    )
    # A second bucket, in another store, holds what the first one holds; nothing records where either came from.
    name = s3.bucket()
    upload(s3, name, "fleet/" + CKPT, flipped(data))
    other = s3.register(name, prefix="fleet/")
    assert scan_now(other).status == InventoryStatus.APPLIED

    host, bucket, second = (copy_at(c.location) for c in (host, bucket, other))
    for copy in (bucket, second):
        assert (copy.state, copy.verification, copy.verification_basis) == (
            CopyState.COMPLETE,
            Verification.VERIFIED,
            VerificationBasis.MAJORITY,
        ), copy.verification_reasons
    # The older copy is the odd one out of three: the majority, not the order of writing, says so.
    assert (host.verification, host.verification_basis) == (Verification.MISMATCH, VerificationBasis.MAJORITY)
    assert "which agree with each other (2 of 3 copies)" in host.verification_reasons[0]


def test_a_flipped_byte_with_the_hosts_checksum_taken_after_the_upload_disputes_both_copies(
    s3, make_host, push, scan_now
):
    data = torch_checkpoint()

    host, bucket = host_and_bucket(
        s3, make_host, push, scan_now, bucket_bytes=flipped(data), host_bytes=data, host_first=False
    )

    assert bucket.verification == Verification.DISPUTED, bucket.verification_reasons
    assert host.verification == Verification.DISPUTED, host.verification_reasons
    assert bucket.verification_reasons[0] == (
        f"epoch=0-step=100.ckpt: crc32 composite of 3 parts differs from the copy at {host.location.name}, and "
        "nothing independent says which is right"
    )
    # Neither is condemned on the other's word alone (PRODUCT.md, promise 10).
    assert bucket.state == CopyState.COMPLETE and host.state == CopyState.COMPLETE


def test_a_sha256_composite_is_left_unverified_with_a_reason_that_says_to_upload_with_a_crc(
    s3, make_host, push, scan_now
):
    data = torch_checkpoint()
    name = s3.bucket()
    upload(s3, name, "fleet/" + CKPT, data, "SHA256")
    kit = make_host()
    push(kit, [host_line(data, checksummed_at=time.time(), mtime=time.time() - 7200)])
    bucket = s3.register(name, prefix="fleet/")

    inventory = scan_now(bucket)

    assert inventory.status == InventoryStatus.APPLIED, inventory.error
    assert stored(bucket.location, CKPT)["composite"]["algo"] == "sha256"
    host, copy = copy_at(kit.location), copy_at(bucket.location)
    assert copy.verification == Verification.UNVERIFIED
    assert host.verification == Verification.UNVERIFIED
    reasons = " ".join(host.verification_reasons + copy.verification_reasons)
    assert "upload with a CRC checksum" in reasons, reasons


# --- rechecks -------------------------------------------------------------------------------------


def test_unchanged_objects_keep_their_checksums_until_a_recheck_heads_every_object_again(s3, scan_now, s3_calls):
    name = s3.bucket()
    upload(s3, name, "a.bin", payload(1000))
    upload(s3, name, "b.bin", payload(2000, seed=9))
    bucket = s3.register(name)
    scan_now(bucket)
    bucket.refresh_from_db()
    assert bucket.recheck_days == 7 and bucket.rechecked_at is not None  # the first scan HEADed everything
    first = {path: stored(bucket.location, path) for path in ("a.bin", "b.bin")}

    upload(s3, name, "c.bin", payload(3000, seed=10))
    s3_calls.clear()
    inventory = scan_now(bucket)

    assert s3_calls["HeadObject"] == 1  # only the new object
    assert inventory.checksums_total == 1
    assert {path: stored(bucket.location, path) for path in ("a.bin", "b.bin")} == first

    # Eight days on, the next scan is a recheck: every object is HEADed again, and when is refreshed.
    Bucket.objects.filter(pk=bucket.pk).update(rechecked_at=bucket.rechecked_at - timedelta(days=8))
    s3_calls.clear()
    inventory = scan_now(bucket)

    assert s3_calls["HeadObject"] == 3
    assert inventory.checksums_total == 3 and inventory.files_changed == 0
    for path in ("a.bin", "b.bin"):
        now = stored(bucket.location, path)
        assert now["at"] > first[path]["at"]
        assert {k: v for k, v in now.items() if k != "at"} == {k: v for k, v in first[path].items() if k != "at"}
    bucket.refresh_from_db()
    assert bucket.rechecked_at > datetime.now(UTC) - timedelta(minutes=5)
    # The scan after a recheck changes nothing: an unchanged object's stored text is what it stages.
    s3_calls.clear()
    inventory = scan_now(bucket)
    assert s3_calls["HeadObject"] == 0
    assert inventory.files_changed == 0


def test_an_object_lock_bucket_headed_on_every_listing_rewrites_a_row_for_the_time_of_a_head_only_on_a_recheck(
    s3, scan_now
):
    name = s3.bucket(object_lock=True)
    big = payload(BIG)
    upload(s3, name, "big.bin", big)
    upload(s3, name, "small.bin", payload(1000))
    bucket = s3.register(name)
    inventory = scan_now(bucket)
    assert inventory.checksums_total == 0  # HEADed while listing, for the lock state
    first = {path: stored(bucket.location, path) for path in ("big.bin", "small.bin")}
    # The part size of a version in a versioned bucket.
    assert first["big.bin"]["composite"] == {
        "algo": "crc32",
        "value": composite("crc32", big),
        "parts": 3,
        "part_size": PART,
    }

    assert scan_now(bucket).files_changed == 0
    assert {path: stored(bucket.location, path) for path in first} == first

    bucket.refresh_from_db()
    Bucket.objects.filter(pk=bucket.pk).update(rechecked_at=bucket.rechecked_at - timedelta(days=8))
    assert scan_now(bucket).files_changed == 2
    for path in first:
        assert stored(bucket.location, path)["at"] > first[path]["at"]


def test_a_recheck_is_due_by_the_buckets_own_setting_and_never_at_0_days(s3):
    bucket = s3.register(s3.bucket(), recheck_days=3)
    now = datetime.now(UTC)
    assert recheck_due(bucket, now)  # never checked yet
    bucket.rechecked_at = now - timedelta(days=2)
    assert not recheck_due(bucket, now)
    bucket.rechecked_at = now - timedelta(days=3)
    assert recheck_due(bucket, now)
    bucket.recheck_days = 0
    assert not recheck_due(bucket, now)
    bucket.recheck_days, bucket.fetch_checksums = 3, False
    assert not recheck_due(bucket, now)  # no checksums fetched at all


def test_fleet_bucket_sets_and_lists_the_recheck_interval_and_audits_the_change(s3, capsys):
    name = s3.bucket()
    call_command("fleet_bucket", "add", "ckpt-sums", "--bucket", name, "--endpoint-url", s3.url, "--recheck-days", "14")
    assert Bucket.objects.get(bucket_name=name).recheck_days == 14
    assert "rechecked every 14 days (never yet)" in capsys.readouterr().out

    call_command("fleet_bucket", "set", "ckpt-sums", "--recheck-days", "0")
    call_command("fleet_bucket", "list")

    out = capsys.readouterr().out
    assert "never rechecked" in out
    bucket = Bucket.objects.get(bucket_name=name)
    assert bucket.recheck_days == 0
    event = AuditEvent.objects.get(action="bucket.set")
    assert (event.before, event.after) == ({"recheck_days": 14}, {"recheck_days": 0})


def test_a_recheck_interval_out_of_range_is_refused_and_changes_nothing(s3):
    from ckptfleet.errors import DomainError

    bucket = s3.register(s3.bucket())
    for bad in (-1, 3651, True):
        with pytest.raises(DomainError, match="recheck every"):
            bucket_set(location=bucket.location, recheck_days=bad, actor=Actor.command(label="tests"))
    bucket.refresh_from_db()
    assert bucket.recheck_days == 7
    assert not AuditEvent.objects.filter(action="bucket.set").exists()
