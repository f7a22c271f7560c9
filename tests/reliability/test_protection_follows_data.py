"""The reliability scorecard, issue 26 item 1: holds and pins follow the data they protect.

The attack: anyone who can write a file in a checkpoint directory rewrites its ``ckptfleet.json`` sidecar to name
another run (same step, same files) and lets the real agent (or a bucket scan) report it. On main the copy moved
to a new, unprotected checkpoint, whose deletion was then accepted while the hold stayed "active", covering
nothing. Now the copy stays on its protected checkpoint, its reasons say why (the checkpoint page, the problems
list), one ``copy.move_refused`` event records it, and the claimed checkpoint has nothing to delete. The same
moves typed into a shell (ORM ``update()``) are refused by the database's triggers, and change nothing.
"""

from __future__ import annotations

import json
import shutil

import pytest
from django.db import IntegrityError, InternalError, ProgrammingError, transaction

from actions import services
from actions.models import DeletionJob
from audit.actor import Actor
from audit.models import AuditEvent
from catalog.models import Checkpoint, CheckpointCopy, Run, ShardFile
from ckptfleet.errors import DomainError
from dashboard import problems
from dashboard.management.commands.seed_demo import DEMO_TREES
from fleet import agent
from tests.reliability.conftest import report

pytestmark = pytest.mark.django_db(transaction=True)

OPERATOR = Actor.command(label="tests: operator")
LEGAL = Actor.command(label="tests: legal")
# What the database raises when a trigger refuses (PostgreSQL: insufficient_privilege; SQLite: RAISE(ABORT)).
REFUSED = (IntegrityError, InternalError, ProgrammingError)
OWNER_CONFLICT = "Ownership conflict"  # how the copy's reason begins (catalog.services.OWNER_CONFLICT)


def rename_run(sidecar, run: str) -> None:
    content = json.loads(sidecar.read_text())
    content["run"] = run
    sidecar.write_text(json.dumps(content))


@pytest.fixture
def held_tree(tmp_path, make_host, monkeypatch, live_server):
    """The demo host tree pushed by the real agent, and step 200 of llama-tiny under a hold and a pin."""
    root = tmp_path / "nvme0"
    shutil.copytree(DEMO_TREES / "nvme-a", root)
    kit = make_host("gpu-a01", str(root))
    monkeypatch.setenv("CKPTFLEET_TOKEN", kit.token)
    monkeypatch.delenv("CKPTFLEET_TOKEN_FILE", raising=False)

    def push() -> None:
        argv = ["--server", live_server.url, "--host", "gpu-a01", "--root", str(root), "--wait"]
        assert agent.main(argv) == 0

    push()
    held = Checkpoint.objects.get(run__name="llama-tiny", step=200)
    services.hold(run=held.run, checkpoint=held, reason="litigation", case_ref="CASE-26", actor=LEGAL)
    services.pin(checkpoint=held, reason="the release candidate", actor=OPERATOR)
    return root, held, push


def test_a_rewritten_sidecar_does_not_walk_a_held_copy_out_of_its_hold(held_tree):
    root, held, push = held_tree
    copy = CheckpointCopy.objects.get(checkpoint=held, gone_at__isnull=True)
    files = set(ShardFile.objects.filter(copy=copy).values_list("pk", flat=True))
    rename_run(root / "llm" / "llama-tiny" / "step-200" / "ckptfleet.json", "decoy")
    push()

    copy.refresh_from_db()
    assert copy.checkpoint_id == held.pk, "the held copy moved to another checkpoint"
    assert set(ShardFile.objects.filter(copy=copy, gone_at__isnull=True).values_list("pk", flat=True)) >= files
    conflict = [r for r in copy.reasons if r.startswith(OWNER_CONFLICT)]
    assert conflict and "llm/decoy step 200" in conflict[0] and "hold" in conflict[0], copy.reasons
    event = AuditEvent.objects.get(action="copy.move_refused", target_id=copy.pk)
    assert event.before == {"checkpoint": held.pk} and "hold" in event.after["protected_by"]

    # The problems list shows it, with the reason.
    rows = [p for p in problems.all_problems(problems.Filters(kind=problems.Kind.CONFLICT), None) if p.copy_id]
    assert [p.copy_id for p in rows] == [copy.pk] and conflict[0] in rows[0].reasons

    # The checkpoint the sidecar now names has nothing the deletion could take.
    decoy = Checkpoint.objects.get(run__name="decoy", step=200)
    with pytest.raises(DomainError):
        services.schedule_deletion(checkpoint=decoy, reason="cleanup", actor=OPERATOR)
    assert not DeletionJob.objects.exists()

    # Pushing again records nothing new; fixing the sidecar settles it.
    push()
    assert AuditEvent.objects.filter(action="copy.move_refused").count() == 1
    rename_run(root / "llm" / "llama-tiny" / "step-200" / "ckptfleet.json", "llama-tiny")
    push()
    copy.refresh_from_db()
    assert copy.checkpoint_id == held.pk and not [r for r in copy.reasons if r.startswith(OWNER_CONFLICT)]
    report("sidecar re-point of a held and pinned copy (real agent)", "refused, 1 conflict recorded")


def test_the_database_refuses_the_same_moves_from_a_shell(held_tree):
    _root, held, _push = held_tree
    other = Checkpoint.objects.get(run__name="llama-tiny", step=100)
    copy = CheckpointCopy.objects.get(checkpoint=held, gone_at__isnull=True)
    shard = ShardFile.objects.filter(copy=copy).first()
    spare = CheckpointCopy.objects.get(checkpoint=other, gone_at__isnull=True)
    elsewhere = Run.objects.create(team=held.run.team, name="elsewhere")
    moves = [
        lambda: CheckpointCopy.objects.filter(pk=copy.pk).update(checkpoint=other),
        lambda: ShardFile.objects.filter(pk=shard.pk).update(copy=spare),
        lambda: ShardFile.objects.filter(pk=shard.pk).update(copy=None),
        lambda: Checkpoint.objects.filter(pk=held.pk).update(run=elsewhere),
    ]
    # A whole-run hold: not one checkpoint of the run may be moved out of it.
    services.hold(run=held.run, reason="the whole run", case_ref="CASE-27", actor=LEGAL)
    moves.append(lambda: Checkpoint.objects.filter(run=held.run).update(run=elsewhere))
    refused = 0
    for move in moves:
        with pytest.raises(REFUSED), transaction.atomic():
            move()
        refused += 1
    assert CheckpointCopy.objects.get(pk=copy.pk).checkpoint_id == held.pk
    assert ShardFile.objects.get(pk=shard.pk).copy_id == copy.pk
    assert Checkpoint.objects.filter(run=elsewhere).count() == 0
    # An unprotected checkpoint still moves (the triggers judge protection, not every move).
    assert Checkpoint.objects.filter(pk=other.pk).update(step=101) == 1
    report("ORM re-points of held and pinned data refused by the database", f"{refused} of {len(moves)}")


def test_a_bucket_scan_keeps_a_run_held_copy_in_a_versioned_bucket(s3, scan_now):
    name = s3.bucket(versioned=True)
    s3.upload_tree(name, "nvme-a", prefix="fleet/")
    bucket = s3.register(name, prefix="fleet/")
    assert scan_now(bucket).status == "applied"
    held = Checkpoint.objects.get(run__name="llama-tiny", step=200)
    services.hold(run=held.run, reason="legal matter", case_ref="CASE-28", actor=LEGAL)
    key = "fleet/llm/llama-tiny/step-200/ckptfleet.json"
    content = json.loads(s3.client.get_object(Bucket=name, Key=key)["Body"].read())
    content["run"] = "decoy"
    s3.put(name, key, json.dumps(content).encode())
    assert scan_now(bucket).status == "applied"
    copy = CheckpointCopy.objects.get(path="llm/llama-tiny/step-200")
    assert copy.checkpoint_id == held.pk
    assert any(r.startswith(OWNER_CONFLICT) for r in copy.reasons), copy.reasons
    assert AuditEvent.objects.filter(action="copy.move_refused", target_id=copy.pk).count() == 1
    decoy = Checkpoint.objects.filter(run__name="decoy", step=200).first()
    assert decoy is None or not CheckpointCopy.objects.filter(checkpoint=decoy).exists()
    report("sidecar re-point of a run-held copy (bucket scan, moto)", "refused, copy kept on its checkpoint")
