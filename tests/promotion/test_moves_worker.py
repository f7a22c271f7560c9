"""A demotion end to end through a real Celery worker process on PostgreSQL and Redis, against moto's server."""

from __future__ import annotations

import hashlib

import pytest

from catalog.models import ShardFile
from promotion import moves
from promotion.choices import JobState
from tests.conftest import wait_for
from tests.promotion.conftest import events

pytestmark = pytest.mark.services


def test_a_class_change_in_place_runs_in_a_real_worker_and_verifies_every_object(kit, celery_worker_process):
    bodies = {"a": b"a" * 4096, "b": b"b" * 1024}
    checkpoint, copy = kit.checkpoint(700, {name: (body, "STANDARD") for name, body in bodies.items()})
    for name, body in bodies.items():  # what an agent with --checksums or a scan of the store would record
        ShardFile.objects.filter(copy=copy, path__endswith=f"/{name}").update(
            checksum=hashlib.sha256(body).hexdigest(), checksum_algo="sha256"
        )

    (job,) = moves.request_move(
        checkpoints=[checkpoint],
        target_location=kit.source.location,
        target_storage_class="GLACIER_IR",
        actor=kit.actor,
        reason="worker test",
    )  # a transactional test: the task is sent to the worker on commit

    def finished() -> bool:
        job.refresh_from_db()
        return job.state in (JobState.COMPLETED, JobState.FAILED)

    wait_for(finished, timeout=120, interval=0.5, what="the move to finish in the worker")
    assert job.state == JobState.COMPLETED, job.error
    assert job.source_outcome == moves.FREED_IN_PLACE and job.verified_at is not None
    assert (job.bytes_done, job.items_done) == (5120, 2)
    for item in job.items.all():
        assert item.detail == "verified: sha256 (store's checksum)"
        assert kit.head(kit.source_name, item.target_key)["StorageClass"] == "GLACIER_IR"
    assert [len(events(a)) for a in ("move.request", "move.verified", "move.complete")] == [1, 1, 1]
