"""Tiering policies that act: creation, the second person on enabling, what a run selects and leaves out, and
that a run asks only through the deletion and move services (never acting itself)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from access.roles import Role
from actions.models import DeletionJob, DeletionState
from audit.actor import Actor
from audit.models import AuditEvent
from ckptfleet.errors import DomainError, PermissionRefused
from retention import tiering_policies as policies
from retention.models import TieringPolicy
from retention.tasks import run_due_tiering_policies
from tests.helpers.approvals import approve_waiting, person
from tests.retention.fleet import GIB, Fleet


@pytest.fixture
def fleet(db) -> Fleet:
    return Fleet()


@pytest.fixture
def operator(django_user_model) -> Actor:
    return person(django_user_model, "olga", Role.OPERATOR)


@pytest.fixture
def approver(django_user_model) -> Actor:
    return person(django_user_model, "abe", Role.APPROVER)


def offloaded(fleet: Fleet):
    """Run llm/beta, finished: steps 100-500 on NVMe (8 GiB each, written 3 days ago); 100-400 also in the bucket,
    verified except 300's; 200 is held, 400 transient, 500 the newest (on NVMe only)."""
    fleet.price(fleet.nvme, "nvme", "0.10")
    fleet.price(fleet.bucket, "object_standard", "0.023")
    run = fleet.run("beta")
    steps = {}
    for step in (100, 200, 300, 400, 500):
        c = fleet.checkpoint(run, step, importance="transient" if step == 400 else "routine")
        fleet.copy(c, fleet.nvme, 8 * GIB, age_days=3)
        if step < 500:
            fleet.copy(c, fleet.bucket, 8 * GIB, verified=step != 300, age_days=3)
        steps[step] = c
    fleet.hold(run, steps[200])
    return steps


def free_policy(fleet, operator, **kw) -> TieringPolicy:
    args = dict(name="free nvme", team=fleet.team, action="free_host", source_tier="nvme", min_age_hours=24)
    args.update(kw)
    return policies.policy_create(actor=operator, **args)


def test_enabling_waits_for_a_second_person_and_everything_is_audited(fleet, operator, approver):
    policy = free_policy(fleet, operator, enabled=True, reason="nvme is full")
    policy.refresh_from_db()
    assert not policy.enabled, "a person's new enabled policy starts disabled, with a change request"
    [created] = AuditEvent.objects.filter(action="tiering_policy.create")
    assert created.reason == "nvme is full" and created.after["action"] == "free_host"
    with pytest.raises(DomainError):
        approve_waiting(policy.pk, by=operator, target_type="tiering_policy")  # not an approver, and the requester
    approve_waiting(policy.pk, by=approver, target_type="tiering_policy")
    policy.refresh_from_db()
    assert policy.enabled
    [enabled] = AuditEvent.objects.filter(action="tiering_policy.enable")
    assert enabled.actor_label == "abe"
    # A change to an enabled policy waits too; disabling applies at once.
    edit = policies.policy_update(policy_id=policy.pk, actor=operator, min_age_hours=1)
    assert edit.change_request is not None
    policy.refresh_from_db()
    assert policy.min_age_hours == 24
    edit = policies.policy_update(policy_id=policy.pk, actor=operator, enabled=False)
    assert edit.change_request is None and not TieringPolicy.objects.get(pk=policy.pk).enabled


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"name": " "}, "needs a name"),
        ({"action": "move"}, "needs a target location"),
        ({"action": "shred"}, "action must be one of"),
        ({"every_hours": 0}, "every N hours"),
        ({"min_age_hours": -1}, "minimum age"),
        ({"target_storage_class": "GLACIERX"}, "storage class must be one of"),
    ],
)
def test_bad_input_is_refused_and_changes_nothing(fleet, operator, kwargs, message):
    count = AuditEvent.objects.count()
    with pytest.raises(DomainError, match=message):
        free_policy(fleet, operator, **kwargs)
    assert TieringPolicy.objects.count() == 0 and AuditEvent.objects.count() == count


def test_a_viewer_cannot_create_one(fleet, django_user_model):
    viewer = person(django_user_model, "vic", Role.VIEWER)
    with pytest.raises(PermissionRefused):
        free_policy(fleet, viewer)
    assert TieringPolicy.objects.count() == 0


def test_free_host_selects_only_copies_with_a_verified_object_copy_and_names_what_it_leaves(fleet, operator):
    steps = offloaded(fleet)
    policy = free_policy(fleet, operator)
    selection = policies.select(policy)
    chosen = [(s.checkpoint.step, s.copy.location_id, s.keeps.location_id) for s in selection.selected]
    # Transient first: 400 before 100. 300's object copy is unverified; 500 has none and is the newest.
    assert chosen == [(400, fleet.nvme.pk, fleet.bucket.pk), (100, fleet.nvme.pk, fleet.bucket.pk)]
    skipped = {c.step: why for c, why in selection.skipped}
    assert skipped[200].startswith("held")
    assert "no verified copy in object storage" in skipped[300]
    assert "newest complete" in skipped[500]
    # Younger than the rule's age: nothing is chosen.
    young = free_policy(fleet, operator, name="young", min_age_hours=24 * 30)
    assert policies.select(young).selected == []
    assert steps


def test_a_run_schedules_copy_deletions_through_the_deletion_service_as_the_policy(fleet, operator, approver):
    offloaded(fleet)
    policy = free_policy(fleet, operator, enabled=True)
    approve_waiting(policy.pk, by=approver, target_type="tiering_policy")
    summary = policies.policy_run(policy_id=policy.pk, actor=operator, reason="now")
    jobs = list(DeletionJob.objects.filter(pk__in=summary.asked).order_by("pk"))
    assert [j.checkpoint.step for j in jobs] == [400, 100]
    for job in jobs:
        assert job.copy.location_id == fleet.nvme.pk, "only the host copy goes; the bucket copy stays"
        assert job.origin == f"policy:tiering-{policy.pk}"
        assert job.requested_label == f"tiering policy {policy.pk}"
        assert job.state == DeletionState.AWAITING_APPROVAL, "a policy's deletion waits for a second person"
    assert AuditEvent.objects.filter(action="tiering_policy.run", actor_label="olga").count() == 1
    # Twice is safe: what is scheduled is refused by the deletion service and left out.
    again = policies.policy_run(policy_id=policy.pk)
    assert again.asked == [] and DeletionJob.objects.count() == 2
    policy.refresh_from_db()
    assert policy.last_run_at is not None and policy.last_run_summary["asked"] == 0


def test_a_disabled_policy_does_not_run_and_beat_finds_only_due_ones(
    fleet, operator, approver, settings, django_capture_on_commit_callbacks
):
    offloaded(fleet)
    policy = free_policy(fleet, operator)
    with pytest.raises(DomainError, match="disabled"):
        policies.policy_run(policy_id=policy.pk, actor=operator)
    assert policies.policy_run(policy_id=policy.pk).asked == []
    assert policies.due_policy_ids() == []
    approve_waiting(
        policies.policy_update(policy_id=policy.pk, actor=operator, enabled=True).policy.pk,
        by=approver,
        target_type="tiering_policy",
    )
    assert policies.due_policy_ids() == [policy.pk]
    settings.CELERY_TASK_ALWAYS_EAGER = True
    with django_capture_on_commit_callbacks(execute=True):
        run_due_tiering_policies()
    assert policies.due_policy_ids() == [], "it ran, and is next due in every_hours"


def test_pages_show_the_preview_and_only_operators_get_the_form(fleet, operator, client, django_user_model):
    offloaded(fleet)
    policy = free_policy(fleet, operator)
    viewer = person(django_user_model, "vic", Role.VIEWER)
    client.force_login(viewer.user)
    page = client.get(reverse("retention:tiering-policy", args=[policy.pk])).content.decode()
    assert "Host copies freed" in page and "held: nothing held is moved or freed" in page
    assert "Editing a tiering policy needs the operator role" in page
    assert client.post(reverse("retention:tiering-policies"), {"name": "x"}).status_code == 302
    assert TieringPolicy.objects.count() == 1
    client.force_login(operator.user)
    listing = client.get(reverse("retention:tiering-policies")).content.decode()
    assert "New tiering policy" in listing and "free nvme" in listing


def test_api_creates_previews_and_refuses_a_viewer(fleet, operator, django_user_model):
    from rest_framework.test import APIClient

    offloaded(fleet)
    api = APIClient()
    api.force_authenticate(operator.user)
    made = api.post(
        "/api/v1/retention/tiering-policies/",
        {"name": "free", "team": fleet.team.pk, "action": "free_host", "source_tier": "nvme", "min_age_hours": 24},
        format="json",
    )
    assert made.status_code == 201, made.content
    preview = api.get(f"/api/v1/retention/tiering-policies/{made.json()['id']}/preview/").json()
    assert len(preview["frees"]) == 2 and preview["monthly_saving"] == "1.60"
    viewer = person(django_user_model, "vic", Role.VIEWER)
    api.force_authenticate(viewer.user)
    assert api.post("/api/v1/retention/tiering-policies/", {"name": "x"}, format="json").status_code == 403
    bad = api.get("/api/v1/retention/tiering-policies/99999/preview/")
    assert bad.status_code == 404


def test_a_move_policy_previews_the_plan_and_asks_for_moves_of_ended_runs_only(
    s3, scan_now, operator, approver, signed_in_as
):
    from datetime import timedelta

    from django.utils import timezone

    from catalog.lifecycle import run_status_set
    from catalog.models import Run
    from promotion.models import PromotionJob

    name, other = s3.bucket(), s3.bucket()
    for each in (name, other):  # two copies whose checksums agree: both verified
        s3.upload_tree(each, "nvme-a/llm", prefix="llm/")
    bucket = s3.register(name)
    scan_now(bucket)
    scan_now(s3.register(other))
    run = Run.objects.get(name="llama-tiny")
    policy = policies.policy_create(
        actor=operator,
        name="ended runs to GLACIER_IR",
        action="move",
        target_location=bucket.location,
        target_storage_class="GLACIER_IR",
        run_ended_days=7,
        except_milestones=True,
    )
    assert policies.select(policy).selected == [], "the run is active: nothing"
    run_status_set(run=run, status="finished", actor=operator, source="operator", reason="done")
    assert policies.select(policy).selected == [], "ended today, not 7 days ago"
    Run.objects.filter(pk=run.pk).update(status_changed_at=timezone.now() - timedelta(days=8))
    preview = policies.preview(policy)
    assert [s.checkpoint.step for s in preview.selection.selected] == [100]
    assert "newest complete" in dict((c.step, why) for c, why in preview.selection.skipped)[200]
    assert preview.plan is not None and [line.checkpoint.step for line in preview.plan.lines] == [100]
    page = signed_in_as("viewer").get(f"/retention/tiering/policies/{policy.pk}/").content.decode()
    assert "GLACIER_IR" in page and "Pays back in" in page
    api = signed_in_as("viewer").get(f"/api/v1/retention/tiering-policies/{policy.pk}/preview/").json()
    assert api["plan"]["checkpoints"][0]["checkpoint"] == preview.plan.lines[0].checkpoint.pk
    policies.policy_update(policy_id=policy.pk, actor=operator, enabled=True)
    approve_waiting(policy.pk, by=approver, target_type="tiering_policy")
    summary = policies.policy_run(policy_id=policy.pk)
    assert summary.skipped.get(preview.plan.lines[0].checkpoint.pk) is None, summary.skipped
    [job] = PromotionJob.objects.filter(pk__in=summary.asked)
    assert job.direction == "demote" and job.origin == f"policy:tiering-{policy.pk}"
    assert job.target_storage_class == "GLACIER_IR" and job.checkpoint.step == 100
    assert policies.policy_run(policy_id=policy.pk).asked == [], "an open move is not asked for twice"
