"""One promotion end to end through a real Celery worker process on PostgreSQL and Redis, against moto's server."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from promotion import tasks
from promotion.choices import JobState
from promotion.models import PromotionJob
from promotion.services import promote
from tests.conftest import wait_for
from tests.promotion.conftest import events

pytestmark = pytest.mark.services


def test_a_restore_and_copy_run_in_a_real_worker_with_beat_polling_the_restore(
    kit, celery_worker_process, django_capture_on_commit_callbacks
):
    checkpoint, _ = kit.checkpoint(400, {"a": (b"a" * 4096, "GLACIER"), "b": (b"b" * 1024, "STANDARD_IA")})
    target = kit.bucket()
    kit.restores_take(3)

    job = promote(
        checkpoint=checkpoint,
        target_location=target.location,
        target_storage_class="STANDARD",
        actor=kit.actor,
        reason="worker test",
    )  # a transactional test: the task is sent on commit

    def moved_on() -> bool:
        job.refresh_from_db()
        return job.state != JobState.REQUESTED

    wait_for(moved_on, timeout=60, what="the worker to start the promotion")
    # Beat's job, done here by hand: every call sends the due polls to the worker.
    polls = 0

    def finished() -> bool:
        nonlocal polls
        job.refresh_from_db()
        if job.state == JobState.RESTORING:
            PromotionJob.objects.filter(pk=job.pk).update(next_poll_at=job.requested_at)  # due now
            polls += len(tasks.advance_promotions.apply().get()["poll"])
        return job.state in (JobState.COMPLETED, JobState.FAILED)

    wait_for(finished, timeout=120, interval=0.5, what="the promotion to finish")
    assert job.state == JobState.COMPLETED, job.error
    assert polls >= 1
    assert (job.bytes_done, job.items_done) == (5120, 2)
    assert kit.body(target.bucket_name, "llm/llama/step-400/a") == b"a" * 4096
    assert kit.head(target.bucket_name, "llm/llama/step-400/b").get("StorageClass", "STANDARD") == "STANDARD"
    assert [len(events(a)) for a in ("promotion.request", "promotion.restore", "promotion.complete")] == [1, 1, 1]


def _second_worker(tmp_path, settings):
    """Another `celery worker` on the queue of ``celery_worker_process``, as a restarted worker would be."""
    import os
    import socket
    import subprocess
    import sys

    from django.db import connection

    from ckptfleet.celery import app as celery_app

    db = connection.settings_dict
    queue = celery_app.conf.task_default_queue
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}",
        "REDIS_URL": celery_app.conf.broker_url,
        "CKPTFLEET_DEBUG": "1",
        "MEDIA_ROOT": str(settings.MEDIA_ROOT),
        "CELERY_TASK_ALWAYS_EAGER": "0",
    }
    log = tmp_path / "worker2.log"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "ckptfleet",
            "worker",
            "-P",
            "solo",
            "-Q",
            queue,
            "-n",
            f"{queue}-2@%h",
            "--without-gossip",
            "--without-mingle",
            "-l",
            "info",
        ],
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    wait_for(
        lambda: bool(celery_app.control.ping(destination=[f"{queue}-2@{socket.gethostname()}"], timeout=0.5)),
        timeout=60,
        what="the second worker",
    )
    return proc


def test_a_worker_killed_mid_copy_is_replaced_and_the_job_finishes_once(kit, celery_worker_process, tmp_path, settings):
    files = {f"__{i}_0.distcp": (bytes([i % 251]) * 1024, "STANDARD_IA") for i in range(200)}
    checkpoint, _ = kit.checkpoint(410, files)
    target = kit.bucket()

    job = promote(
        checkpoint=checkpoint,
        target_location=target.location,
        target_storage_class="STANDARD",
        actor=kit.actor,
        reason="kill test",
    )

    def some_copied() -> bool:
        job.refresh_from_db()
        return job.items_done >= 20

    wait_for(some_copied, timeout=90, interval=0.05, what="the first copies")
    celery_worker_process.kill()  # SIGKILL: no chance to record anything more
    celery_worker_process.wait(timeout=30)
    job.refresh_from_db()
    assert job.state == JobState.COPYING and job.items_done < 200, "the job finished before the kill"
    done_at_kill = job.items_done

    second = _second_worker(tmp_path, settings)
    try:
        # Beat finds the job without a heartbeat for longer than the lease and sends it again.
        PromotionJob.objects.filter(pk=job.pk).update(heartbeat_at=timezone.now() - timedelta(hours=1))
        assert tasks.advance_promotions.apply().get()["copy"] == [job.pk]

        def finished() -> bool:
            job.refresh_from_db()
            return job.state in (JobState.COMPLETED, JobState.FAILED)

        wait_for(finished, timeout=180, interval=0.5, what="the resumed promotion to finish")
    finally:
        second.terminate()
        second.wait(timeout=30)
    assert job.state == JobState.COMPLETED, job.error
    assert (job.items_done, job.bytes_done, job.items_blocked) == (200, 200 * 1024, 0)
    assert done_at_kill < 200
    listed = kit.s3.client.list_objects_v2(Bucket=target.bucket_name, MaxKeys=1000).get("Contents", [])
    assert len(listed) == 200
    assert kit.body(target.bucket_name, "llm/llama/step-410/__7_0.distcp") == bytes([7]) * 1024
    assert len(events("promotion.complete")) == 1
