"""A deletion's heartbeat: set by every batch and agent report, read by the sweep's lease, shown on the pages."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.apps import apps
from django.utils import timezone

from actions import execution, services
from actions.models import DeletionItem, DeletionJob, DeletionState, ItemState
from tests.helpers.deletion import OPERATOR, checkpoint, make_due

pytestmark = pytest.mark.django_db


def running(job: DeletionJob, *, started: timedelta, beat: timedelta | None) -> None:
    now = timezone.now()
    DeletionJob.objects.filter(pk=job.pk).update(
        state=DeletionState.RUNNING, started_at=now - started, heartbeat_at=None if beat is None else now - beat
    )


def test_starting_a_job_and_each_batch_beat(s3, scanned, monkeypatch):
    job = services.schedule_deletion(checkpoint=checkpoint(100), reason="superseded", actor=OPERATOR)
    make_due(job)
    monkeypatch.setattr(execution, "BATCH", 1)  # one object per batch: several beats
    beats = []
    original = execution.run_batch

    def watched(job_id, **kwargs):
        result = original(job_id, **kwargs)
        beats.append(DeletionJob.objects.get(pk=job_id).heartbeat_at)
        return result

    monkeypatch.setattr(execution, "run_batch", watched)
    assert execution.start(job.pk)  # its task is queued after a commit that never comes here: run it below
    job.refresh_from_db()
    assert job.state == DeletionState.RUNNING and job.heartbeat_at == job.started_at
    assert execution.execute(job.pk) == "done"
    sent = beats[: job.items_total]
    assert len(sent) == job.items_total and sent == sorted(sent) and sent[0] > job.started_at


def test_the_lease_reads_the_heartbeat_not_the_start(s3, scanned):
    job = services.schedule_deletion(checkpoint=checkpoint(100), reason="superseded", actor=OPERATOR)
    lease = execution.LEASE
    running(job, started=lease * 3, beat=timedelta(seconds=30))
    assert not execution.stale_jobs(timezone.now()).exists()  # started long ago, but a worker is on it
    running(job, started=lease * 3, beat=lease + timedelta(seconds=1))
    assert list(execution.stale_jobs(timezone.now()).values_list("pk", flat=True)) == [job.pk]
    running(job, started=lease + timedelta(seconds=1), beat=None)  # never beat: its start is the lease
    assert list(execution.stale_jobs(timezone.now()).values_list("pk", flat=True)) == [job.pk]


def test_a_batch_that_only_met_transient_errors_still_beats(s3, scanned, monkeypatch):
    from fleet import s3 as store

    job = services.schedule_deletion(checkpoint=checkpoint(100), reason="superseded", actor=OPERATOR)
    running(job, started=timedelta(hours=1), beat=timedelta(hours=1))

    def slow_down(client, bucket, items):
        return [
            store.DeleteOutcome(key=k, version_id=v, deleted=False, code="SlowDown", message="") for k, v, _ in items
        ]

    monkeypatch.setattr(store, "delete_objects", slow_down)
    result = execution.run_batch(job.pk)
    assert result.retry and not result.deleted
    job.refresh_from_db()
    assert timezone.now() - job.heartbeat_at < timedelta(minutes=1)
    assert set(DeletionItem.objects.filter(job=job).values_list("state", flat=True)) == {ItemState.PENDING}


def test_pages_say_how_long_ago_a_running_job_last_moved(s3, scanned, signed_in):
    job = services.schedule_deletion(checkpoint=checkpoint(100), reason="superseded", actor=OPERATOR)
    running(job, started=timedelta(minutes=5), beat=timedelta(seconds=42))
    DeletionJob.objects.filter(pk=job.pk).update(items_deleted=1)
    page = signed_in.get("/actions/deletions/").content.decode()
    assert "last progress 42 s ago" in page or "last progress 43 s ago" in page
    assert f"1 of </span>{job.items_total}" in page
    jobs = signed_in.get("/jobs/?kind=deletion").content.decode()
    assert "last progress 4" in jobs
    live = signed_in.get("/jobs/progress.json", {"job": f"deletion:{job.pk}"}).json()["jobs"][0]
    assert live["outcome"].startswith("last progress 4")
    api = signed_in.get(f"/api/v1/actions/deletions/{job.pk}/").json()
    assert api["heartbeat_at"] is not None

    running(job, started=timedelta(hours=3), beat=timedelta(minutes=25))
    page = signed_in.get("/actions/deletions/").content.decode()
    assert "last progress 25 min ago (longer than the 10 min lease)" in page


def test_last_progress_in_words():
    job = DeletionJob(state=DeletionState.RUNNING)
    now = timezone.now()
    job.heartbeat_at = now - timedelta(seconds=7)
    assert execution.last_progress(job, now=now) == "last progress 7 s ago"
    job.heartbeat_at = now - timedelta(hours=2, minutes=5)
    assert execution.last_progress(job, now=now) == "last progress 2 h 5 min ago (longer than the 10 min lease)"
    job.state = DeletionState.COMPLETED
    assert execution.last_progress(job, now=now) == ""


def test_the_migration_gives_running_jobs_their_last_progress(s3, scanned):
    from importlib import import_module

    backfill = import_module("actions.migrations.0003_deletionjob_heartbeat").backfill
    job = services.schedule_deletion(checkpoint=checkpoint(100), reason="superseded", actor=OPERATOR)
    started = timezone.now() - timedelta(hours=1)
    DeletionJob.objects.filter(pk=job.pk).update(state=DeletionState.RUNNING, started_at=started, heartbeat_at=None)
    done = timezone.now() - timedelta(minutes=3)
    first = DeletionItem.objects.filter(job=job).order_by("pk").first()
    DeletionItem.objects.filter(pk=first.pk).update(state=ItemState.DELETED, done_at=done)
    backfill(apps, None)
    assert DeletionJob.objects.get(pk=job.pk).heartbeat_at == done
