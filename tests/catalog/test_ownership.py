"""Protection follows the data (issue 26 item 1): the ingest never moves a copy off a checkpoint that a lease or an
open deletion protects (holds and pins: tests/reliability/test_protection_follows_data.py, with the real agent),
and an unprotected copy still moves to the checkpoint its files name."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from actions.models import DeletionJob, DeletionState, Lease, LeasePurpose
from audit.models import AuditEvent
from catalog.models import Checkpoint, CheckpointCopy
from catalog.services import OWNER_CONFLICT
from tests.helpers.ingest import dcp

pytestmark = pytest.mark.django_db


def with_sidecar(step: int, run: str) -> list[dict]:
    files = dcp(step)
    listed = [{"path": f["path"].rsplit("/", 1)[-1], "size": f["size"]} for f in files]
    content = {"schema": "ckptfleet/1", "run": run, "step": step, "files": listed}
    files.append(
        {
            "path": f"llm/llama-7b/step-{step}/ckptfleet.json",
            "size": 300,
            "mtime": 1763700000.0 + step,
            "facts": {"kind": "json", "content": content},
        }
    )
    return files


def protect(how: str, checkpoint: Checkpoint) -> None:
    now = timezone.now()
    if how == "leased":
        Lease.objects.create(
            checkpoint=checkpoint,
            purpose=LeasePurpose.RESUMING,
            owner="job-7",
            taken_at=now,
            expires_at=now + timedelta(hours=1),
        )
    elif how == "scheduled":
        DeletionJob.objects.create(
            checkpoint=checkpoint,
            state=DeletionState.SCHEDULED,
            reason="tests",
            requested_label="ops",
            requested_at=now,
            execute_after=now + timedelta(days=7),
        )


@pytest.mark.parametrize("how", ["leased", "scheduled"])
def test_a_copy_of_a_leased_or_scheduled_checkpoint_stays_where_it_is(make_host, push, how):
    kit = make_host("gpu-a01", "/nvme")
    push(kit, with_sidecar(100, "llama-7b"))
    copy = CheckpointCopy.objects.get()
    protect(how, copy.checkpoint)
    push(kit, with_sidecar(100, "decoy"))
    moved = CheckpointCopy.objects.get(pk=copy.pk)
    assert moved.checkpoint_id == copy.checkpoint_id
    said = {"leased": "leased", "scheduled": "deletion"}[how]
    assert any(r.startswith(OWNER_CONFLICT) and said in r for r in moved.reasons), moved.reasons
    assert AuditEvent.objects.filter(action="copy.move_refused", target_id=copy.pk).count() == 1


def test_an_unprotected_copy_follows_what_its_files_say(make_host, push):
    kit = make_host("gpu-a01", "/nvme")
    push(kit, with_sidecar(100, "llama-7b"))
    copy = CheckpointCopy.objects.get()
    push(kit, with_sidecar(100, "renamed"))
    moved = CheckpointCopy.objects.select_related("checkpoint__run").get(pk=copy.pk)
    assert moved.checkpoint.run.name == "renamed" and not any(r.startswith(OWNER_CONFLICT) for r in moved.reasons)
    assert not AuditEvent.objects.filter(action="copy.move_refused").exists()
