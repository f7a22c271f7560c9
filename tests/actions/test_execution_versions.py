"""Deleting exactly what was planned when the plan lacks version ids, or the store ignores ETag conditions.

Against moto's S3 server, with buckets filled by boto3's own upload and scanned for real. Two failures
of a reliability review are reproduced here (issue 15):

- a deletion frozen before the scan's HEAD pass had given its objects their version ids (simulated by
  blanking them, the state a scan leaves between its listing and its HEAD pass) used to send
  version-less deletes to a versioned bucket: the store only added delete markers, the data stayed
  stored and billed, the job said "3 of 3 deleted", and each replay stacked more markers;
- in a bucket without versioning, an object rewritten after approval was deleted, because moto (like
  several S3-compatible stores) ignores the ETag condition of DeleteObjects.

And a hold that loses the race to the batch that deleted everything is not reported as blocking it.
"""

from __future__ import annotations

import pytest

from actions import execution, services
from actions.models import DeletionItem, DeletionJob, DeletionState, ItemState
from audit.actor import Actor
from audit.models import AuditEvent
from catalog.models import ShardFile
from tests.actions.test_execution import completions, run_due, versions
from tests.helpers.deletion import OPERATOR, checkpoint, make_due

pytestmark = pytest.mark.django_db

OTHER = Actor.command(label="tests: another operator")
STEP_100 = "fleet/llm/llama-tiny/step-100/"


def markers(s3, bucket: str) -> list[tuple[str, str]]:
    found = []
    for page in s3.client.get_paginator("list_object_versions").paginate(Bucket=bucket):
        found.extend((m["Key"], m["VersionId"]) for m in page.get("DeleteMarkers", ()))
    return found


def blank_versions() -> None:
    """The catalog as a scan leaves it before its HEAD pass: objects listed, their version ids not yet known."""
    ShardFile.objects.update(version_id="")


@pytest.fixture
def unversioned(s3, scan_now):
    """A bucket that never had versioning, holding the nvme-a tree below fleet/, scanned."""
    name = s3.bucket()
    s3.upload_tree(name, "nvme-a", prefix="fleet/")
    bucket = s3.register(name, prefix="fleet/")
    inventory = scan_now(bucket)
    assert inventory.status == "applied", inventory.error
    return name, bucket


def test_a_versioned_bucket_never_gets_a_version_less_delete(s3, scanned, django_capture_on_commit_callbacks):
    name, _bucket = scanned
    blank_versions()
    planned = {(k, v) for k, v in versions(s3, name) if k.startswith(STEP_100)}
    job = services.schedule_deletion(checkpoint=checkpoint(100), reason="superseded", actor=OPERATOR)
    assert set(DeletionItem.objects.filter(job=job).values_list("version_id", flat=True)) == {""}
    before = versions(s3, name)
    make_due(job)
    run_due(django_capture_on_commit_callbacks)

    job.refresh_from_db()
    assert job.state == DeletionState.COMPLETED, job.outcome
    assert job.items_deleted == 3 and job.outcome.startswith("3 of 3 deleted")
    assert markers(s3, name) == []  # no marker hides anything: the bytes are really gone
    after = versions(s3, name)
    assert len(before - after) == 3 and before - after <= planned
    # The older version of one shard was never in the plan: it stays.
    assert any(k.startswith(STEP_100) for k, _ in after)
    looked_up = set(DeletionItem.objects.filter(job=job).values_list("version_id", flat=True))
    assert "" not in looked_up and {(i.path, i.version_id) for i in job.items.all()} == before - after
    batch = AuditEvent.objects.get(action="deletion.batch", after__deletion=job.pk)
    assert batch.after["versions_looked_up"] == 3
    assert ShardFile.objects.filter(path__startswith="llm/llama-tiny/step-100/", gone_at__isnull=True).count() == 0


def test_a_replay_after_a_crash_adds_no_markers(s3, scanned, monkeypatch, django_capture_on_commit_callbacks):
    name, _bucket = scanned
    blank_versions()
    job = services.schedule_deletion(checkpoint=checkpoint(100), reason="superseded", actor=OPERATOR)
    make_due(job)
    before = versions(s3, name)
    record = execution._record

    def die(*args, **kwargs):
        raise SystemExit("killed")  # the batch's transaction never commits: the version lookups are lost too

    monkeypatch.setattr(execution, "_record", die)
    with pytest.raises(SystemExit):
        run_due(django_capture_on_commit_callbacks)
    monkeypatch.setattr(execution, "_record", record)
    for _ in range(3):  # redeliveries
        execution.execute(job.pk)
    job.refresh_from_db()
    assert job.state == DeletionState.COMPLETED, job.outcome
    assert markers(s3, name) == []
    assert len(before - versions(s3, name)) == 3
    # The replay found the planned versions gone and says so, rather than claiming it deleted them.
    assert job.items_deleted + DeletionItem.objects.filter(job=job, state=ItemState.SKIPPED).count() == 3


def test_an_object_rewritten_after_approval_keeps_its_new_content(s3, scanned, django_capture_on_commit_callbacks):
    """Versioned: the planned (now non-current) version goes, the new current one stays, no marker."""
    name, _bucket = scanned
    blank_versions()
    job = services.schedule_deletion(checkpoint=checkpoint(100), reason="superseded", actor=OPERATOR)
    rewritten = DeletionItem.objects.filter(job=job).order_by("path").first().path
    new = s3.put(name, rewritten, b"written again after the deletion was approved")["VersionId"]
    make_due(job)
    run_due(django_capture_on_commit_callbacks)
    job.refresh_from_db()
    assert job.state == DeletionState.COMPLETED, job.outcome
    assert markers(s3, name) == []
    head = s3.client.head_object(Bucket=name, Key=rewritten)
    assert head["VersionId"] == new  # the new content was never in the plan
    assert (rewritten, new) in versions(s3, name)
    assert job.items_deleted == 3


def test_unversioned_an_object_rewritten_after_approval_is_skipped(s3, unversioned, django_capture_on_commit_callbacks):
    name, _bucket = unversioned
    job = services.schedule_deletion(checkpoint=checkpoint(100), reason="superseded", actor=OPERATOR)
    items = list(DeletionItem.objects.filter(job=job).order_by("path"))
    assert len(items) == 3 and all(not i.version_id for i in items)
    rewritten = items[0].path
    s3.put(name, rewritten, b"written again after the deletion was approved")
    make_due(job)
    run_due(django_capture_on_commit_callbacks)

    job.refresh_from_db()
    assert job.items_deleted == 2
    skipped = DeletionItem.objects.get(job=job, path=rewritten)
    assert skipped.state == ItemState.SKIPPED and "changed since scheduling" in skipped.detail
    body = s3.client.get_object(Bucket=name, Key=rewritten)["Body"].read()
    assert body == b"written again after the deletion was approved"
    for item in items[1:]:
        with pytest.raises(s3.client.exceptions.ClientError):
            s3.client.head_object(Bucket=name, Key=item.path)
    assert "1 skipped" in job.outcome and job.outcome.startswith("2 of 3 deleted")
    # The rewritten file is not marked gone: its new content is still in the store.
    assert ShardFile.objects.filter(path=rewritten.removeprefix("fleet/"), gone_at__isnull=True).exists()


def test_a_hold_that_loses_the_race_is_not_reported_as_blocking(
    s3, scanned, monkeypatch, django_capture_on_commit_callbacks
):
    _name, _bucket = scanned
    ckpt = checkpoint(100)
    job = services.schedule_deletion(checkpoint=ckpt, reason="superseded", actor=OPERATOR)
    make_due(job)
    monkeypatch.setattr(execution, "execute", lambda job_id: "not now")
    run_due(django_capture_on_commit_callbacks)
    assert execution.run_batch(job.pk).status == "more"  # the one batch: every object is gone
    hold = services.hold(run=ckpt.run, checkpoint=ckpt, reason="audit", case_ref="CASE-9", actor=OTHER)
    placed = AuditEvent.objects.get(action="hold.place", after__hold=hold.pk)
    assert placed.after["open_deletions_now_blocked"] == []
    assert execution.run_batch(job.pk).status == "done"
    job.refresh_from_db()
    assert job.state == DeletionState.COMPLETED and job.outcome.startswith("3 of 3 deleted"), job.outcome
    assert [e.action for e in completions(job)] == ["deletion.complete"]


def test_a_hold_mid_job_says_what_went_before_it(s3, scanned, monkeypatch, django_capture_on_commit_callbacks):
    ckpt = checkpoint(100)
    job = services.schedule_deletion(checkpoint=ckpt, reason="superseded", actor=OPERATOR)
    make_due(job)
    monkeypatch.setattr(execution, "BATCH", 1)
    monkeypatch.setattr(execution, "execute", lambda job_id: "not now")
    run_due(django_capture_on_commit_callbacks)
    execution.run_batch(job.pk)
    hold = services.hold(run=ckpt.run, checkpoint=ckpt, reason="audit", case_ref="CASE-10", actor=OTHER)
    placed = AuditEvent.objects.get(action="hold.place", after__hold=hold.pk)
    assert placed.after["open_deletions_now_blocked"] == [job.pk]
    assert execution.run_batch(job.pk).status == "stopped"
    job = DeletionJob.objects.get(pk=job.pk)
    assert job.state == DeletionState.BLOCKED
    assert "1 of 3 deleted before that, 2 left in place" in job.outcome
