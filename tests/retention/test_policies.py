"""Retention policies: audited edits, dry runs, and proposals that go through the deletion service."""

from __future__ import annotations

import pytest

from access.roles import Role
from actions.models import DeletionJob, DeletionState
from audit.actor import Actor
from audit.choices import ActorKind, EventSource
from audit.models import AuditEvent
from ckptfleet.celery import app as celery_app
from ckptfleet.errors import DomainError, PermissionRefused
from retention import services
from retention.models import RetentionPolicy
from retention.tasks import propose_retention_deletions
from tests.conftest import give_roles
from tests.helpers.approvals import approve_waiting, person
from tests.retention.fleet import Fleet, alpha


@pytest.fixture
def fleet(db) -> Fleet:
    return Fleet()


@pytest.fixture
def operator(django_user_model) -> Actor:
    user = django_user_model.objects.create_user(username="olga")
    give_roles(user, Role.OPERATOR)
    return Actor(kind=ActorKind.USER, label="olga", source=EventSource.UI, user=user)


@pytest.fixture
def approver(django_user_model) -> Actor:
    return person(django_user_model, "abe", Role.APPROVER)


def events(action: str):
    return list(AuditEvent.objects.filter(action=action))


def test_creating_and_editing_a_policy_is_audited(fleet, operator, approver):
    policy = services.policy_create(actor=operator, name="llm keep 3", team=fleet.team, keep_last=3, reason="tidy")
    [created] = events("retention_policy.create")
    assert created.target_id == policy.pk and created.after["keep_last"] == 3 and created.before is None
    assert created.actor_label == "olga" and created.reason == "tidy"
    services.policy_update(policy_id=policy.pk, actor=operator, keep_last=4, keep_every=1000)
    [updated] = events("retention_policy.update")
    assert updated.before["keep_last"] == 3 and updated.after == {**updated.before, "keep_last": 4, "keep_every": 1000}
    services.policy_update(policy_id=policy.pk, actor=operator, enabled=True)
    assert events("retention_policy.enable") == [] and len(events("change_request.create")) == 1
    approve_waiting(policy.pk, by=approver)
    [enabled] = events("retention_policy.enable")
    assert enabled.actor_label == "abe" and enabled.after["requested_by"] == "olga"
    count = AuditEvent.objects.count()
    services.policy_update(policy_id=policy.pk, actor=operator, enabled=True)  # no change: no event
    assert AuditEvent.objects.count() == count


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"keep_last": 0}, "keep last must be 1 or more"),
        ({"keep_last": -2}, "whole number"),
        ({"name": "  "}, "needs a name"),
        ({"both": True}, "exactly one"),
        ({"neither": True}, "exactly one"),
    ],
)
def test_bad_input_is_refused_and_changes_nothing(fleet, operator, kwargs, message):
    run = fleet.run("alpha")
    args = {"name": "p", "team": fleet.team}
    if kwargs.pop("both", False):
        args["run"] = run
    if kwargs.pop("neither", False):
        args.pop("team")
    args.update(kwargs)
    count = AuditEvent.objects.count()
    with pytest.raises(DomainError, match=message):
        services.policy_create(actor=operator, **args)
    assert RetentionPolicy.objects.count() == 0 and AuditEvent.objects.count() == count


def test_a_team_has_one_policy(fleet, operator):
    services.policy_create(actor=operator, name="a", team=fleet.team)
    with pytest.raises(DomainError, match="already has a retention policy"):
        services.policy_create(actor=operator, name="b", team=fleet.team)


def test_a_viewer_cannot_create_or_edit_one(fleet, operator, django_user_model):
    viewer = django_user_model.objects.create_user(username="vic")
    give_roles(viewer, Role.VIEWER)
    as_viewer = Actor(kind=ActorKind.USER, label="vic", source=EventSource.UI, user=viewer)
    with pytest.raises(PermissionRefused):
        services.policy_create(actor=as_viewer, name="x", team=fleet.team)
    policy = services.policy_create(actor=operator, name="x", team=fleet.team)
    with pytest.raises(PermissionRefused):
        services.policy_update(policy_id=policy.pk, actor=as_viewer, enabled=True)
    assert RetentionPolicy.objects.get().enabled is False


def test_a_policy_proposes_what_its_rules_drop_and_nothing_a_promise_protects(fleet, operator, approver):
    steps = alpha(fleet)
    run = steps[100].run
    policy = services.policy_create(
        actor=operator, name="alpha", run=run, keep_last=1, keep_critical=False, enabled=True
    )
    assert services.policy_propose(policy_id=policy.pk).scheduled == []  # enabled only once a second person agrees
    approve_waiting(policy.pk, by=approver)
    proposal = services.policy_propose(policy_id=policy.pk)
    assert sorted(proposal.scheduled) == sorted([steps[100].pk, steps[400].pk])
    jobs = DeletionJob.objects.filter(origin=f"policy:{policy.pk}")
    assert {j.checkpoint_id for j in jobs} == {steps[100].pk, steps[400].pk}
    # A policy's deletions wait for a second person's approval, then the grace period.
    assert {j.state for j in jobs} == {DeletionState.AWAITING_APPROVAL}
    assert all(j.needs_approval for j in jobs)
    assert len(events("deletion.schedule")) == 2
    # Idempotent: a second pass finds them scheduled.
    again = services.policy_propose(policy_id=policy.pk)
    assert again.scheduled == [] and DeletionJob.objects.count() == 2
    policy.refresh_from_db()
    assert policy.last_proposed_count == 0 and policy.last_proposed_at is not None


def test_a_policy_with_keep_critical_never_proposes_a_critical_checkpoint(fleet, operator, approver):
    steps = alpha(fleet)
    policy = services.policy_create(actor=operator, name="alpha", run=steps[100].run, keep_last=1, enabled=True)
    approve_waiting(policy.pk, by=approver)
    assert services.policy_propose(policy_id=policy.pk).scheduled == [steps[400].pk]


def test_a_disabled_policy_proposes_nothing_and_a_held_run_nothing(fleet, operator, approver):
    steps = alpha(fleet)
    run = steps[100].run
    policy = services.policy_create(actor=operator, name="alpha", run=run, keep_last=1, keep_critical=False)
    assert services.policy_propose(policy_id=policy.pk).scheduled == []
    services.policy_update(policy_id=policy.pk, actor=operator, enabled=True)
    approve_waiting(policy.pk, by=approver)
    fleet.hold(run)
    proposal = services.policy_propose(policy_id=policy.pk)
    assert proposal.scheduled == [] and DeletionJob.objects.count() == 0


def test_a_runs_own_policy_wins_over_its_teams(fleet, operator, approver):
    steps = alpha(fleet)
    run = steps[100].run
    team_policy = services.policy_create(
        actor=operator, name="team", team=fleet.team, keep_last=1, keep_critical=False, enabled=True
    )
    approve_waiting(team_policy.pk, by=approver)
    services.policy_create(actor=operator, name="own", run=run, keep_last=10)
    assert services.policy_dry_run(team_policy).runs == []
    assert services.policy_propose(policy_id=team_policy.pk).scheduled == []


def test_the_beat_task_queues_each_enabled_policy(fleet, operator, approver, django_capture_on_commit_callbacks):
    steps = alpha(fleet)
    policy = services.policy_create(actor=operator, name="alpha", run=steps[100].run, keep_last=1, enabled=True)
    approve_waiting(policy.pk, by=approver)
    assert "propose-retention-deletions" in celery_app.conf.beat_schedule
    with django_capture_on_commit_callbacks(execute=True):
        assert propose_retention_deletions() == {"policies": [policy.pk]}
    assert list(DeletionJob.objects.values_list("checkpoint_id", flat=True)) == [steps[400].pk]


def test_the_policy_pages(fleet, signed_in_as):
    steps = alpha(fleet)
    run = steps[100].run
    ops = signed_in_as(Role.OPERATOR)
    response = ops.post(
        "/retention/policies/",
        {"name": "alpha", "run": run.pk, "keep_last": 1, "keep_every": 0, "keep_milestones": "on", "reason": "r"},
    )
    policy = RetentionPolicy.objects.get()
    assert response.status_code == 302 and response.url == f"/retention/policies/{policy.pk}/"
    page = ops.get(response.url).content.decode()
    assert "Dry run" in page and "retention_policy.create" in page and "2.08 USD" in page
    edit = ops.post(response.url, {"name": "alpha", "keep_last": 2, "keep_every": 0, "enabled": "on"})
    assert edit.status_code == 302
    policy.refresh_from_db()
    assert policy.keep_last == 1 and not policy.enabled  # enabling waits, whole, for a second person
    page = ops.get(response.url).content.decode()
    assert "Enabled: no → yes" in page and "Keep the last N: 1 → 2" in page and "Approve change" not in page
    approver = signed_in_as(Role.APPROVER)
    assert "Approve change" in approver.get(response.url).content.decode()
    [change] = policy_changes(policy)
    assert approver.post(f"/approvals/changes/{change.pk}/approve/").status_code == 302
    policy.refresh_from_db()
    assert policy.keep_last == 2 and policy.enabled
    viewer = signed_in_as(Role.VIEWER)
    assert "needs the operator role" in viewer.get(response.url).content.decode()
    viewer.post(response.url, {"name": "x", "keep_last": 9, "keep_every": 0})
    policy.refresh_from_db()
    assert policy.keep_last == 2
    assert "alpha" in viewer.get("/retention/policies/").content.decode()


def test_the_policy_api(fleet, signed_in_as):
    steps = alpha(fleet)
    run = steps[100].run
    ops = signed_in_as(Role.OPERATOR)
    created = ops.post(
        "/api/v1/retention/policies/",
        {"name": "alpha", "run": run.pk, "keep_last": 1, "keep_critical": False},
        content_type="application/json",
    )
    assert created.status_code == 201, created.content
    pk = created.json()["id"]
    assert len(events("retention_policy.create")) == 1
    dry = ops.get(f"/api/v1/retention/policies/{pk}/dry-run/").json()
    assert dry["freed"]["monthly"] == "2.08" and dry["enabled"] is False
    patched = ops.patch(f"/api/v1/retention/policies/{pk}/", {"enabled": True}, content_type="application/json")
    assert patched.status_code == 202 and patched.json()["enabled"] is False
    assert patched.json()["change_request"]["lines"][0] == "Enabled: no → yes"
    viewer = signed_in_as(Role.VIEWER)
    refused = viewer.patch(f"/api/v1/retention/policies/{pk}/", {"keep_last": 9}, content_type="application/json")
    assert refused.status_code == 403
    assert viewer.get("/api/v1/retention/policies/").status_code == 200
    dup = ops.post("/api/v1/retention/policies/", {"name": "b", "run": run.pk}, content_type="application/json")
    assert dup.status_code == 400 and dup.json()["error"] == "exists"


def test_a_real_worker_proposes_a_policys_deletions(celery_worker_process, django_user_model):
    """Beat's task through Redis to a separate `celery worker` process on PostgreSQL."""
    from retention.tasks import propose_policy_deletions
    from tests.conftest import wait_for

    fleet = Fleet()
    steps = alpha(fleet)
    user = django_user_model.objects.create_user(username="olga")
    give_roles(user, Role.OPERATOR)
    actor = Actor(kind=ActorKind.USER, label="olga", source=EventSource.UI, user=user)
    policy = services.policy_create(
        actor=actor, name="alpha", run=steps[100].run, keep_last=1, keep_critical=False, enabled=True
    )
    approve_waiting(policy.pk, by=person(django_user_model, "abe", Role.APPROVER))
    propose_policy_deletions.delay(policy.pk)
    wait_for(lambda: DeletionJob.objects.count() == 2, timeout=60, what="the worker to schedule two deletions")
    jobs = DeletionJob.objects.all()
    assert {j.checkpoint_id for j in jobs} == {steps[100].pk, steps[400].pk}
    assert {j.origin for j in jobs} == {f"policy:{policy.pk}"}
    assert {e.actor_label for e in AuditEvent.objects.filter(action="deletion.schedule")} == {
        f"retention policy {policy.pk}"
    }


def test_an_edit_through_the_api_carries_the_callers_request_id(fleet, signed_in_as):
    ops = signed_in_as(Role.OPERATOR)
    created = ops.post(
        "/api/v1/retention/policies/",
        {"name": "llm", "team": fleet.team.pk},
        content_type="application/json",
        HTTP_X_REQUEST_ID="req-123abc",
    )
    assert created.status_code == 201
    [event] = events("retention_policy.create")
    assert event.request_id == "req-123abc" and event.source == "api"


def policy_changes(policy):
    from approvals.models import ChangeRequest

    return list(ChangeRequest.objects.filter(target_type="retention_policy", target_id=policy.pk))


def test_a_policy_of_one_run_is_created_by_the_runs_name_and_a_wrong_name_says_how_to_write_it(fleet, signed_in_as):
    run = alpha(fleet)[100].run
    ops = signed_in_as(Role.OPERATOR)
    form = {"keep_last": 1, "keep_every": 0, "reason": "r"}
    wrong = ops.post("/retention/policies/", {"name": "x", "run": f"{run.team.name}/nope", **form})
    assert wrong.status_code == 200 and "write it as team/run" in wrong.content.decode()
    assert not RetentionPolicy.objects.exists()
    named = ops.post("/retention/policies/", {"name": "alpha", "run": f"{run.team.name}/{run.name}", **form})
    assert named.status_code == 302 and RetentionPolicy.objects.get().run_id == run.pk
    assert 'placeholder="team/run"' in ops.get("/retention/policies/").content.decode()
