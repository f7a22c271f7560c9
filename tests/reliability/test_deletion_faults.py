"""The reliability scorecard, deletion under S3 faults (issue 15, item 7).

A deletion job runs against moto's S3 server through a proxy that fails on purpose (tests/helpers/faults.py),
so botocore's own retries and the executor's own passes are what the job goes through: 503 SlowDown,
DeleteObjects answered with per-key errors for half its keys, connections reset before the store sees a
request and after it did the work (the answer lost), slow answers, and AccessDenied. Whatever the fault,
nothing outside the frozen list is deleted (other versions of the same keys, other checkpoints, a held
checkpoint, unrelated objects), no delete marker hides anything, and the job's outcome says what happened.

Each test prints its figure: the faults served and the objects checked. RELIABILITY_LONG=1 (``make
test-reliability``) repeats each fault over more rounds.
"""

from __future__ import annotations

import os

import botocore.retries.standard
import pytest

import fleet.s3 as s3lib
from actions import execution, services
from actions.models import DeletionItem, DeletionJob, DeletionState, ItemState
from audit.actor import Actor
from catalog.models import Checkpoint, ShardFile
from fleet.services import bucket_probe_delete_condition
from tests.actions.test_execution import run_due
from tests.helpers.deletion import make_due
from tests.helpers.faults import FaultyEndpoint

pytestmark = [pytest.mark.services, pytest.mark.django_db]

OPERATOR = Actor.command(label="tests: operator")
OTHER = Actor.command(label="tests: another operator")
ROUNDS = 5 if os.environ.get("RELIABILITY_LONG") == "1" else 1


def is_delete_objects(method: str, path: str, query: dict) -> bool:
    """A delete of the job's objects: DeleteObjects, or (without versioning, where moto honours only DeleteObject's
    If-Match and the executor deletes each object under it) a DeleteObject of a key below fleet/."""
    return (method == "POST" and "delete" in query) or (method == "DELETE" and "/fleet/" in path)


def all_versions(client, bucket: str) -> tuple[set[tuple[str, str]], list]:
    found, markers = set(), []
    for page in client.get_paginator("list_object_versions").paginate(Bucket=bucket):
        found.update((v["Key"], v["VersionId"]) for v in page.get("Versions", ()))
        markers.extend((m["Key"], m["VersionId"]) for m in page.get("DeleteMarkers", ()))
    return found, markers


@pytest.fixture
def faulty(s3, monkeypatch):
    monkeypatch.setattr(s3lib, "MAX_ATTEMPTS", 3)
    monkeypatch.setattr(botocore.retries.standard.ExponentialBackoff, "delay_amount", lambda self, context: 0.0)
    monkeypatch.setattr(execution.time, "sleep", lambda seconds: None)  # the executor's pauses between passes
    monkeypatch.setattr(execution, "BATCH", 4)  # several batches per job, so faults land mid-job
    endpoint = FaultyEndpoint(s3.url)
    yield endpoint
    endpoint.close()


@pytest.fixture(params=["versioned", "unversioned"])
def fleet_bucket(request, s3, faulty, scan_now):
    """The nvme-a tree in a bucket reached through the failing endpoint, scanned without faults, with a held
    checkpoint, an older version of one shard (versioned) and an unrelated object."""
    versioned = request.param == "versioned"
    name = s3.bucket(versioned=versioned)
    if versioned:
        s3.put(name, "fleet/llm/llama-tiny/step-100/__0_0.distcp", b"an older version of the shard")
    s3.upload_tree(name, "nvme-a", prefix="fleet/")
    s3.put(name, "unrelated/notes.txt", b"not a checkpoint")
    bucket = s3.register(name, prefix="fleet/", endpoint_url=faulty.url)
    inventory = scan_now(bucket)
    assert inventory.status == "applied", inventory.error
    if not versioned:  # the store's delete condition, probed before any fault is served (moto: DeleteObject only)
        assert bucket_probe_delete_condition(location=bucket.location, actor=OTHER).delete_condition == "single"
    held = Checkpoint.objects.exclude(step=100).filter(run__name="llama-tiny").order_by("step").first()
    services.hold(run=held.run, checkpoint=held, reason="litigation", case_ref="CASE-1", actor=OTHER)
    return name, bucket, versioned


def run_with(fault_kwargs, s3, faulty, fleet_bucket, django_capture_on_commit_callbacks, *, blank_versions=False):
    name, _bucket, versioned = fleet_bucket
    if blank_versions:
        ShardFile.objects.update(version_id="")
    ckpt = Checkpoint.objects.get(run__name="llama-tiny", step=100)
    job = services.schedule_deletion(checkpoint=ckpt, reason="superseded", actor=OPERATOR)
    planned = set(DeletionItem.objects.filter(job=job).values_list("path", flat=True))
    before, markers_before = all_versions(s3.client, name)
    fault = faulty.fail(is_delete_objects, **fault_kwargs)
    make_due(job)
    run_due(django_capture_on_commit_callbacks)
    for _ in range(10):  # the beat sweep sending the job again, as it does after the lease
        if DeletionJob.objects.get(pk=job.pk).state != DeletionState.RUNNING:
            break
        execution.execute(job.pk)
    job.refresh_from_db()
    after, markers_after = all_versions(s3.client, name)
    gone = before - after
    # Nothing outside the plan: only keys of the frozen list, and in a versioned bucket only the planned
    # version of each (the older version of one shard stays); no marker hides anything.
    assert {key for key, _ in gone} <= planned, gone
    assert markers_after == markers_before == []
    if versioned:
        planned_versions = set(DeletionItem.objects.filter(job=job).values_list("path", "version_id"))
        assert gone <= planned_versions
        assert "fleet/llm/llama-tiny/step-100/__0_0.distcp" in {k for k, _ in after}
    assert "unrelated/notes.txt" in {k for k, _ in after}
    held_keys = {f"fleet/{p}" for p in ShardFile.objects.exclude(copy__checkpoint=ckpt).values_list("path", flat=True)}
    assert held_keys <= {k for k, _ in after}
    print(
        f"\n[scorecard] {fault_kwargs} on a {'versioned' if versioned else 'unversioned'} bucket: "
        f"{fault.served} faults served, {len(before)} versions checked, job {job.state}: {job.outcome}"
    )
    return job, gone, fault


@pytest.mark.parametrize("round_", range(ROUNDS))
@pytest.mark.parametrize(
    "fault_kwargs",
    [
        {"status": 503, "code": "SlowDown", "times": 4},
        {"action": "partial", "code": "InternalError", "times": 3},
        {"action": "reset", "times": 2},
        {"action": "reset_after", "times": 2},
        {"delay": 0.3, "action": "partial", "code": "SlowDown", "times": 2},
    ],
    ids=["slowdown", "partial", "reset-before", "reset-after", "slow-partial"],
)
def test_transient_faults_end_in_exactly_the_plan(
    fault_kwargs, round_, s3, faulty, fleet_bucket, django_capture_on_commit_callbacks
):
    job, gone, fault = run_with(
        fault_kwargs, s3, faulty, fleet_bucket, django_capture_on_commit_callbacks, blank_versions=round_ % 2 == 0
    )
    assert fault.served >= 1
    assert job.state == DeletionState.COMPLETED, job.outcome
    states = set(DeletionItem.objects.filter(job=job).values_list("state", flat=True))
    assert states <= {ItemState.DELETED, ItemState.SKIPPED}
    assert len(gone) == job.items_total  # every planned object went, exactly once
    # Deleted or skipped as already gone (the store did it, and its answer was lost): the outcome says which.
    assert job.outcome.startswith(f"{job.items_deleted} of {job.items_total} deleted")


def test_access_denied_fails_the_job_and_deletes_nothing(s3, faulty, fleet_bucket, django_capture_on_commit_callbacks):
    job, gone, _fault = run_with(
        {"status": 403, "code": "AccessDenied", "message": "Access Denied"},
        s3,
        faulty,
        fleet_bucket,
        django_capture_on_commit_callbacks,
    )
    _name, _bucket, versioned = fleet_bucket
    if versioned:  # DeleteObjects refused as a whole
        assert job.state == DeletionState.FAILED, job.outcome
        assert "refused the deletion" in job.outcome
    else:  # each object's own DeleteObject refused: as a per-key refusal (Object Lock) is, the items stay blocked
        assert job.state == DeletionState.BLOCKED, job.outcome
        assert f"{job.items_total} refused by the store" in job.outcome
    assert gone == set() and job.items_deleted == 0
