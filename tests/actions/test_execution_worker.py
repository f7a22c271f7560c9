"""A 10,000-object deletion through real Celery worker processes that are killed with SIGKILL mid-job.

Real parts: moto's S3 server over HTTP (a versioned bucket), PostgreSQL, Redis, and `celery worker`
processes. Each round kills the worker at a random moment, starts a new one, and lets the beat
sweep resend the job (as it does once a running job has made no progress for its lease). Whatever
the moment, nothing outside the frozen list may be deleted (other objects, other versions of the
same keys, a held checkpoint's objects), the job must complete, and it must have one completion event.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from datetime import timedelta

import kombu.exceptions
import pytest
import redis.exceptions
from django.db import connection
from django.utils import timezone

from access.roles import Role
from actions import execution, services
from actions.models import DeletionItem, DeletionJob, DeletionState, ItemState
from audit.actor import Actor
from audit.models import AuditEvent
from catalog.models import Checkpoint, CheckpointCopy, Run, ShardFile, Team
from ckptfleet.celery import app as celery_app
from fleet.choices import InventoryStatus
from fleet.models import Inventory
from ingest.scan import scan_start
from tests.actions.conftest import as_ui, make_person
from tests.conftest import wait_for

pytestmark = pytest.mark.services

OBJECTS = 10_000
ROUNDS = 3
OPERATOR = Actor.command(label="tests: operator")


def versions(client, bucket: str) -> set[tuple[str, str]]:
    found = set()
    for page in client.get_paginator("list_object_versions").paginate(Bucket=bucket):
        for v in (*page.get("Versions", ()), *page.get("DeleteMarkers", ())):
            found.add((v["Key"], v["VersionId"]))
    return found


def spawn_worker(queue: str, log_path) -> subprocess.Popen:
    """A `celery worker` on this test's queue, database and Redis, like the celery_worker_process fixture's."""
    from django.conf import settings

    db = connection.settings_dict
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}",
        "REDIS_URL": celery_app.conf.broker_url,
        "CKPTFLEET_DEBUG": "1",
        "MEDIA_ROOT": str(settings.MEDIA_ROOT),
        "CELERY_TASK_ALWAYS_EAGER": "0",
        # As the test's own process: deletions here are final at once (tests/conftest.py sets the window to 0).
        "CKPTFLEET_SOFT_DELETE_DAYS": str(settings.SOFT_DELETE_DAYS),
    }
    command = [sys.executable, "-m", "celery", "-A", "ckptfleet", "worker", "-P", "solo", "-Q", queue]
    command += ["-n", f"{queue}@%h", "--without-gossip", "--without-mingle", "-l", "info"]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)

    def answers() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"the worker exited: {open(log_path).read()[-2000:]}")
        try:
            return bool(celery_app.control.ping(destination=[f"{queue}@{socket.gethostname()}"], timeout=0.5))
        except (OSError, redis.exceptions.ConnectionError, kombu.exceptions.OperationalError):
            celery_app._pool = None  # a pooled connection from before a broker restart: ask again on a new one
            return False

    wait_for(answers, timeout=60, what="the new Celery worker to answer a ping")
    return proc


def _backend():
    """The S3 store behind the test endpoint (moto's server runs in this process)."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends

    return s3_backends[DEFAULT_ACCOUNT_ID]["global"]


def put_many(bucket: str, keys: list[str], body: bytes) -> dict[str, tuple[str, str]]:
    """Write objects straight into the store: {key: (version id, ETag)}.

    Setting up 10,000 objects through HTTP costs minutes of boto3 on a busy machine; only the
    deletions under test need to go over the wire, and they do.
    """
    backend = _backend()
    written = {}
    for key in keys:
        obj = backend.put_object(bucket, key, body, disable_notification=True)
        written[key] = (str(obj.version_id), obj.etag.strip('"'))
    return written


def stored(bucket: str) -> set[tuple[str, str]]:
    """Every (key, version id) in the store right now, delete markers included, read without a request."""
    keys = _backend().get_bucket(bucket).keys
    return {(key, str(v.version_id)) for key in list(keys.keys()) for v in keys.getlist(key)}


def test_a_big_deletion_survives_its_worker_being_killed(s3, celery_worker_process, tmp_path):
    big_deletion_under_kills(s3, celery_worker_process, tmp_path, rounds=ROUNDS)


def big_deletion_under_kills(s3, first_worker, tmp_path, *, rounds: int, restart_broker=None) -> str:
    """The test above, for ``rounds`` kills; ``restart_broker()``, if given, is called after every other kill
    (tests/reliability: the broker restarts while a replacement worker starts). Returns its figures."""
    seed = int(os.environ.get("KILL_SEED", time.time_ns() % 100_000))
    rng = random.Random(seed)
    t_setup = time.monotonic()
    client = s3.client
    name = s3.bucket(versioned=True)
    prefix = "fleet/"

    # A held checkpoint, recognised by a real scan: its deletion was scheduled before the hold.
    s3.upload_tree(name, "nvme-a", prefix=prefix)
    bucket = s3.register(name, prefix=prefix)
    inventory = scan_start(location=bucket.location, actor=OPERATOR)  # scanned by the worker
    wait_for(
        lambda: Inventory.objects.get(pk=inventory.pk).status == InventoryStatus.APPLIED,
        timeout=90,
        what="the worker to scan the bucket",
    )
    held = Checkpoint.objects.get(run__name="llama-tiny", step=100)
    held_job = services.schedule_deletion(checkpoint=held, reason="superseded", actor=OPERATOR)
    services.hold(run=held.run, checkpoint=held, reason="litigation", case_ref="CASE-42", actor=OPERATOR)

    # The big one: 10,000 shard objects of one checkpoint; 100 of the keys also have an older version.
    keys = [f"llm/big/step-100/__{i}_0.distcp" for i in range(OBJECTS)]
    put_many(name, [prefix + k for k in keys[:100]], b"an older version")
    answers = put_many(name, [prefix + k for k in keys], b"x" * 64)
    put_many(name, [f"unrelated/{i}.txt" for i in range(100)], b"not ours")
    team = Team.objects.get_or_create(name="llm")[0]
    big = Checkpoint.objects.create(run=Run.objects.create(team=team, name="big"), step=100)
    copy = CheckpointCopy.objects.create(
        checkpoint=big,
        location=bucket.location,
        path="llm/big/step-100",
        format="pytorch_dcp",
        state="complete",
        verification="verified",
        file_count=OBJECTS,
        bytes=OBJECTS * 64,
    )
    now = timezone.now()
    ShardFile.objects.bulk_create(
        [
            ShardFile(
                location=bucket.location,
                path=k,
                size=64,
                mtime=now,
                etag=answers[prefix + k][1],
                version_id=answers[prefix + k][0],
                copy=copy,
                first_seen_at=now,
                changed_at=now,
            )
            for k in keys
        ],
        batch_size=2000,
    )
    job = services.schedule_deletion(checkpoint=big, reason="run abandoned", actor=OPERATOR)
    assert job.state == DeletionState.AWAITING_APPROVAL  # it is the newest restorable checkpoint of its run
    assert job.approvals_required == 2  # and all of its run's bytes: above the blast radius
    job = services.approve(job=job, actor=as_ui(make_person("april", Role.APPROVER)))
    job = services.approve(job=job, actor=as_ui(make_person("otto", Role.APPROVER)))
    assert job.state == DeletionState.SCHEDULED
    assert job.items_total == OBJECTS
    frozen = set(DeletionItem.objects.filter(job=job).values_list("path", "version_id"))
    # Written after scheduling: a newer version of some keys, which is not in the frozen list.
    put_many(name, [prefix + k for k in keys[-100:]], b"written after scheduling")
    before = stored(name)  # a listing over HTTP of 10,000 versions takes moto minutes; at the end it is short
    assert not frozen - before, f"{len(frozen - before)} frozen versions not in the store"

    DeletionJob.objects.filter(pk__in=[job.pk, held_job.pk]).update(execute_after=timezone.now() - timedelta(seconds=1))
    assert sorted(execution.start_due()["started"]) == sorted([job.pk, held_job.pk])

    queue = celery_app.conf.task_default_queue
    worker = first_worker
    kills = []
    restarts = 0
    t0 = time.monotonic()

    def recorded_now() -> int:
        return DeletionItem.objects.filter(job=job, state=ItemState.DELETED).count()

    for round_ in range(rounds):
        # A random moment while the job runs, chosen by its progress rather than by the clock (an idle
        # machine finishes 10,000 keys in seconds): once a random number of items is recorded, and a
        # random fraction of a batch later, so the kill lands before a batch, mid-batch or after it.
        done = recorded_now()
        target = rng.randrange(done, max(done + 1, OBJECTS - 2 * execution.BATCH))
        deadline = time.monotonic() + 120
        while recorded_now() < target and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(rng.uniform(0, 0.25))
        if DeletionJob.objects.get(pk=job.pk).state != DeletionState.RUNNING:
            break
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=30)
        # What the database recorded, and what the store had already deleted (more: killed mid-batch).
        recorded = DeletionItem.objects.filter(job=job, state=ItemState.DELETED).count()
        kills.append((recorded, len(frozen - stored(name))))
        if restart_broker is not None and round_ % 2 == 0:
            restart_broker()
            restarts += 1
        worker = spawn_worker(queue, tmp_path / f"worker-{len(kills)}.log")
        # Beat's sweep, once the lease of the killed delivery has run out.
        execution.start_due(now=timezone.now() + execution.LEASE + timedelta(seconds=1))
    try:

        def ended() -> bool:
            return DeletionJob.objects.get(pk=job.pk).state != DeletionState.RUNNING

        wait_for(ended, timeout=240, interval=0.5, what="the deletion to finish")
    finally:
        if worker is not first_worker:
            worker.terminate()
            worker.wait(timeout=30)
    elapsed = time.monotonic() - t0
    figures = (
        f"seed {seed}: {len(kills)} kills -9 at (recorded, deleted in the store) {kills} of {OBJECTS}; "
        f"{restarts} broker restarts; finished {elapsed:.1f} s after the start; set up in {t0 - t_setup:.1f} s"
    )
    print(figures)

    job.refresh_from_db()
    assert job.state == DeletionState.COMPLETED, job.outcome
    assert (job.items_deleted, job.items_blocked) == (OBJECTS, 0)
    assert not DeletionItem.objects.filter(job=job).exclude(state=ItemState.DELETED).exists()
    assert kills and kills[0][1] < OBJECTS, "the first kill came too late to test anything"
    after = versions(client, name)
    # Nothing outside the frozen list, no delete markers. Compared by size and a sample: a failed equality of
    # sets of 10,000 versions makes pytest's own report of the difference take gigabytes.
    expected, in_store = before - frozen, stored(name)
    for seen, what in ((after, "listed"), (in_store, "in the store")):
        extra, missing = sorted(seen - expected)[:5], sorted(expected - seen)[:5]
        assert not extra and not missing, (
            f"{what}: {len(seen - expected)} extra {extra}, {len(expected - seen)} gone {missing}"
        )
    assert {k for k, _ in after if k.startswith(prefix + "llm/llama-tiny/step-100/")} == {
        prefix + "llm/llama-tiny/step-100/" + f for f in (".metadata", "__0_0.distcp", "__1_0.distcp")
    }
    terminal = list(execution.TERMINAL_ACTIONS.values())
    ends = AuditEvent.objects.filter(action__in=terminal, after__deletion=job.pk)
    assert list(ends.values_list("action", flat=True)) == ["deletion.complete"]
    held_job.refresh_from_db()
    assert held_job.state == DeletionState.BLOCKED and "CASE-42" in held_job.outcome
    assert AuditEvent.objects.filter(action__in=terminal, after__deletion=held_job.pk).count() == 1
    assert not DeletionItem.objects.filter(job=held_job).exclude(state=ItemState.PENDING).exists()
    copy.refresh_from_db()
    assert copy.gone_at is not None
    assert not ShardFile.objects.filter(copy=copy, gone_at__isnull=True).exists()
    assert CheckpointCopy.objects.get(checkpoint=held, location=bucket.location).gone_at is None
    return figures
