"""Fail closed (promise 12) and the blast radius of one deletion (issue 15, item 5).

A policy never deletes what the product cannot positively identify: a copy in a layout no format knows,
a location whose last inventory failed, is missing or is stale. Checked when the deletion is scheduled and
again when it executes. One deletion above a blast-radius limit (bytes, objects, share of the run) needs
two approvers, neither of them the person who asked.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from actions import execution, services
from actions.models import DeletionJob, DeletionState
from audit.actor import Actor
from audit.choices import ActorKind, EventSource
from audit.models import AuditEvent
from catalog.models import CheckpointCopy
from ckptfleet.errors import DomainError, PermissionRefused
from fleet.choices import InventoryStatus
from fleet.models import Inventory, StorageLocation
from tests.actions.conftest import as_ui, make_person
from tests.helpers.deletion import make_due

pytestmark = pytest.mark.django_db

POLICY = Actor(kind=ActorKind.WORKER, label="worker: retention", source=EventSource.TASK)


def schedule_by_policy(checkpoint):
    return services.schedule_deletion(checkpoint=checkpoint, reason="keep last 2", actor=POLICY, origin="policy:7")


def fail_inventory(location: StorageLocation) -> None:
    inventory = Inventory.objects.create(
        location=location, status=InventoryStatus.FAILED, finished_at=timezone.now(), error="the walk died"
    )
    StorageLocation.objects.filter(pk=location.pk).update(last_inventory=inventory)


def test_a_location_whose_last_inventory_failed_stops_a_policy_not_a_person(fleet, olga):
    fail_inventory(fleet.pfs)
    with pytest.raises(DomainError, match="last inventory of gpu-a01:/lustre failed") as refused:
        schedule_by_policy(fleet.checkpoints[100])
    assert refused.value.code == "not_identified"
    preview = services.preview(checkpoint=fleet.checkpoints[100], origin="policy:7")
    assert preview.refusal_code == "not_identified" and preview.promise == 12
    # A person sees the preview and may still delete it by hand.
    job = services.schedule_deletion(checkpoint=fleet.checkpoints[100], reason="by hand", actor=as_ui(olga))
    assert job.state in (DeletionState.SCHEDULED, DeletionState.AWAITING_APPROVAL)


def test_stale_or_missing_evidence_stops_a_policy(fleet, settings):
    settings.POLICY_EVIDENCE_HOURS = 24
    StorageLocation.objects.filter(pk=fleet.nvme.pk).update(last_applied_at=timezone.now() - timedelta(hours=30))
    with pytest.raises(DomainError, match=r"inventory of gpu-a01:/mnt/nvme0 is 30 h old"):
        schedule_by_policy(fleet.checkpoints[100])
    StorageLocation.objects.filter(pk=fleet.nvme.pk).update(last_applied_at=None)
    with pytest.raises(DomainError, match="has no applied inventory yet"):
        schedule_by_policy(fleet.checkpoints[100])
    StorageLocation.objects.filter(pk=fleet.nvme.pk).update(last_applied_at=timezone.now())
    assert schedule_by_policy(fleet.checkpoints[100]).state == DeletionState.AWAITING_APPROVAL


def test_an_unknown_layout_stops_a_policy(fleet):
    CheckpointCopy.objects.filter(pk=fleet.copy(100, fleet.pfs).pk).update(format="some_future_format")
    with pytest.raises(DomainError, match="layout no known format recognises"):
        schedule_by_policy(fleet.checkpoints[100])


def test_a_policy_deletion_stops_when_its_evidence_fails_before_it_runs(fleet, april):
    job = schedule_by_policy(fleet.checkpoints[100])
    services.approve(job=job, actor=as_ui(april))
    make_due(job)
    fail_inventory(fleet.nvme)
    assert execution.start(job.pk)
    assert execution.run_batch(job.pk).status == "stopped"
    job.refresh_from_db()
    assert job.state == DeletionState.BLOCKED and "[not_identified]" in job.outcome
    assert "0 of 6 deleted before that, 6 left in place" in job.outcome


# --- the blast radius ------------------------------------------------------------------------------


def test_a_deletion_above_the_runs_share_needs_two_approvers(fleet, olga, april, settings):
    settings.BLAST_MAX_RUN_PERCENT = 30  # a whole checkpoint of three is a third of the run
    ola = make_person("ola", "operator", "approver")  # asks, and may approve others' deletions
    job = services.schedule_deletion(checkpoint=fleet.checkpoints[100], reason="x", actor=as_ui(ola))
    assert job.state == DeletionState.AWAITING_APPROVAL and job.approvals_required == 2
    assert any("blast radius" in r and "33% of the run's 18.0 KiB" in r for r in job.approval_reasons)
    oscar_the_approver = make_person("otto", "approver")

    job = services.approve(job=job, actor=as_ui(april))
    assert job.state == DeletionState.AWAITING_APPROVAL and job.approvals_given == 1
    with pytest.raises(PermissionRefused, match="needs a second, different approver"):
        services.approve(job=job, actor=as_ui(april))
    with pytest.raises(PermissionRefused, match="another person must approve"):
        services.approve(job=job, actor=as_ui(ola))
    make_due(job)
    assert not execution.due_jobs(timezone.now()).filter(pk=job.pk).exists()

    job = services.approve(job=job, actor=as_ui(oscar_the_approver))
    assert job.state == DeletionState.SCHEDULED and job.approvals_given == 2
    make_due(job)
    assert execution.due_jobs(timezone.now()).filter(pk=job.pk).exists()
    approvals = AuditEvent.objects.filter(action="deletion.approve").order_by("id")
    assert [e.after["approvals"] for e in approvals] == ["1 of 2", "2 of 2"]
    assert approvals.last().after["approved_by"] == ["april", "otto"]


def test_one_copy_below_the_limits_needs_no_second_approver(fleet, olga):
    job = services.schedule_deletion(
        checkpoint=fleet.checkpoints[100], copy=fleet.copy(100, fleet.pfs), reason="x", actor=as_ui(olga)
    )
    assert job.approvals_required == 0 and job.state == DeletionState.SCHEDULED


@pytest.mark.parametrize(
    "setting, value, words",
    [("BLAST_MAX_BYTES", 1000, "6.0 KiB is more than the limit of 1000 B"), ("BLAST_MAX_OBJECTS", 5, "6 objects")],
)
def test_bytes_and_objects_limits(fleet, olga, settings, setting, value, words):
    setattr(settings, setting, value)
    preview = services.preview(checkpoint=fleet.checkpoints[100])
    assert preview.approvals_required == 2
    assert any(words in r for r in preview.blast_reasons), preview.blast_reasons


def test_the_database_refuses_a_second_approval_by_the_first_approver(fleet, olga, april, settings):
    settings.BLAST_MAX_RUN_PERCENT = 30
    job = services.schedule_deletion(checkpoint=fleet.checkpoints[100], reason="x", actor=as_ui(olga))
    services.approve(job=job, actor=as_ui(april))
    with pytest.raises(IntegrityError), transaction.atomic():
        DeletionJob.objects.filter(pk=job.pk).update(
            second_approved_label="april", second_approved_at=timezone.now(), state=DeletionState.SCHEDULED
        )


def test_the_dry_run_and_a_policy_keep_what_they_cannot_identify(fleet):
    from retention import services as retention
    from retention.rules import KeepRules, Reason
    from retention.selectors import Scope, simulate

    fail_inventory(fleet.pfs)
    (result,) = simulate(rules=KeepRules(keep_last=1), scope=Scope(run_id=fleet.run.pk)).runs
    decisions = {d.checkpoint.step: d for d in result.plan.decisions}
    assert all(Reason.NOT_IDENTIFIED in decisions[s].reasons and decisions[s].kept for s in (100, 200, 300))
    policy = retention.policy_create(
        actor=Actor.command(label="tests"), name="keep 1", run=fleet.run, keep_last=1, enabled=True
    )
    assert retention.policy_propose(policy_id=policy.pk).scheduled == []
    assert not DeletionJob.objects.exists()
    StorageLocation.objects.filter(pk=fleet.pfs.pk).update(last_inventory=None)  # a fresh inventory since
    assert sorted(retention.policy_propose(policy_id=policy.pk).scheduled) == [
        fleet.checkpoints[100].pk,
        fleet.checkpoints[200].pk,
    ]


def test_the_approvals_inbox_says_how_many_approvals_a_deletion_has(fleet, olga, april, settings, client):
    settings.BLAST_MAX_RUN_PERCENT = 30
    job = services.schedule_deletion(checkpoint=fleet.checkpoints[100], reason="x", actor=as_ui(olga))
    services.approve(job=job, actor=as_ui(april))
    client.force_login(make_person("otto", "approver"))
    page = client.get("/approvals/").content.decode()
    assert "1 of 2 approvals (by april)." in page
