"""The operator actions as services: each writes exactly one audit event, and bad input changes nothing."""

from __future__ import annotations

from datetime import date, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from actions import services
from actions.models import DeletionItem, DeletionJob, DeletionState, Hold, Pin
from audit.actor import Actor
from audit.choices import ActorKind, EventSource
from audit.models import AuditEvent
from catalog.choices import CopyState, Importance, Verification
from catalog.models import Checkpoint
from ckptfleet.errors import DomainError, PermissionRefused
from fleet.models import Bucket, PricePoint, StorageLocation
from tests.actions.conftest import add_copy, as_ui, events

pytestmark = pytest.mark.django_db

POLICY = Actor(kind=ActorKind.WORKER, label="worker: retention", source=EventSource.TASK)


def snapshot():
    """Everything an action may change, to show that a refused one changed nothing."""
    return (
        AuditEvent.objects.exclude(action="access.refused").count(),
        list(Pin.objects.values_list("pk", "unpinned_at")),
        list(Hold.objects.values_list("pk", "released_at")),
        list(DeletionJob.objects.values_list("pk", "state", "approved_at")),
        DeletionItem.objects.count(),
    )


def refused(call, *, match: str | None = None, kind=DomainError):
    before = snapshot()
    with pytest.raises(kind, match=match):
        call()
    assert snapshot() == before


def last_event() -> AuditEvent:
    return AuditEvent.objects.order_by("-id").first()


# --- pins -------------------------------------------------------------------------------------------


def test_a_pin_writes_one_event_and_a_second_pin_is_refused(fleet, olga):
    ckpt = fleet.checkpoints[200]
    n = events()
    made = services.pin(checkpoint=ckpt, reason="baseline for the paper", actor=as_ui(olga), request_id="r-1")
    assert events() == n + 1
    event = last_event()
    assert (event.action, event.target_type, event.target_id, event.actor_label, event.source) == (
        "checkpoint.pin",
        "checkpoint",
        ckpt.pk,
        "olga",
        "ui",
    )
    assert event.reason == "baseline for the paper" and event.request_id == "r-1"
    assert made.active and made.pinned_by == olga
    refused(lambda: services.pin(checkpoint=ckpt, reason="again", actor=as_ui(olga)), match="already pinned")


@pytest.mark.parametrize("reason", ["", "   ", None])
def test_a_pin_without_a_reason_is_refused(fleet, olga, reason):
    refused(lambda: services.pin(checkpoint=fleet.checkpoints[100], reason=reason, actor=as_ui(olga)), match="reason")


def test_a_viewer_cannot_pin(fleet, vic):
    refused(
        lambda: services.pin(checkpoint=fleet.checkpoints[100], reason="x", actor=as_ui(vic)),
        match="operator role",
        kind=PermissionRefused,
    )


def test_unpin_is_its_own_audited_action(fleet, olga, oscar):
    ckpt = fleet.checkpoints[100]
    services.pin(checkpoint=ckpt, reason="keep", actor=as_ui(olga))
    n = events()
    services.unpin(checkpoint=ckpt, actor=as_ui(oscar), reason="done with it")
    assert events() == n + 1 and last_event().action == "checkpoint.unpin"
    assert not Pin.objects.filter(checkpoint=ckpt, unpinned_at__isnull=True).exists()
    refused(lambda: services.unpin(checkpoint=ckpt, actor=as_ui(oscar)), match="not pinned")


# --- holds ------------------------------------------------------------------------------------------


def test_a_hold_needs_a_reason_and_a_case_reference(fleet, olga):
    run = fleet.run
    refused(lambda: services.hold(run=run, reason="litigation", case_ref=" ", actor=as_ui(olga)), match="case")
    refused(lambda: services.hold(run=run, reason="", case_ref="LEG-1", actor=as_ui(olga)), match="reason")
    n = events()
    made = services.hold(run=run, reason="litigation", case_ref="LEG-1", actor=as_ui(olga))
    assert events() == n + 1
    event = last_event()
    assert (event.action, event.target_type, event.target_id, event.case_ref) == ("hold.place", "run", run.pk, "LEG-1")
    assert made.active and made.checkpoint is None


def test_a_hold_on_a_checkpoint_of_another_run_is_refused(fleet, olga):
    from catalog.models import Run

    other = Run.objects.create(team=fleet.run.team, name="other")
    refused(
        lambda: services.hold(
            run=other, checkpoint=fleet.checkpoints[100], reason="r", case_ref="C", actor=as_ui(olga)
        ),
        match="not a checkpoint of run",
    )


def test_only_a_different_person_releases_a_hold(fleet, olga, oscar, adam):
    made = services.hold(
        run=fleet.run, checkpoint=fleet.checkpoints[300], reason="audit", case_ref="LEG-2", actor=as_ui(adam)
    )
    refused(
        lambda: services.release(hold=made, reason="mine", actor=as_ui(adam)),
        match="another person",
        kind=PermissionRefused,
    )
    refused(lambda: services.release(hold=made, reason="", actor=as_ui(olga)), match="reason")
    n = events()
    services.release(hold=made, reason="case closed", actor=as_ui(oscar))
    assert events() == n + 1
    event = last_event()
    assert (event.action, event.target_id, event.actor_label) == ("hold.release", fleet.checkpoints[300].pk, "oscar")
    made.refresh_from_db()
    assert made.released_label == "oscar" and made.release_reason == "case closed"
    refused(lambda: services.release(hold=made, reason="again", actor=as_ui(olga)), match="already released")


# --- scheduling ------------------------------------------------------------------------------------


def test_scheduling_freezes_the_exact_files_and_waits_the_grace_period(fleet, olga, settings):
    settings.DELETION_GRACE_DAYS = 7
    ckpt = fleet.checkpoints[100]
    n = events()
    job = services.schedule_deletion(checkpoint=ckpt, reason="superseded", actor=as_ui(olga))
    assert events() == n + 1
    event = last_event()
    assert event.action == "deletion.schedule" and event.after["deletion"] == job.pk and event.after["items"] == 6
    assert job.state == DeletionState.SCHEDULED and not job.needs_approval
    assert timedelta(days=7) - timedelta(minutes=1) < job.execute_after - timezone.now() <= timedelta(days=7)
    items = list(job.items.order_by("location__name", "path").values_list("location__name", "path", "size", "etag"))
    assert len(items) == 6 and job.items_total == 6 and job.bytes_total == 6 * 1024
    assert items[0] == ("gpu-a01:/lustre", "vision/vit-huge/checkpoint-100/model-00000.safetensors", 1024, "etag0")
    # Files of other checkpoints are not in the list, and the list is files, never a prefix.
    assert not job.items.exclude(path__startswith="vision/vit-huge/checkpoint-100/").exists()
    assert not job.items.filter(path__endswith="/").exists()


def test_one_copy_goes_only_while_another_verified_copy_stays(fleet, olga):
    ckpt = fleet.checkpoints[100]
    nvme, pfs = fleet.copy(100, fleet.nvme), fleet.copy(100, fleet.pfs)
    job = services.schedule_deletion(checkpoint=ckpt, copy=nvme, reason="free the NVMe", actor=as_ui(olga))
    assert job.items_total == 3 and set(job.items.values_list("location_id", flat=True)) == {fleet.nvme.pk}
    # The lustre copy is now the last verified copy that stays: deleting it too is refused (promise 5) ...
    refused(
        lambda: services.schedule_deletion(checkpoint=ckpt, copy=pfs, reason="x", actor=as_ui(olga)),
        match="last verified copy",
    )
    # ... and so is a copy whose surviving sibling was never verified (promise 6).
    other = fleet.checkpoints[200]
    type(fleet.copy(200, fleet.pfs)).objects.filter(pk=fleet.copy(200, fleet.pfs).pk).update(
        verification=Verification.UNVERIFIED
    )
    refused(
        lambda: services.schedule_deletion(
            checkpoint=other, copy=fleet.copy(200, fleet.nvme), reason="x", actor=as_ui(olga)
        ),
        match="verified",
    )


def test_the_whole_checkpoint_may_take_its_last_verified_copy(fleet, olga):
    ckpt = fleet.checkpoints[200]
    fleet.copy(200, fleet.pfs).delete()
    job = services.schedule_deletion(checkpoint=ckpt, reason="bad run segment", actor=as_ui(olga))
    assert job.copy is None and job.items_total == 3


def test_a_partial_copy_goes_without_a_verified_sibling(fleet, olga):
    ckpt = fleet.checkpoints[100]
    broken = add_copy(ckpt, StorageLocation.objects.create(name="scratch", kind="bucket", tier="object_standard"))
    type(broken).objects.filter(pk=broken.pk).update(state=CopyState.PARTIAL)
    type(broken).objects.filter(pk__in=[fleet.copy(100, fleet.nvme).pk, fleet.copy(100, fleet.pfs).pk]).update(
        verification=Verification.UNVERIFIED
    )
    broken.refresh_from_db()
    job = services.schedule_deletion(checkpoint=ckpt, copy=broken, reason="left-over", actor=as_ui(olga))
    assert job.items_total == 3


def test_held_pinned_and_already_scheduled_checkpoints_are_refused(fleet, olga, oscar):
    run = fleet.run
    services.pin(checkpoint=fleet.checkpoints[100], reason="keep", actor=as_ui(olga))
    refused(
        lambda: services.schedule_deletion(checkpoint=fleet.checkpoints[100], reason="x", actor=as_ui(oscar)),
        match="pinned",
    )
    services.schedule_deletion(checkpoint=fleet.checkpoints[200], reason="x", actor=as_ui(olga))
    refused(
        lambda: services.schedule_deletion(checkpoint=fleet.checkpoints[200], reason="y", actor=as_ui(oscar)),
        match="already scheduled",
    )
    refused(
        lambda: services.schedule_deletion(
            checkpoint=fleet.checkpoints[200], copy=fleet.copy(200, fleet.nvme), reason="y", actor=as_ui(oscar)
        ),
        match="already scheduled",
    )
    # A hold on the whole run covers every checkpoint, the ones that appear later included.
    services.hold(run=run, reason="litigation", case_ref="LEG-3", actor=as_ui(olga))
    later = Checkpoint.objects.create(run=run, step=400)
    add_copy(later, fleet.nvme)
    for ckpt in (fleet.checkpoints[300], later):
        refused(
            lambda ckpt=ckpt: services.schedule_deletion(checkpoint=ckpt, reason="x", actor=as_ui(oscar)),
            match="legal hold",
        )


def test_an_admin_gets_no_bypass_of_a_hold(fleet, olga, adam):
    services.hold(run=fleet.run, checkpoint=fleet.checkpoints[100], reason="audit", case_ref="LEG-4", actor=as_ui(olga))
    refused(
        lambda: services.schedule_deletion(checkpoint=fleet.checkpoints[100], reason="I am admin", actor=as_ui(adam)),
        match="legal hold",
    )
    refused(
        lambda: services.schedule_deletion(
            checkpoint=fleet.checkpoints[100], copy=fleet.copy(100, fleet.nvme), reason="x", actor=as_ui(adam)
        ),
        match="legal hold",
    )


def test_a_policy_never_deletes_the_newest_restorable_checkpoint(fleet):
    newest = fleet.checkpoints[300]
    refused(
        lambda: services.schedule_deletion(checkpoint=newest, reason="keep last 0", actor=POLICY, origin="policy:7"),
        match="newest restorable",
    )
    job = services.schedule_deletion(
        checkpoint=fleet.checkpoints[100], reason="keep last 2", actor=POLICY, origin="policy:7"
    )
    assert job.state == DeletionState.AWAITING_APPROVAL and job.needs_approval
    assert any("policy" in r for r in job.approval_reasons)


def test_a_bad_origin_is_refused(fleet, olga):
    refused(
        lambda: services.schedule_deletion(
            checkpoint=fleet.checkpoints[100], reason="x", actor=as_ui(olga), origin="policy:*"
        ),
        match="origin",
    )


def test_milestones_large_deletions_and_the_newest_need_approval(fleet, olga, settings):
    Checkpoint.objects.filter(pk=fleet.checkpoints[100].pk).update(importance=Importance.MILESTONE)
    job = services.schedule_deletion(checkpoint=fleet.checkpoints[100], reason="x", actor=as_ui(olga))
    assert job.state == DeletionState.AWAITING_APPROVAL and "milestone" in job.approval_reasons[0]
    settings.DELETION_APPROVAL_BYTES = 1000
    job = services.schedule_deletion(checkpoint=fleet.checkpoints[200], reason="x", actor=as_ui(olga))
    assert job.needs_approval and "threshold" in job.approval_reasons[0]
    settings.DELETION_APPROVAL_BYTES = 10**12
    job = services.schedule_deletion(checkpoint=fleet.checkpoints[300], reason="x", actor=as_ui(olga))
    assert job.needs_approval and "newest restorable" in job.approval_reasons[0]


def test_a_zero_grace_period_is_refused_outside_development(fleet, olga, settings):
    settings.DELETION_GRACE_DAYS = 0
    settings.DEBUG = False
    refused(
        lambda: services.schedule_deletion(checkpoint=fleet.checkpoints[100], reason="x", actor=as_ui(olga)),
        match="grace period",
    )
    settings.DEBUG = True
    job = services.schedule_deletion(checkpoint=fleet.checkpoints[100], reason="x", actor=as_ui(olga))
    assert job.execute_after <= timezone.now()


def test_bucket_items_carry_the_full_key_and_version(fleet, olga):
    loc = StorageLocation.objects.create(
        name="s3:ckpts", kind="bucket", tier="object_standard", root_path="s3://ckpts/team-a/"
    )
    Bucket.objects.create(location=loc, bucket_name="ckpts", prefix="team-a/")
    copy = add_copy(fleet.checkpoints[100], loc)
    copy.files.update(version_id="v1")
    job = services.schedule_deletion(checkpoint=fleet.checkpoints[100], copy=copy, reason="x", actor=as_ui(olga))
    keys = set(job.items.values_list("path", "version_id"))
    assert ("team-a/vision/vit-huge/checkpoint-100/model-00000.safetensors", "v1") in keys and len(keys) == 3


# --- approving and cancelling ----------------------------------------------------------------------


def test_approval_is_by_another_person_with_the_approver_role(fleet, olga, oscar, april, adam):
    Checkpoint.objects.filter(pk=fleet.checkpoints[100].pk).update(importance=Importance.CRITICAL)
    job = services.schedule_deletion(checkpoint=fleet.checkpoints[100], reason="x", actor=as_ui(adam))
    refused(lambda: services.approve(job=job, actor=as_ui(adam)), match="another person", kind=PermissionRefused)
    refused(lambda: services.approve(job=job, actor=as_ui(oscar)), match="approver role", kind=PermissionRefused)
    refused(lambda: services.approve(job=job, actor=POLICY), match="person", kind=PermissionRefused)
    n = events()
    services.approve(job=job, actor=as_ui(april))
    assert events() == n + 1 and last_event().action == "deletion.approve"
    job.refresh_from_db()
    assert job.state == DeletionState.SCHEDULED and job.approved_label == "april"
    refused(lambda: services.approve(job=job, actor=as_ui(april)), match="not awaiting approval")


def test_a_hold_placed_after_scheduling_blocks_approval(fleet, olga, april):
    Checkpoint.objects.filter(pk=fleet.checkpoints[100].pk).update(importance=Importance.CRITICAL)
    job = services.schedule_deletion(checkpoint=fleet.checkpoints[100], reason="x", actor=as_ui(olga))
    services.hold(run=fleet.run, reason="new case", case_ref="LEG-5", actor=as_ui(olga))
    refused(lambda: services.approve(job=job, actor=as_ui(april)), match="legal hold")


def test_cancel_until_it_runs(fleet, olga, april, vic):
    job = services.schedule_deletion(checkpoint=fleet.checkpoints[100], reason="x", actor=as_ui(olga))
    refused(lambda: services.cancel(job=job, reason="", actor=as_ui(olga)), match="reason")
    refused(lambda: services.cancel(job=job, reason="no", actor=as_ui(vic)), kind=PermissionRefused)
    # An approver turns down what awaits approval; a scheduled deletion (no approval needed) is the operators'.
    refused(lambda: services.cancel(job=job, reason="no", actor=as_ui(april)), kind=PermissionRefused)
    n = events()
    services.cancel(job=job, reason="wrong step", actor=as_ui(olga))
    assert events() == n + 1 and last_event().action == "deletion.cancel"
    job.refresh_from_db()
    assert job.state == DeletionState.CANCELLED and "wrong step" in job.outcome
    refused(lambda: services.cancel(job=job, reason="again", actor=as_ui(olga)), match="not started|cancelled")
    # Once it runs it can no longer be cancelled.
    other = services.schedule_deletion(checkpoint=fleet.checkpoints[200], reason="x", actor=as_ui(olga))
    DeletionJob.objects.filter(pk=other.pk).update(state=DeletionState.RUNNING)
    refused(lambda: services.cancel(job=other, reason="stop", actor=as_ui(olga)), match="not started")


# --- the preview -----------------------------------------------------------------------------------


def test_the_preview_shows_bytes_money_and_the_newest_restorable_that_remains(fleet):
    for tier in ("nvme", "pfs"):
        PricePoint.objects.create(
            tier=tier,
            price_per_gib_month=Decimal("0.5"),
            entered_price=Decimal("0.5"),
            effective_from=date(2020, 1, 1),
        )
    nvme = fleet.copy(300, fleet.nvme)
    type(nvme).objects.filter(pk=nvme.pk).update(bytes=2 * 1024**3)
    n = events()
    p = services.preview(checkpoint=fleet.checkpoints[300])
    assert events() == n
    assert p.allowed and p.files == 6 and p.bytes == 6 * 1024
    assert p.currency == "USD" and p.monthly_cost is not None
    assert p.newest_before == fleet.checkpoints[300] and p.newest_after == fleet.checkpoints[200]
    assert "newest restorable" in p.approval_reasons[0]
    assert len(p.sample) == 6 and p.sample[0]["path"].startswith("vision/vit-huge/checkpoint-300/")
    one = services.preview(checkpoint=fleet.checkpoints[300], copy=nvme)
    assert one.allowed and one.newest_after == fleet.checkpoints[300] and one.files == 3


def test_the_preview_names_the_promise_that_refuses(fleet, olga):
    services.pin(checkpoint=fleet.checkpoints[100], reason="keep", actor=as_ui(olga))
    p = services.preview(checkpoint=fleet.checkpoints[100])
    assert not p.allowed and p.promise == 2 and "pinned" in p.refusal
    p = services.preview(checkpoint=fleet.checkpoints[300], origin="policy:1")
    assert not p.allowed and p.promise == 5


def test_refusals_of_roles_and_of_own_releases_are_audited(fleet, olga, vic):
    from access.refusals import refusals_collected

    made = services.hold(run=fleet.run, reason="audit", case_ref="LEG-9", actor=as_ui(olga))
    # As a request does: refusals are written once the action's transaction has rolled back.
    with refusals_collected(source="ui"):
        with pytest.raises(PermissionRefused):
            services.release(hold=made, reason="mine", actor=as_ui(olga))
        with pytest.raises(PermissionRefused):
            services.pin(checkpoint=fleet.checkpoints[100], reason="x", actor=as_ui(vic))
    refusals = list(AuditEvent.objects.filter(action="access.refused").order_by("id"))
    assert [e.actor_label for e in refusals] == ["olga", "vic"]
    assert "another person" in refusals[0].reason or "another person" in str(refusals[0].after)
