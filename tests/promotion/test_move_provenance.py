"""Provenance and the end of a move's verification, against moto's S3 server: the copy a move writes records the copy
it was made from (and only such a record lets the source's checksum judge it), a new copy the catalog finds wrong
ends its move failed at once, and one that never verifies ends it failed after the bound, with the reason shown."""

from __future__ import annotations

import threading
from datetime import timedelta

import botocore.retries.standard
import pytest
import time_machine
from django.urls import reverse
from django.utils import timezone

from actions.models import DeletionJob
from catalog.choices import CopyState, Verification, VerificationBasis
from catalog.models import CheckpointCopy
from catalog.verification import checkpoints_verify
from fleet import s3 as s3lib
from fleet.choices import InventorySource, InventoryStatus
from fleet.models import Bucket, Inventory
from promotion import moves, runner
from promotion.choices import JobState
from promotion.models import PromotionJob
from promotion.moves import verify as verify_module
from promotion.tasks import advance_promotions
from tests.helpers.faults import FaultyEndpoint
from tests.promotion.conftest import events, step

pytestmark = pytest.mark.services

# Step 100 of the tree has no sidecar: no checksum written at save time settles its copies, only the copies do.
RANK1 = "llm/llama-tiny/step-100/__1_0.distcp"


def demote(kit, capture, checkpoint, target):
    with capture(execute=True):
        (job,) = moves.request_move(
            checkpoints=[checkpoint],
            target_location=target.location,
            target_storage_class="STANDARD_IA",
            actor=kit.actor,
            reason="cold storage for finished runs",
        )
    job.refresh_from_db()
    return job


def damage(kit, bucket, path: str) -> None:
    """Other bytes of the same size at one shard of the new copy (written at the store, with its own SHA256), then
    its .metadata again, unchanged: a rewrite the DCP format cannot tell from a whole save (its metadata is last)."""
    key = f"{bucket.prefix}{path}"
    size = len(kit.body(bucket.bucket_name, key))
    kit.s3.put(bucket.bucket_name, key, b"\x00" * size, StorageClass="STANDARD_IA")
    metadata = key.rsplit("/", 1)[0] + "/.metadata"
    kit.s3.put(bucket.bucket_name, metadata, kit.body(bucket.bucket_name, metadata), StorageClass="STANDARD_IA")


def new_copy(checkpoint, bucket) -> CheckpointCopy:
    return CheckpointCopy.objects.get(checkpoint=checkpoint, location=bucket.location, gone_at__isnull=True)


def test_a_moved_copy_records_its_source_and_is_judged_against_it_only_because_that_is_recorded(
    kit, scanned, scan_now, client, django_capture_on_commit_callbacks
):
    cold = kit.bucket(prefix="fleet/")
    checkpoint = step(100)
    source = CheckpointCopy.objects.get(checkpoint=checkpoint, location=scanned.location)

    job = demote(kit, django_capture_on_commit_callbacks, checkpoint, cold)
    with django_capture_on_commit_callbacks(execute=True):
        advance_promotions()
    job.refresh_from_db()
    assert job.state == JobState.COMPLETED, (job.error, job.source_outcome)
    copy = new_copy(checkpoint, cold)
    # The rescan after the copy found the new copy and, asking the promotions, recorded where it came from.
    assert (copy.made_from_id, copy.made_at, copy.made_by) == (source.pk, job.started_at, f"demotion #{job.pk}")
    assert copy.verification == Verification.VERIFIED
    client.force_login(kit.viewer)
    page = client.get(reverse("catalog:checkpoint-detail", args=[checkpoint.pk])).content.decode()
    assert f"the copy at {scanned.location.name} by demotion #{job.pk}" in page
    answer = client.get(f"/api/v1/checkpoints/{checkpoint.pk}/").json()
    made = {c["id"]: (c["made_from"], c["made_by"]) for c in answer["copies"]}
    assert made == {source.pk: (None, ""), copy.pk: (source.pk, f"demotion #{job.pk}")}

    # A shard of the new copy changes at the store; the source's checksum was taken before the move made it.
    damage(kit, cold, RANK1)
    assert scan_now(cold).status == InventoryStatus.APPLIED
    copy.refresh_from_db()
    assert (copy.state, copy.verification, copy.verification_basis) == (
        CopyState.CORRUPT,
        Verification.MISMATCH,
        VerificationBasis.SOURCE,
    )
    assert copy.verification_reasons[0] == (
        f"__1_0.distcp: sha256 differs from the copy at {scanned.location.name}, which this copy was made from by "
        f"demotion #{job.pk}, whose checksum was taken before the copy was made (a copy cannot be more right than "
        "its source was)"
    )
    source.refresh_from_db()
    assert source.state == CopyState.COMPLETE and source.verification != Verification.DISPUTED

    # Without the record the same two copies are only each other's word: disputed, neither condemned.
    CheckpointCopy.objects.filter(pk=copy.pk).update(made_from=None, made_at=None, made_by="")
    checkpoints_verify([checkpoint.pk])
    copy.refresh_from_db()
    source.refresh_from_db()
    assert copy.verification == source.verification == Verification.DISPUTED, (
        copy.verification_reasons,
        source.verification_reasons,
    )
    assert copy.verification_basis == ""


def test_a_new_copy_the_catalog_finds_wrong_ends_its_move_failed_at_once_and_keeps_the_source(
    kit, scanned, scan_now, django_capture_on_commit_callbacks
):
    cold = kit.bucket(prefix="fleet/")
    checkpoint = step(100)
    # A scan of the target bucket is under way, so the move's own rescan is refused; the new objects verified.
    stuck = Inventory.objects.create(
        location=cold.location, source=InventorySource.BUCKET_LISTING, agent="scanner", status="processing"
    )
    job = demote(kit, django_capture_on_commit_callbacks, checkpoint, cold)
    assert job.state == JobState.VERIFYING and job.verified_at is not None
    # Before the next scan shows the new copy, one of its objects gets other bytes.
    damage(kit, cold, RANK1)
    Inventory.objects.filter(pk=stuck.pk).update(status=InventoryStatus.FAILED, error="worker lost")
    assert scan_now(cold).status == InventoryStatus.APPLIED
    assert new_copy(checkpoint, cold).verification == Verification.MISMATCH  # judged against its recorded source

    with django_capture_on_commit_callbacks(execute=True):
        assert advance_promotions()["verify"] == [job.pk]
    job.refresh_from_db()
    assert job.state == JobState.FAILED
    assert job.error.startswith("the catalog found the new copy wrong: __1_0.distcp: sha256 differs from the copy")
    assert job.error.endswith("; the source is kept")
    assert not DeletionJob.objects.exists()
    (failed,) = events("move.fail")
    assert failed.reason == job.error and failed.after["state"] == JobState.FAILED


def test_a_move_whose_new_copy_never_verifies_ends_failed_after_the_bound_and_the_page_and_api_say_why(
    kit, scanned, client, django_capture_on_commit_callbacks, settings
):
    settings.MOVE_VERIFY_HOURS = 6
    cold = kit.bucket(prefix="fleet/")
    checkpoint = step(200)
    # Every scan of the target bucket is refused (one is stuck): no scan ever shows the new copy in the catalog.
    Inventory.objects.create(
        location=cold.location, source=InventorySource.BUCKET_LISTING, agent="scanner", status="processing"
    )
    job = demote(kit, django_capture_on_commit_callbacks, checkpoint, cold)
    assert job.state == JobState.VERIFYING and job.verifying_since is not None

    client.force_login(kit.viewer)
    with time_machine.travel(job.verifying_since + timedelta(hours=5), tick=False):
        with django_capture_on_commit_callbacks(execute=True):
            advance_promotions()
        job.refresh_from_db()
        assert job.state == JobState.VERIFYING
        assert job.verify_detail == "no scan has shown the new copy in the catalog"
        page = client.get(reverse("promotion:job-detail", args=[job.pk])).content.decode()
        assert "not yet: no scan has shown the new copy in the catalog" in page
        assert "ends failed, keeping the source" in page and ">in 1 h</time>" in page

    with time_machine.travel(job.verifying_since + timedelta(hours=6, minutes=1), tick=False):
        with django_capture_on_commit_callbacks(execute=True):
            assert job.pk in advance_promotions()["verify"]
        job.refresh_from_db()
        assert job.state == JobState.FAILED
        assert job.finished_at == timezone.now()
    assert job.error == (
        "the new copy did not verify within 6 h of verifying: no scan has shown the new copy in the catalog; "
        "the source is kept"
    )
    assert not DeletionJob.objects.exists()
    assert events("move.fail")[0].reason == job.error

    page = client.get(reverse("promotion:job-detail", args=[job.pk])).content.decode()
    assert "Why it failed" in page and "did not verify within 6 h of verifying" in page
    answer = client.get(f"/api/v1/promotions/{job.pk}/").json()
    assert (answer["state"], answer["error"]) == ("failed", job.error)
    assert answer["verify_detail"] == "no scan has shown the new copy in the catalog"


@pytest.fixture
def faulty(s3, monkeypatch):
    """A failing endpoint in front of the test server, three attempts per request and no waiting between them."""
    monkeypatch.setattr(s3lib, "MAX_ATTEMPTS", 3)
    monkeypatch.setattr(botocore.retries.standard.ExponentialBackoff, "delay_amount", lambda self, context: 0.0)
    endpoint = FaultyEndpoint(s3.url)
    yield endpoint
    endpoint.close()


def test_a_move_whose_new_objects_the_store_never_answers_for_ends_failed_after_the_tries(
    kit, scanned, faulty, django_capture_on_commit_callbacks, settings, monkeypatch
):
    settings.MOVE_VERIFY_ATTEMPTS = 2
    cold = kit.bucket(prefix="fleet/")
    with django_capture_on_commit_callbacks(execute=False):
        (job,) = moves.request_move(
            checkpoints=[step(100)],
            target_location=cold.location,
            target_storage_class="STANDARD_IA",
            actor=kit.actor,
            reason="cold",
        )
    PromotionJob.objects.filter(pk=job.pk).update(state=JobState.COPYING)
    # The target bucket is reached through a proxy that, once the objects are copied and their verification
    # begins, answers every HEAD of the target bucket 503, however often it is asked.
    Bucket.objects.filter(pk=cold.pk).update(endpoint_url=faulty.url)
    verifying = threading.Event()
    faulty.fail(lambda method, path, query: verifying.is_set() and method == "HEAD" and f"/{cold.bucket_name}/" in path)
    verify_all = verify_module._verify_all

    def begins(job):
        verifying.set()
        return verify_all(job)

    monkeypatch.setattr(verify_module, "_verify_all", begins)

    with pytest.raises(s3lib.S3Error):  # the task retries, then beat sends it again
        runner.copy(job.pk, claim="w1")
    job.refresh_from_db()
    assert (job.state, job.verify_attempts) == (JobState.VERIFYING, 1)
    assert job.verify_detail.startswith("the store did not answer while the new objects were checked: ")

    assert moves.copied(job.pk) == JobState.FAILED
    job.refresh_from_db()
    assert job.error.startswith("the new copy did not verify after 2 tries: the store did not answer")
    assert job.error.endswith("; the source is kept")
    assert not DeletionJob.objects.exists()
    assert [e.reason for e in events("move.fail")] == [job.error]
