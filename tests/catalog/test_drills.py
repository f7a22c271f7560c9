"""Restore drills against a real S3 endpoint (moto's server): objects uploaded the way boto3 uploads them, scanned
through the product's scan, then read back and checked against the checksums the scan recorded."""

from __future__ import annotations

import random

import pytest

from catalog import drills
from catalog.models import CheckpointCopy, RestoreDrill, Run
from catalog.recovery import assumptions
from catalog.recovery_model import recovery_page

pytestmark = pytest.mark.django_db


@pytest.fixture
def bucket_fleet(s3, scan_now):
    """llm/llama-tiny step-100 and step-200 (DCP) in a bucket, uploaded with SHA256 checksums, scanned."""
    name = s3.bucket()
    s3.upload_tree(name, "nvme-a/llm", prefix="ckpt/llm/")
    bucket = s3.register(name, prefix="ckpt/")
    inventory = scan_now(bucket)
    assert inventory.status == "applied", inventory.error
    return s3, name, bucket


def copy_of(step: int) -> CheckpointCopy:
    return CheckpointCopy.objects.get(checkpoint__step=step, checkpoint__run__name="llama-tiny", gone_at__isnull=True)


def test_a_drill_reads_every_byte_back_and_measured_throughput_replaces_the_assumption(bucket_fleet):
    before = assumptions()["object_standard"]
    row = drills.drill(copy_of(200))
    assert row.outcome == RestoreDrill.Outcome.PASSED, row.detail
    assert row.files == copy_of(200).file_count and row.bytes == copy_of(200).bytes and row.seconds > 0
    after = assumptions()["object_standard"]
    assert after.basis.startswith("measured: the median of 1 restore drill")
    assert after.mib_per_s != before.mib_per_s
    rec = recovery_page(Run.objects.get(name="llama-tiny"))
    assert rec.best.copy.pk == copy_of(200).pk and not rec.best.unreachable


def test_bytes_that_changed_since_the_checksum_was_recorded_fail_the_drill_and_the_copy_is_not_offered(
    bucket_fleet,
):
    s3, name, _ = bucket_fleet
    key = "ckpt/llm/llama-tiny/step-200/__1_0.distcp"
    body = s3.client.get_object(Bucket=name, Key=key)["Body"].read()
    damaged = bytearray(body)
    damaged[len(damaged) // 2] ^= 0xFF
    s3.client.put_object(Bucket=name, Key=key, Body=bytes(damaged))  # same size, other bytes; not rescanned
    row = drills.drill(copy_of(200))
    assert row.outcome == RestoreDrill.Outcome.FAILED
    assert "__1_0.distcp: sha256 of the bytes read back is" in row.detail
    rec = recovery_page(Run.objects.get(name="llama-tiny"))
    # Its only copy is out of the ranking: the answer is the newest checkpoint with a copy that is, and why not 200.
    assert rec.checkpoint.step == 100 and [s.kind for s in rec.skipped] == ["unreachable"]
    assert "restore drill" in rec.skipped[0].why
    assert "restore drill" in rec.unreachable[0].unreachable and "sha256" in rec.unreachable[0].unreachable
    # A later drill that passes (the object put back) takes the flag away.
    s3.client.put_object(Bucket=name, Key=key, Body=body)
    assert drills.drill(copy_of(200)).outcome == RestoreDrill.Outcome.PASSED
    assert recovery_page(Run.objects.get(name="llama-tiny")).best.copy.pk == copy_of(200).pk


def test_a_file_that_is_gone_fails_the_drill(bucket_fleet):
    s3, name, _ = bucket_fleet
    s3.client.delete_object(Bucket=name, Key="ckpt/llm/llama-tiny/step-100/.metadata")
    row = drills.drill(copy_of(100))
    assert row.outcome == RestoreDrill.Outcome.FAILED and ".metadata" in row.detail


def test_the_round_picks_each_teams_newest_restorable_checkpoint_and_never_an_archived_copy(s3, scan_now, settings):
    name = s3.bucket()
    s3.upload_tree(name, "nvme-a/llm", prefix="llm/", classes={"llama-tiny/step-200/*": "GLACIER"})
    bucket = s3.register(name)
    scan_now(bucket)
    settings.RESTORE_DRILL_PER_TEAM = 2
    picked = drills.pick(rng=random.Random(1))
    assert [c.checkpoint.step for c in picked] == [100], "step-200 is only in GLACIER: not drilled"
    rows = drills.run_drills()
    assert len(rows) == 1 and rows[0].outcome == RestoreDrill.Outcome.PASSED


def test_the_checkpoint_page_lists_the_drills(bucket_fleet, signed_in_as):
    drills.drill(copy_of(200))
    page = signed_in_as("viewer").get(f"/checkpoints/{copy_of(200).checkpoint_id}/").content.decode()
    assert "Restore drills" in page and "Passed" in page


def test_the_command_runs_a_round_and_lists_it(bucket_fleet):
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    call_command("restore_drills", "run", stdout=out)
    assert "passed" in out.getvalue() and "0 not passed" in out.getvalue()
    out = StringIO()
    call_command("restore_drills", "list", stdout=out)
    assert "llama-tiny" in out.getvalue()
