"""A job's sidecar says its GPUs and the checkpoint it was fine-tuned from, through the real agent; the recovery
point reads the GPUs (source sidecar) and deleting the parent checkpoint then needs a confirmation naming the
fine-tune."""

from __future__ import annotations

import shutil

import pytest

from actions import services as actions
from actions.models import DeletionJob
from audit.actor import Actor
from audit.models import AuditEvent
from catalog.models import Checkpoint, CheckpointCopy, Run
from catalog.recovery_point import recovery_point_of
from ckptfleet.errors import DomainError
from tests.catalog.test_lifecycle_agent import run_agent, write_sidecar
from tests.conftest import give_roles


@pytest.fixture
def fine_tune(host_tree):
    """llm/llama-tiny-sft/step-50: a fine-tune of llama-tiny step 200, written as a job would."""
    kit, root = host_tree
    sft = root / "llm" / "llama-tiny-sft" / "step-50"
    shutil.copytree(root / "llm" / "llama-tiny" / "step-100", sft)
    (sft / "ckptfleet.json").unlink(missing_ok=True)
    return kit, root, sft


def test_the_sidecar_names_the_parent_and_the_gpus(live_server, fine_tune, django_user_model):
    _kit, root, sft = fine_tune
    write_sidecar(sft, gpus=8, parent={"team": "llm", "run": "llama-tiny", "step": 200})
    run_agent(live_server.url, root)
    child = Run.objects.get(name="llama-tiny-sft")
    parent = Checkpoint.objects.get(run__name="llama-tiny", step=200)
    assert (child.parent_checkpoint_id, child.parent_source, child.parent_ref) == (
        parent.pk,
        "sidecar",
        "llm/llama-tiny@200",
    )
    assert child.sidecar_gpus == 8
    point = recovery_point_of(child)
    assert (point.gpus, point.gpus_source) == (8, "sidecar")
    assert point.gpu_hours == pytest.approx(point.lost_hours * 8)
    event = AuditEvent.objects.get(action="run.parent", target_id=child.pk)
    assert (event.actor_kind, event.source, event.after["checkpoint"]) == ("host", "agent", parent.pk)
    assert AuditEvent.objects.filter(action="run.gpus", target_id=child.pk).count() == 1
    run_agent(live_server.url, root)  # the same tree again: nothing new to say
    assert AuditEvent.objects.filter(action__in=("run.parent", "run.gpus")).count() == 2

    # Deleting the checkpoint the fine-tune started from is refused until the person confirms, naming it.
    olga = django_user_model.objects.create_user(username="olga", password="a-long-password-1")
    give_roles(olga, "operator")
    actor = Actor.person(olga, "web")
    assert [r.pk for r in actions.preview(checkpoint=parent).child_runs] == [child.pk]
    with pytest.raises(DomainError) as refused:
        actions.schedule_deletion(checkpoint=parent, reason="superseded", actor=actor)
    assert "llm/llama-tiny-sft" in refused.value.message and refused.value.code == "has_children"
    assert not DeletionJob.objects.exists() and not AuditEvent.objects.filter(action="deletion.schedule").exists()
    job = actions.schedule_deletion(checkpoint=parent, reason="superseded", actor=actor, confirm_children=True)
    assert job.pk and AuditEvent.objects.get(action="deletion.schedule").after["child_runs"] == ["llm/llama-tiny-sft"]


def test_a_bad_gpus_or_parent_in_the_sidecar_is_ignored_with_a_reason(live_server, fine_tune):
    _kit, root, sft = fine_tune
    write_sidecar(sft, gpus=-4, parent="llama-tiny step 200")
    run_agent(live_server.url, root)
    child = Run.objects.get(name="llama-tiny-sft")
    assert child.sidecar_gpus is None and child.parent_checkpoint_id is None and child.parent_ref == ""
    copy = CheckpointCopy.objects.get(checkpoint__run=child, gone_at__isnull=True)
    assert copy.state == "complete"
    assert any("gpus -4 ignored" in r for r in copy.reasons), copy.reasons
    assert any("parent ignored" in r for r in copy.reasons), copy.reasons
    assert not AuditEvent.objects.filter(action__in=("run.parent", "run.gpus")).exists()


def test_a_parent_not_yet_in_the_catalog_is_kept_as_said(live_server, fine_tune):
    _kit, root, sft = fine_tune
    write_sidecar(sft, parent={"team": "research", "run": "base-1b", "step": 9000})
    run_agent(live_server.url, root)
    child = Run.objects.get(name="llama-tiny-sft")
    assert (child.parent_checkpoint_id, child.parent_ref, child.parent_source) == (
        None,
        "research/base-1b@9000",
        "sidecar",
    )
