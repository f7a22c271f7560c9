"""Deletion execution against a real S3 HTTP endpoint (moto's server), with tasks run in-process.

Checkpoints come from a real scan of a bucket, jobs from ``actions.services.schedule_deletion``;
only the grace period is shortened (``execute_after`` moved into the past), as time passing would.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from actions import execution, services
from actions.models import DeletionItem, DeletionJob, DeletionState, ItemState, Pin
from audit.actor import Actor
from audit.models import AuditEvent
from catalog.models import Checkpoint, CheckpointCopy, ShardFile
from tests.helpers.deletion import OPERATOR, checkpoint, make_due

pytestmark = pytest.mark.django_db

OTHER = Actor.command(label="tests: another operator")


def versions(s3, bucket: str) -> set[tuple[str, str]]:
    """Every (key, version id) in the bucket, delete markers included."""
    found = set()
    for page in s3.client.get_paginator("list_object_versions").paginate(Bucket=bucket):
        for v in (*page.get("Versions", ()), *page.get("DeleteMarkers", ())):
            found.add((v["Key"], v["VersionId"]))
    return found


def events_of(job: DeletionJob, *actions: str) -> list[AuditEvent]:
    rows = AuditEvent.objects.filter(target_type="checkpoint", target_id=job.checkpoint_id, after__deletion=job.pk)
    if actions:
        rows = rows.filter(action__in=actions)
    return list(rows.order_by("id"))


def completions(job: DeletionJob) -> list[AuditEvent]:
    return events_of(job, *execution.TERMINAL_ACTIONS.values())


def two_verified_copies(s3, scanned, ckpt: Checkpoint) -> tuple[CheckpointCopy, CheckpointCopy]:
    """The scanned bucket's copy of ``ckpt`` and a second one in another bucket, both verified."""
    _name, bucket = scanned
    theirs = CheckpointCopy.objects.get(checkpoint=ckpt, location=bucket.location)
    other = CheckpointCopy.objects.create(
        checkpoint=ckpt,
        location=s3.register(s3.bucket(), name="second").location,
        path="llm/llama-tiny/step-100",
        format=theirs.format,
        state="complete",
        verification="verified",
    )
    CheckpointCopy.objects.filter(pk=theirs.pk).update(verification="verified")
    return theirs, other


def run_due(django_capture_on_commit_callbacks) -> dict:
    with django_capture_on_commit_callbacks(execute=True):
        return execution.start_due()


def test_a_due_deletion_removes_exactly_its_frozen_versions(s3, scanned, django_capture_on_commit_callbacks):
    name, bucket = scanned
    before = versions(s3, name)
    job = services.schedule_deletion(checkpoint=checkpoint(100), reason="superseded", actor=OPERATOR)
    frozen = set(DeletionItem.objects.filter(job=job).values_list("path", "version_id"))
    assert len(frozen) == 3 and all(v for _, v in frozen)

    assert run_due(django_capture_on_commit_callbacks) == {"started": [], "resent": []}  # still in its grace period
    make_due(job)
    assert run_due(django_capture_on_commit_callbacks)["started"] == [job.pk]

    job.refresh_from_db()
    assert job.state == DeletionState.COMPLETED, job.outcome
    assert (job.items_deleted, job.items_blocked) == (3, 0)
    assert job.outcome == "3 of 3 deleted"
    assert versions(s3, name) == before - frozen  # the older version, the other steps and other keys stay
    assert ("fleet/llm/llama-tiny/step-100/__0_0.distcp", "") not in versions(s3, name)  # no delete markers
    assert set(DeletionItem.objects.filter(job=job).values_list("state", flat=True)) == {ItemState.DELETED}
    gone = ShardFile.objects.filter(location=bucket.location, path__startswith="llm/llama-tiny/step-100/")
    assert gone.count() == 3 and not gone.filter(gone_at__isnull=True).exists()
    copy = CheckpointCopy.objects.get(location=bucket.location, path="llm/llama-tiny/step-100")
    assert copy.gone_at is not None  # judged again, as an inventory without those files would
    assert CheckpointCopy.objects.get(location=bucket.location, path="llm/llama-tiny/step-200").gone_at is None
    assert [e.action for e in events_of(job) if e.action != "deletion.schedule"] == [
        "deletion.start",
        "deletion.batch",
        "deletion.complete",
        "deletion.proof",  # the store listed again: the versions are really gone (actions.reclaim)
    ]
    done = completions(job)[0]
    assert (done.actor_kind, done.source, done.after["deleted"]) == ("worker", "task", 3)


def test_running_a_finished_job_again_deletes_nothing_and_writes_no_event(
    s3, scanned, django_capture_on_commit_callbacks, s3_calls
):
    job = services.schedule_deletion(checkpoint=checkpoint(100), reason="superseded", actor=OPERATOR)
    make_due(job)
    run_due(django_capture_on_commit_callbacks)
    calls = s3_calls["DeleteObjects"]
    n = AuditEvent.objects.count()
    assert execution.execute(job.pk) == "stopped"  # a second delivery of the task
    assert execution.run_batch(job.pk).status == "stopped"
    assert execution.start(job.pk) is False  # and beat does not start it twice
    assert s3_calls["DeleteObjects"] == calls == 1
    assert AuditEvent.objects.count() == n
    assert len(completions(job)) == 1


def test_a_job_needing_approval_does_not_start_unapproved(s3, scanned, django_capture_on_commit_callbacks):
    ckpt = checkpoint(100)
    ckpt.importance = "milestone"
    ckpt.save(update_fields=["importance"])
    job = services.schedule_deletion(checkpoint=ckpt, reason="superseded", actor=OPERATOR)
    assert job.state == DeletionState.AWAITING_APPROVAL
    make_due(job)
    # Even a job pushed to "scheduled" by hand is not started without its approval.
    DeletionJob.objects.filter(pk=job.pk).update(state=DeletionState.SCHEDULED)
    assert run_due(django_capture_on_commit_callbacks)["started"] == []
    assert DeletionItem.objects.filter(job=job, state=ItemState.PENDING).count() == 3


def test_a_hold_placed_after_scheduling_wins(s3, scanned, django_capture_on_commit_callbacks):
    name, _bucket = scanned
    before = versions(s3, name)
    ckpt = checkpoint(100)
    job = services.schedule_deletion(checkpoint=ckpt, reason="superseded", actor=OPERATOR)
    services.hold(run=ckpt.run, reason="litigation", case_ref="CASE-7", actor=OTHER)  # the whole run
    make_due(job)
    run_due(django_capture_on_commit_callbacks)
    job.refresh_from_db()
    assert job.state == DeletionState.BLOCKED
    assert "CASE-7" in job.outcome and "legal hold" in job.outcome
    assert versions(s3, name) == before
    assert job.items_deleted == 0
    assert [e.action for e in completions(job)] == ["deletion.blocked"]


def test_a_hold_placed_mid_job_stops_the_rest(s3, scanned, monkeypatch, django_capture_on_commit_callbacks):
    name, _bucket = scanned
    ckpt = checkpoint(100)
    job = services.schedule_deletion(checkpoint=ckpt, reason="superseded", actor=OPERATOR)
    assert job.items_total == 3
    make_due(job)
    monkeypatch.setattr(execution, "BATCH", 1)
    monkeypatch.setattr(execution, "execute", lambda job_id: "not now")  # the task does nothing yet
    run_due(django_capture_on_commit_callbacks)
    assert execution.run_batch(job.pk).status == "more"  # one object gone
    services.hold(run=ckpt.run, checkpoint=ckpt, reason="audit", case_ref="CASE-8", actor=OTHER)
    assert execution.run_batch(job.pk).status == "stopped"
    job.refresh_from_db()
    assert job.state == DeletionState.BLOCKED and "CASE-8" in job.outcome
    states = list(DeletionItem.objects.filter(job=job).order_by("pk").values_list("state", flat=True))
    assert states == [ItemState.DELETED, ItemState.PENDING, ItemState.PENDING]
    left = {kv for kv in versions(s3, name) if kv[0].startswith("fleet/llm/llama-tiny/step-100/")}
    assert len(left) == 2 + 1  # and the older version of one of them
    assert execution.run_batch(job.pk).status == "stopped"  # and it stays stopped
    assert len(completions(job)) == 1


def test_a_pin_placed_after_scheduling_stops_the_job(s3, scanned, django_capture_on_commit_callbacks):
    ckpt = checkpoint(100)
    job = services.schedule_deletion(checkpoint=ckpt, reason="superseded", actor=OPERATOR)
    make_due(job)
    DeletionJob.objects.filter(pk=job.pk).update(state=DeletionState.RUNNING, started_at=timezone.now())
    Pin.objects.create(checkpoint=ckpt, reason="baseline", pinned_label="olga", pinned_at=timezone.now())
    assert execution.execute(job.pk) == "stopped"
    job.refresh_from_db()
    assert job.state == DeletionState.BLOCKED and "pinned" in job.outcome


def test_a_copy_goes_only_while_another_verified_copy_stays(s3, scanned, django_capture_on_commit_callbacks):
    ckpt = checkpoint(100)
    theirs, other = two_verified_copies(s3, scanned, ckpt)
    job = services.schedule_deletion(checkpoint=ckpt, copy=theirs, reason="one copy is enough", actor=OPERATOR)
    make_due(job)
    CheckpointCopy.objects.filter(pk=other.pk).update(verification="mismatch")  # the survivor fails verification
    run_due(django_capture_on_commit_callbacks)
    job.refresh_from_db()
    assert job.state == DeletionState.BLOCKED
    assert "[last_verified_copy]" in job.outcome  # the stable code of promises 5 and 6
    assert job.items_deleted == 0


def test_a_copy_that_becomes_disputed_after_scheduling_is_not_deleted_as_the_bad_one(
    s3, scanned, django_capture_on_commit_callbacks
):
    ckpt = checkpoint(100)
    theirs, other = two_verified_copies(s3, scanned, ckpt)
    job = services.schedule_deletion(checkpoint=ckpt, copy=theirs, reason="one copy is enough", actor=OPERATOR)
    make_due(job)
    CheckpointCopy.objects.filter(pk__in=[theirs.pk, other.pk]).update(verification="disputed")
    run_due(django_capture_on_commit_callbacks)
    job.refresh_from_db()
    assert job.state == DeletionState.BLOCKED
    assert "[disputed]" in job.outcome and "not deleted as bad on the other copy's word" in job.outcome
    assert job.items_deleted == 0


def test_a_policy_never_deletes_a_checkpoint_whose_copy_became_disputed_after_scheduling(
    s3, scanned, django_capture_on_commit_callbacks
):
    ckpt = checkpoint(100)
    job = services.schedule_deletion(checkpoint=ckpt, reason="policy keep-last-1", actor=OPERATOR)
    DeletionJob.objects.filter(pk=job.pk).update(origin="policy:1")
    make_due(job)
    DeletionJob.objects.filter(pk=job.pk).update(state=DeletionState.RUNNING, started_at=timezone.now())
    CheckpointCopy.objects.filter(checkpoint=ckpt).update(verification="disputed")
    assert execution.execute(job.pk) == "stopped"
    job.refresh_from_db()
    assert job.state == DeletionState.BLOCKED and "cannot positively identify" in job.outcome
    assert job.items_deleted == 0


def test_object_lock_refusal_is_blocked_never_retried_and_alerted(
    s3, scan_now, django_capture_on_commit_callbacks, s3_calls
):
    name = s3.bucket(object_lock=True)
    s3.upload_tree(name, "nvme-a", prefix="fleet/")
    locked_key = "fleet/llm/llama-tiny/step-100/__1_0.distcp"
    s3.client.put_object_legal_hold(Bucket=name, Key=locked_key, LegalHold={"Status": "ON"})
    bucket = s3.register(name, prefix="fleet/")
    assert scan_now(bucket).status == "applied"
    job = services.schedule_deletion(checkpoint=checkpoint(100), reason="superseded", actor=OPERATOR)
    make_due(job)
    run_due(django_capture_on_commit_callbacks)

    job.refresh_from_db()
    assert job.state == DeletionState.BLOCKED
    assert (job.items_deleted, job.items_blocked) == (2, 1)
    assert "1 refused by the store" in job.outcome
    item = DeletionItem.objects.get(job=job, path=locked_key)
    assert item.state == ItemState.BLOCKED and "Object Lock" in item.detail
    keys = {k for k, _ in versions(s3, name)}
    assert locked_key in keys and "fleet/llm/llama-tiny/step-100/__0_0.distcp" not in keys
    alert = events_of(job, "deletion.refused_by_store")
    assert len(alert) == 1 and alert[0].after["objects"][0]["key"] == locked_key
    assert [e.action for e in completions(job)] == ["deletion.blocked"]
    assert s3_calls["DeleteObjects"] == 1

    DeletionJob.objects.filter(pk=job.pk).update(state=DeletionState.RUNNING)  # even if it ran again
    execution.execute(job.pk)
    assert s3_calls["DeleteObjects"] == 1  # the refused object is never asked for again
    assert DeletionItem.objects.get(pk=item.pk).state == ItemState.BLOCKED


def test_a_store_that_fails_for_good_fails_the_job(s3, scanned, django_capture_on_commit_callbacks):
    name, _bucket = scanned
    job = services.schedule_deletion(checkpoint=checkpoint(100), reason="superseded", actor=OPERATOR)
    make_due(job)
    for key, version in versions(s3, name):
        s3.client.delete_object(Bucket=name, Key=key, VersionId=version)
    s3.client.delete_bucket(Bucket=name)
    run_due(django_capture_on_commit_callbacks)
    job.refresh_from_db()
    assert job.state == DeletionState.FAILED
    assert "NoSuchBucket" in job.outcome
    assert [e.action for e in completions(job)] == ["deletion.fail"]


def test_the_sweep_resends_only_running_jobs_without_progress(s3, scanned, django_capture_on_commit_callbacks):
    job = services.schedule_deletion(checkpoint=checkpoint(100), reason="superseded", actor=OPERATOR)
    started = timezone.now() - execution.LEASE - timedelta(minutes=1)
    DeletionJob.objects.filter(pk=job.pk).update(state=DeletionState.RUNNING, started_at=started)
    assert list(execution.stale_jobs(timezone.now()).values_list("pk", flat=True)) == [job.pk]
    assert not execution.stale_jobs(started + timedelta(minutes=1)).exists()
    result = run_due(django_capture_on_commit_callbacks)  # eager: the resent task runs it to the end
    assert result["resent"] == [job.pk]
    job.refresh_from_db()
    assert job.state == DeletionState.COMPLETED
    assert not execution.stale_jobs(timezone.now() + execution.LEASE * 2).exists()


def test_a_worker_dying_after_the_store_deleted_but_before_the_commit(
    s3, scanned, monkeypatch, django_capture_on_commit_callbacks
):
    """The batch's transaction is lost, the objects are gone: the next delivery asks again and finishes."""
    name, _bucket = scanned
    before = versions(s3, name)
    job = services.schedule_deletion(checkpoint=checkpoint(100), reason="superseded", actor=OPERATOR)
    frozen = set(DeletionItem.objects.filter(job=job).values_list("path", "version_id"))
    make_due(job)
    record = execution._record

    def die(*args, **kwargs):
        raise SystemExit("killed")  # what SIGKILL does to the transaction: it never commits

    monkeypatch.setattr(execution, "_record", die)
    with pytest.raises(SystemExit):
        run_due(django_capture_on_commit_callbacks)
    assert versions(s3, name) == before - frozen  # the store did its part
    assert set(DeletionItem.objects.filter(job=job).values_list("state", flat=True)) == {ItemState.PENDING}
    assert not events_of(job, "deletion.batch")

    monkeypatch.setattr(execution, "_record", record)
    assert execution.execute(job.pk) == "done"  # a redelivery: the same versions asked for again
    job.refresh_from_db()
    assert job.state == DeletionState.COMPLETED and job.items_deleted == 3
    assert versions(s3, name) == before - frozen
    assert len(completions(job)) == 1
