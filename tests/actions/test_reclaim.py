"""Proof of reclaim (issue 27, item 10): after a deletion ends, the store is listed again, versions and trash
included, and the job shows what it really freed, in bytes and money, or a failed proof in the problems list.

Against moto's S3 server with objects uploaded the way boto3 does by default, scanned for real. A store that
answers "deleted" and keeps the data is the fault proxy's "lie" (tests/helpers/faults.py); an object written again
at a key between the delete and the proof is a put to moto.
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from actions import execution, reclaim, services
from actions.models import DeletionItem, DeletionJob, DeletionState, ItemState, ProofState
from audit.models import AuditEvent
from dashboard import problems
from dashboard.problems import Filters, Kind
from tests.actions.test_execution import run_due, versions
from tests.helpers.deletion import OPERATOR, checkpoint, make_due
from tests.helpers.faults import FaultyEndpoint

pytestmark = pytest.mark.django_db

STEP_100 = "fleet/llm/llama-tiny/step-100/"


def proofs(job: DeletionJob) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action="deletion.proof", after__deletion=job.pk).order_by("pk"))


def delete_step_100(django_capture_on_commit_callbacks) -> DeletionJob:
    job = services.schedule_deletion(checkpoint=checkpoint(100), reason="superseded", actor=OPERATOR)
    make_due(job)
    run_due(django_capture_on_commit_callbacks)
    job.refresh_from_db()
    return job


def reclaim_rows(user=None) -> list[problems.Problem]:
    return list(problems.all_problems(Filters(kind=Kind.RECLAIM), user))


@pytest.fixture
def lying(s3, scan_now):
    """A versioned bucket reached through a proxy whose DeleteObjects answers "deleted" and deletes nothing."""
    endpoint = FaultyEndpoint(s3.url)
    name = s3.bucket(versioned=True)
    s3.upload_tree(name, "nvme-a", prefix="fleet/")
    bucket = s3.register(name, prefix="fleet/", endpoint_url=endpoint.url)
    inventory = scan_now(bucket)
    assert inventory.status == "applied", inventory.error
    yield name, endpoint
    endpoint.close()


def test_a_deletion_that_really_deleted_is_proved_and_shows_bytes_and_money_reclaimed(
    s3, scanned, django_capture_on_commit_callbacks, signed_in
):
    job = delete_step_100(django_capture_on_commit_callbacks)
    assert job.state == DeletionState.COMPLETED, job.outcome

    assert job.proof_state == ProofState.CONFIRMED, job.proof_detail
    assert job.bytes_reclaimed == job.bytes_total > 0 and job.bytes_unproven == 0 and job.proof_failures == []
    assert isinstance(job.money_reclaimed, Decimal) and job.money_reclaimed > 0 and job.money_currency
    [event] = proofs(job)
    assert event.after["proof_state"] == "confirmed" and event.after["bytes_reclaimed"] == job.bytes_total
    assert reclaim_rows() == []

    page = signed_in.get(f"/actions/deletions/{job.pk}/").content.decode()
    assert "Proof of reclaim" in page and "confirmed" in page and "/month" in page
    body = signed_in.get(f"/api/v1/actions/deletions/{job.pk}/").json()
    assert body["proof_state"] == "confirmed" and body["bytes_reclaimed"] == job.bytes_total
    assert Decimal(body["money_reclaimed"]) == job.money_reclaimed
    overview = signed_in.get("/spend/").content.decode()
    assert "Reclaimed this month" in overview and "1 deletion" in overview

    # Idempotent: proving again changes nothing and writes no second event.
    assert reclaim.prove(job.pk) == ProofState.CONFIRMED
    assert len(proofs(job)) == 1


def test_a_store_that_says_deleted_and_keeps_the_versions_fails_the_proof_and_lists_a_problem(
    s3, lying, django_capture_on_commit_callbacks, signed_in
):
    name, endpoint = lying
    endpoint.fail(lambda method, path, query: method == "POST" and "delete" in query, action="lie")
    planned_before = {(k, v) for k, v in versions(s3, name) if k.startswith(STEP_100)}

    job = delete_step_100(django_capture_on_commit_callbacks)

    # The store answered "deleted" for every version, so the job says so: main stopped here, a silent success.
    assert job.state == DeletionState.COMPLETED and job.outcome == "3 of 3 deleted"
    assert planned_before <= versions(s3, name)  # nothing was deleted
    assert job.proof_state == ProofState.FAILED
    assert job.bytes_reclaimed == 0 and job.bytes_unproven == job.bytes_total
    assert {f["key"] for f in job.proof_failures} == {k for k, _ in planned_before}
    assert all("is still stored, as the current version" in f["reason"] for f in job.proof_failures)
    [event] = proofs(job)
    assert event.after["proof_state"] == "failed" and len(event.after["not_gone"]) == 3

    [row] = reclaim_rows()
    assert row.bytes == job.bytes_total and row.subject_url == f"/actions/deletions/{job.pk}/"
    assert "3 of 3 freed objects are still stored" in row.reasons[0]
    assert any(r.startswith("Fix:") for r in row.reasons) and row.action_label == "Check again"
    api = signed_in.get("/api/v1/problems/?kind=reclaim_unproven").json()
    assert [r["subject_label"] for r in api["results"]] == [row.subject_label]
    listed = signed_in.get("/problems/?kind=reclaim_unproven").content.decode()
    assert "Reclaim not proven" in listed and f"deletion {job.pk}" in listed
    page = signed_in.get(f"/actions/deletions/{job.pk}/").content.decode()
    assert "failed" in page and "is still stored" in page


def test_a_version_left_behind_a_delete_marker_fails_the_proof(s3, scanned, django_capture_on_commit_callbacks):
    """The product meant to delete exact versions; the store kept one as a noncurrent version behind a marker."""
    name, _bucket = scanned
    job = delete_step_100(django_capture_on_commit_callbacks)
    assert job.proof_state == ProofState.CONFIRMED
    item = DeletionItem.objects.filter(job=job, state=ItemState.DELETED).order_by("pk").first()
    body = b"the same bytes again"
    # The version the job deleted is back (as a store that lost the delete would show it), hidden by a marker.
    s3.client.put_object(Bucket=name, Key=item.path, Body=body)
    s3.client.delete_object(Bucket=name, Key=item.path)
    DeletionItem.objects.filter(pk=item.pk).update(version_id=_noncurrent(s3, name, item.path))

    assert reclaim.prove(job.pk) == ProofState.FAILED
    job.refresh_from_db()
    [failure] = job.proof_failures
    assert failure["key"] == item.path and "a noncurrent version (behind a delete marker)" in failure["reason"]
    assert len(proofs(job)) == 2  # confirmed, then failed: each change of verdict is audited


def _noncurrent(s3, bucket: str, key: str) -> str:
    answer = s3.client.list_object_versions(Bucket=bucket, Prefix=key)
    return next(v["VersionId"] for v in answer["Versions"] if v["Key"] == key and not v["IsLatest"])


def test_an_object_written_again_before_the_proof_is_not_counted_as_reclaimed(
    s3, unversioned_bucket, django_capture_on_commit_callbacks, signed_in
):
    name = unversioned_bucket
    job = services.schedule_deletion(checkpoint=checkpoint(100), reason="superseded", actor=OPERATOR)
    make_due(job)
    key = DeletionItem.objects.filter(job=job).order_by("path").first().path
    with django_capture_on_commit_callbacks(execute=False) as queued:
        execution.start_due()
    with django_capture_on_commit_callbacks(execute=False) as after_start:
        for callback in queued:
            callback()  # the deletion runs; the proof it queues waits in ``after_start``
    job.refresh_from_db()
    assert job.state == DeletionState.COMPLETED and job.proof_state == ProofState.NONE
    s3.put(name, key, b"written again between the delete and the proof")
    with django_capture_on_commit_callbacks(execute=True):
        for callback in after_start:
            callback()

    job.refresh_from_db()
    assert job.proof_state == ProofState.FAILED, job.proof_detail
    [failure] = job.proof_failures
    assert failure["key"] == key and "written again since the delete" in failure["reason"]
    assert job.bytes_reclaimed == job.bytes_total - failure["bytes"]

    # Once the key is free again, "Check again" (audited) proves the reclaim and the problem goes.
    s3.client.delete_object(Bucket=name, Key=key)
    with django_capture_on_commit_callbacks(execute=True):
        answer = signed_in.post(f"/actions/deletions/{job.pk}/prove/")
    assert answer.status_code == 302
    job.refresh_from_db()
    assert job.proof_state == ProofState.CONFIRMED and job.bytes_reclaimed == job.bytes_total
    assert AuditEvent.objects.filter(action="deletion.proof_request", after__deletion=job.pk).count() == 1
    assert reclaim_rows() == []


def test_only_an_ended_deletion_can_be_asked_for_its_proof(s3, scanned, signed_in):
    job = services.schedule_deletion(checkpoint=checkpoint(100), reason="superseded", actor=OPERATOR)
    page = signed_in.post(f"/actions/deletions/{job.pk}/prove/", follow=True).content.decode()
    assert "Not checked: deletion" in page and "only an ended deletion" in page
    assert not AuditEvent.objects.filter(action__startswith="deletion.proof").exists()


@pytest.fixture
def unversioned_bucket(s3, scan_now):
    name = s3.bucket()
    s3.upload_tree(name, "nvme-a", prefix="fleet/")
    bucket = s3.register(name, prefix="fleet/")
    inventory = scan_now(bucket)
    assert inventory.status == "applied", inventory.error
    return name
