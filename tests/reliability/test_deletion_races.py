"""The reliability scorecard, races (issue 15, item 7): holds against running deletions, and one job delivered
to several workers at once.

PostgreSQL only (real row locks between threads, each with its own connection); the SQLite pass skips them
as it skips the worker-process tests. Against moto's S3 server over HTTP, with small batches so that every
job is several batches long.

- A hold placed at a random moment while the job runs: no object is deleted after the hold commits (every
  batch that deleted something was recorded before the hold's event), the job ends blocked exactly when
  the hold found work left, and the hold's event names the job exactly then.
- The same job executed by three threads at once (a duplicated task delivery): every planned version is
  deleted once, the counters add up, and there is one completion event.

Each prints its figure; RELIABILITY_LONG=1 runs more rounds.
"""

from __future__ import annotations

import os
import random
import threading
import time
from datetime import timedelta

import pytest
from django.db import connection, connections
from django.utils import timezone

from actions import execution, services
from actions.models import DeletionItem, DeletionJob, DeletionState, ItemState
from audit.actor import Actor
from audit.models import AuditEvent
from catalog.models import Checkpoint
from ckptfleet.celery import task
from tests.actions.test_execution import versions
from tests.helpers.deletion import make_due

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

OPERATOR = Actor.command(label="tests: operator")
OTHER = Actor.command(label="tests: another operator")
ROUNDS = 20 if os.environ.get("RELIABILITY_LONG") == "1" else 3


@pytest.fixture(autouse=True)
def _postgres_only():
    if connection.vendor != "postgresql":
        pytest.skip("threads racing on row locks need PostgreSQL; this runs in the PostgreSQL pass")


def in_thread(target, *args) -> threading.Thread:
    def run():
        try:
            target(*args)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def stored(s3, buckets: list[str]) -> set[tuple[str, str, str]]:
    """Every (bucket, key, version) of these buckets: a round's job also takes the copies earlier rounds left."""
    return {(name, *kv) for name in buckets for kv in versions(s3, name)}


def fresh_job(s3, scan_now, monkeypatch):
    """A scanned versioned bucket and a started deletion of step 100 (3 objects each copy), in batches of one."""
    monkeypatch.setattr(execution, "BATCH", 1)
    # Started jobs are executed by the threads of the test alone, not by the task start() sends.
    monkeypatch.setattr(task("actions.tasks.execute_deletion"), "delay", lambda *args, **kwargs: None)
    name = s3.bucket(versioned=True)
    s3.upload_tree(name, "nvme-a", prefix="fleet/")
    bucket = s3.register(name, prefix="fleet/")
    assert scan_now(bucket).status == "applied"
    ckpt = Checkpoint.objects.get(run__name="llama-tiny", step=100)
    # Each round stands alone: the blast radius counts a run's deletions over a window (issue 26), and the earlier
    # rounds' deletions of this same run are what a race test must not count against it, so they are days old.
    DeletionJob.objects.update(requested_at=timezone.now() - timedelta(days=2))
    job = services.schedule_deletion(checkpoint=ckpt, reason="superseded", actor=OPERATOR)
    make_due(job)
    assert execution.start(job.pk)
    return name, ckpt, job


def test_a_hold_at_a_random_moment_stops_every_later_batch(s3, scan_now, monkeypatch):
    rng = random.Random(int(os.environ.get("RACE_SEED", time.time_ns() % 10_000)))
    outcomes = []
    buckets: list[str] = []
    for round_ in range(ROUNDS):
        name, ckpt, job = fresh_job(s3, scan_now, monkeypatch)
        buckets.append(name)
        before = stored(s3, buckets)
        worker = in_thread(execution.execute, job.pk)
        time.sleep(rng.uniform(0, 0.25 * job.items_total))  # before, during or after the last batch
        hold = services.hold(run=ckpt.run, checkpoint=ckpt, reason="race", case_ref=f"RACE-{round_}", actor=OTHER)
        worker.join(timeout=120)
        assert not worker.is_alive()
        job.refresh_from_db()
        placed = AuditEvent.objects.get(action="hold.place", after__hold=hold.pk)
        batches = AuditEvent.objects.filter(action="deletion.batch", after__deletion=job.pk, after__deleted__gt=0)
        assert all(b.pk < placed.pk for b in batches), "a batch deleted objects after the hold committed"
        deleted = DeletionItem.objects.filter(job=job, state=ItemState.DELETED).count()
        assert len(before - stored(s3, buckets)) == deleted  # the store agrees with what the job recorded
        if placed.after["open_deletions_now_blocked"] == [job.pk]:
            assert job.state == DeletionState.BLOCKED, job.outcome
            assert f"{deleted} of {job.items_total} deleted before that" in job.outcome
        else:
            assert job.state == DeletionState.COMPLETED and deleted == job.items_total, job.outcome
        outcomes.append(job.state)
        services.release(hold=hold, reason="race over", actor=OPERATOR)
    print(f"\n[scorecard] hold races: {ROUNDS} rounds, outcomes {sorted(outcomes)}")


def test_one_job_delivered_to_three_workers_at_once(s3, scan_now, monkeypatch):
    buckets: list[str] = []
    for _ in range(ROUNDS):
        name, _ckpt, job = fresh_job(s3, scan_now, monkeypatch)
        buckets.append(name)
        before = stored(s3, buckets)
        planned = {
            (i.location.bucket.bucket_name, i.path, i.version_id)
            for i in DeletionItem.objects.filter(job=job).select_related("location__bucket")
        }
        workers = [in_thread(execution.execute, job.pk) for _ in range(3)]
        for worker in workers:
            worker.join(timeout=120)
        job.refresh_from_db()
        assert job.state == DeletionState.COMPLETED, job.outcome
        assert before - stored(s3, buckets) == planned
        assert job.items_deleted == job.items_total == len(planned)
        counted = sum(
            e.after["deleted"] for e in AuditEvent.objects.filter(action="deletion.batch", after__deletion=job.pk)
        )
        assert counted == job.items_total
        completions = AuditEvent.objects.filter(action="deletion.complete", after__deletion=job.pk)
        assert completions.count() == 1
        assert DeletionJob.objects.filter(pk=job.pk, state=DeletionState.COMPLETED).count() == 1
    print(f"\n[scorecard] duplicate deliveries: {ROUNDS} jobs each run by 3 workers at once, each object deleted once")
