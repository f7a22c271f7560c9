"""Ages count from the save's own time, not from when the catalog first saw a checkpoint (issue 27, item 7).

Through the real paths, with the clock set: the real agent walks a host root whose files were written 40 days ago (it
reports their mtime), a bucket on moto's server is scanned 40 days after its objects were put (their LastModified),
and a training job's sidecar says when it saved. Each checkpoint is first seen "today", and "move checkpoints older
than 30 days" (``promotion.selectors.move_candidates``, the move form's and API's filter) matches the old ones. The
migration that filled ``saved_at`` in from stored copies is run from the schema before it, with data.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import time_machine
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.urls import reverse
from django.utils import timezone

from catalog.models import Checkpoint, Run
from ckptfleet.errors import DomainError
from fleet import agent
from fleet.choices import InventoryStatus
from fleet.models import Host, Inventory, StorageLocation
from promotion.selectors import move_candidates
from tests.conftest import give_roles, let_the_test_runner_flush

NOW = datetime(2026, 6, 15, 12, 0, tzinfo=UTC)


def written(step_dir: Path, when: datetime) -> None:
    """The save's files were written at ``when``: their mtimes, as the file system keeps them."""
    for path in step_dir.rglob("*"):
        if path.is_file():
            os.utime(path, (when.timestamp(), when.timestamp()))


def run_agent(server: str, root: Path) -> None:
    assert agent.main(["--server", server, "--host", "gpu-a01", "--root", str(root), "--wait"]) == 0
    inventory = Inventory.objects.order_by("-pk").first()
    assert inventory.status == InventoryStatus.APPLIED, inventory.error


def steps(checkpoints) -> list[int]:
    return sorted(c.step for c in checkpoints)


def test_a_save_40_days_old_first_seen_today_is_older_than_30_days(live_server, host_tree, client, django_user_model):
    _kit, root = host_tree
    run_dir = root / "llm" / "llama-tiny"
    with time_machine.travel(NOW, tick=True):
        written(run_dir / "step-100", NOW - timedelta(days=40))
        written(run_dir / "step-200", NOW - timedelta(days=20))
        run_agent(live_server.url, root)
        run = Run.objects.get(name="llama-tiny")
        old = Checkpoint.objects.get(run=run, step=100)
        assert old.first_seen_at >= NOW - timedelta(minutes=5)  # first seen today
        assert old.saved_at == NOW - timedelta(days=40) and old.saved_source == "mtime"
        # On main this matched nothing: both were first seen today.
        assert steps(move_candidates(run_id=run.pk, older_than_days=30)) == [100]
        assert steps(move_candidates(run_id=run.pk, older_than_days=10)) == [100, 200]
        with pytest.raises(DomainError, match="no checkpoint matches"):
            move_candidates(run_id=run.pk, older_than_days=45)
        # The checkpoint's page says when it was saved, and from what.
        user = django_user_model.objects.create_user(username="ada")
        give_roles(user, "viewer")
        client.force_login(user)
        page = client.get(reverse("catalog:checkpoint-detail", args=[old.pk])).content.decode()
        assert "from the files&#x27; modification time" in page
        # A later copy (here: the same tree pushed again with younger times) never makes the save younger.
        written(run_dir / "step-100", NOW - timedelta(days=1))
        run_agent(live_server.url, root)
        old.refresh_from_db()
        assert old.saved_at == NOW - timedelta(days=40)


def test_the_sidecars_saved_at_wins_over_the_files_times(live_server, host_tree):
    _kit, root = host_tree
    step_dir = root / "llm" / "llama-tiny" / "step-200"
    sidecar = json.loads((step_dir / "ckptfleet.json").read_text())
    with time_machine.travel(NOW, tick=True):
        # The job saved 45 days ago; the files here were copied today (their mtimes are today's).
        sidecar["saved_at"] = (NOW - timedelta(days=45)).isoformat().replace("+00:00", "Z")
        (step_dir / "ckptfleet.json").write_text(json.dumps(sidecar))
        written(step_dir, NOW)
        written(root / "llm" / "llama-tiny" / "step-100", NOW)
        run_agent(live_server.url, root)
        run = Run.objects.get(name="llama-tiny")
        ckpt = Checkpoint.objects.get(run=run, step=200)
        assert (ckpt.saved_at, ckpt.saved_source) == (NOW - timedelta(days=45), "sidecar")
        assert steps(move_candidates(run_id=run.pk, older_than_days=30)) == [200]


def test_a_sidecar_saved_at_without_an_offset_is_ignored_with_its_reason(live_server, host_tree):
    _kit, root = host_tree
    step_dir = root / "llm" / "llama-tiny" / "step-200"
    sidecar = json.loads((step_dir / "ckptfleet.json").read_text())
    sidecar["saved_at"] = "2026-05-01T12:00:00"
    (step_dir / "ckptfleet.json").write_text(json.dumps(sidecar))
    run_agent(live_server.url, root)
    ckpt = Checkpoint.objects.get(run__name="llama-tiny", step=200)
    assert ckpt.saved_source == "mtime"
    copy = ckpt.copies.get(gone_at__isnull=True)
    assert any("saved_at '2026-05-01T12:00:00' ignored" in r for r in copy.reasons)


@pytest.mark.django_db
def test_a_buckets_objects_count_from_their_last_modified(s3, scan_now):
    """moto's server keeps the real clock: the objects are put now, and the scan runs 40 days later here."""
    name = s3.bucket()
    s3.upload_tree(name, "nvme-a", prefix="fleet/")
    later = timezone.now() + timedelta(days=40)
    with time_machine.travel(later, tick=True):
        inventory = scan_now(s3.register(name, prefix="fleet/"))
        assert inventory.status == "applied", inventory.error
        run = Run.objects.get(name="llama-tiny")
        ckpt = Checkpoint.objects.get(run=run, step=100)
        assert ckpt.first_seen_at >= later - timedelta(minutes=5)
        assert ckpt.saved_source == "last_modified" and ckpt.saved_at < later - timedelta(days=39)
        assert steps(move_candidates(run_id=run.pk, older_than_days=30)) == [100, 200]


@pytest.mark.django_db
def test_without_any_saved_time_the_age_counts_from_first_seen():
    from catalog.models import Team

    with time_machine.travel(NOW - timedelta(days=40), tick=False):
        run = Run.objects.create(team=Team.objects.create(name="llm"), name="r")
        Checkpoint.objects.create(run=run, step=1)
    with time_machine.travel(NOW, tick=False):
        [found] = move_candidates(run_id=run.pk, older_than_days=30)
        assert found.saved_at is None and found.saved_or_seen == NOW - timedelta(days=40)


BEFORE = [("catalog", "0024_checkpoint_run_newest_index")]


@pytest.mark.django_db(transaction=True)
def test_the_migration_fills_saved_at_in_from_the_stored_copies():
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    old = executor.loader.project_state(BEFORE).apps
    Team, Run_, Checkpoint_ = (old.get_model("catalog", m) for m in ("Team", "Run", "Checkpoint"))
    Copy = old.get_model("catalog", "CheckpointCopy")
    run = Run_.objects.create(team=Team.objects.create(name="llm"), name="r")
    # Only catalog went back: the fleet tables are today's.
    gpu = Host.objects.create(name="gpu-a01")
    host = StorageLocation.objects.create(name="gpu-a01:/nvme", kind="nvme", tier="nvme", host=gpu, root_path="/nvme")
    bucket = StorageLocation.objects.create(name="s3:ckpts", kind="bucket", tier="object_standard")
    on_host, in_bucket, unknown = (Checkpoint_.objects.create(run=run, step=s) for s in (1, 2, 3))
    saved, uploaded = NOW - timedelta(days=40), NOW - timedelta(days=2)
    for ckpt, location, when in (
        (on_host, host, saved),
        (on_host, bucket, uploaded),
        (in_bucket, bucket, uploaded),
        (unknown, host, None),
    ):
        Copy.objects.create(
            checkpoint=ckpt,
            location_id=location.pk,
            path=f"r/{ckpt.step}",
            format="pytorch_dcp",
            state="complete",
            newest_mtime=when,
        )

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())
    let_the_test_runner_flush()

    got = {c.step: (c.saved_at, c.saved_source) for c in Checkpoint.objects.filter(run__name="r")}
    assert got == {1: (saved, "mtime"), 2: (uploaded, "last_modified"), 3: (None, None)}
