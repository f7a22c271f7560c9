"""A locked retention policy protects what it keeps (issue 27, item 9): deleting a checkpoint its rules keep takes the
quorum that loosening the policy takes (``CKPTFLEET_LOCKED_POLICY_QUORUM`` people, 2 by default), whatever the path.

Against a real scan of a versioned bucket on moto's server (``scanned``: llm/llama-tiny steps 100 and 200); the
policy is created and locked through the retention services, the deletions scheduled, approved and executed through
the actions services and executor. The grace period is moved into the past, as time passing would.
"""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from access.roles import Role
from actions import execution, orphans, services
from actions.models import DeletionItem, DeletionJob, DeletionState, ItemState
from audit.actor import Actor
from audit.choices import EventSource
from audit.models import AuditEvent
from catalog.choices import RunStatus
from catalog.models import CheckpointCopy, Run, Team
from ckptfleet.errors import PermissionRefused
from retention import services as retention
from retention.models import RetentionPolicy
from tests.actions.conftest import make_person
from tests.actions.test_execution import run_due, two_verified_copies, versions
from tests.helpers.deletion import checkpoint, make_due

pytestmark = pytest.mark.django_db


class People:
    def __init__(self) -> None:
        self.olga = make_person("olga", Role.OPERATOR, Role.APPROVER)  # may approve, but not her own
        self.april = make_person("april", Role.APPROVER)
        self.abe = make_person("abe", Role.APPROVER)

    @staticmethod
    def act(user) -> Actor:
        return Actor.person(user, EventSource.UI)


@pytest.fixture
def people(db) -> People:
    return People()


def make_policy(people: People, *, keep_last: int, lock: bool = True) -> RetentionPolicy:
    """The llm team's policy, disabled (it proposes nothing: only its keep rules matter here), locked by abe."""
    policy = retention.policy_create(
        actor=people.act(people.olga),
        name="llm audit",
        team=Team.objects.get(name="llm"),
        keep_last=keep_last,
        keep_milestones=False,
        keep_critical=False,
        keep_stepless=False,
    )
    if lock:
        retention.policy_lock(policy_id=policy.pk, actor=people.act(people.abe), reason="keep 2 for the audit")
    return policy


def test_one_operator_alone_cannot_delete_what_a_locked_policy_keeps(
    s3, scanned, people, django_capture_on_commit_callbacks
):
    name, _bucket = scanned
    before = versions(s3, name)
    policy = make_policy(people, keep_last=2)
    job = services.schedule_deletion(checkpoint=checkpoint(100), reason="superseded", actor=people.act(people.olga))
    # On main this was "scheduled", needing nobody: the policy said "kept", the deletion said otherwise.
    assert job.state == DeletionState.AWAITING_APPROVAL
    assert job.approvals_required == 1
    [why] = [r for r in job.approval_reasons if "locked" in r]
    assert f"policy 'llm audit' (#{policy.pk})" in why and "among the last 2" in why and "takes 2 people" in why
    scheduled = AuditEvent.objects.get(action="deletion.schedule")
    assert scheduled.after["kept_by"][0]["policy"] == policy.pk
    make_due(job)
    assert run_due(django_capture_on_commit_callbacks)["started"] == []  # without the approval it never runs
    assert versions(s3, name) == before


def test_the_person_who_asked_cannot_approve_it_and_the_refusal_changes_nothing(s3, scanned, people):
    make_policy(people, keep_last=2)
    job = services.schedule_deletion(checkpoint=checkpoint(100), reason="superseded", actor=people.act(people.olga))
    events = AuditEvent.objects.count()
    with pytest.raises(PermissionRefused, match="another person must approve it"):
        services.approve(job=job, actor=people.act(people.olga))
    job.refresh_from_db()
    assert job.state == DeletionState.AWAITING_APPROVAL and job.approved_at is None
    # Nothing is written but the refusal's own record, where the product audits refusals today (``access.refusals``).
    assert AuditEvent.objects.exclude(action="access.refused").count() == events


def test_a_second_person_approves_and_the_deletion_goes(s3, scanned, people, django_capture_on_commit_callbacks):
    name, _bucket = scanned
    make_policy(people, keep_last=2)
    job = services.schedule_deletion(checkpoint=checkpoint(100), reason="superseded", actor=people.act(people.olga))
    frozen = set(DeletionItem.objects.filter(job=job).values_list("path", "version_id"))
    services.approve(job=job, actor=people.act(people.april))
    job.refresh_from_db()
    assert job.state == DeletionState.SCHEDULED and job.approved_label == "april"
    make_due(job)
    assert run_due(django_capture_on_commit_callbacks)["started"] == [job.pk]
    job.refresh_from_db()
    assert job.state == DeletionState.COMPLETED, job.outcome
    assert not frozen & versions(s3, name)


def test_what_the_locked_policy_does_not_keep_needs_nobody_else(s3, scanned, people):
    make_policy(people, keep_last=1)  # keeps step 200 only
    preview = services.preview(checkpoint=checkpoint(100), actor=people.act(people.olga))
    assert preview.kept_by == [] and preview.approvals_required == 0
    job = services.schedule_deletion(checkpoint=checkpoint(100), reason="superseded", actor=people.act(people.olga))
    assert job.state == DeletionState.SCHEDULED and not job.needs_approval


def test_an_unlocked_policy_keeps_by_its_rules_but_adds_no_quorum(s3, scanned, people):
    make_policy(people, keep_last=2, lock=False)
    job = services.schedule_deletion(checkpoint=checkpoint(100), reason="superseded", actor=people.act(people.olga))
    assert job.state == DeletionState.SCHEDULED


def test_the_preview_page_and_api_say_which_policy_keeps_it_and_that_approval_is_needed(s3, scanned, people):
    policy = make_policy(people, keep_last=2)
    ckpt = checkpoint(100)
    client = Client()
    client.force_login(people.olga)
    body = client.get(f"/api/v1/actions/deletions/preview/?checkpoint={ckpt.pk}").json()
    assert body["kept_by"] == [
        {
            "policy": policy.pk,
            "name": f"policy 'llm audit' (#{policy.pk})",
            "url": reverse("retention:policy", args=[policy.pk]),
            "why": "among the last 2",
        }
    ]
    assert body["kept_by_approvals"] == 1 and body["approvals_required"] == 1 and body["needs_approval"]
    page = client.get(reverse("actions:schedule", args=[ckpt.pk])).content.decode()
    assert "Kept by a locked retention policy" in page
    assert f'href="{reverse("retention:policy", args=[policy.pk])}"' in page
    assert "takes 2 people" in page and "does not run without it" in page
    assert DeletionJob.objects.count() == 0  # a preview writes nothing


def test_a_quorum_of_three_takes_two_approvers_other_than_the_one_who_asked(s3, scanned, people, settings):
    settings.LOCKED_POLICY_QUORUM = 3
    make_policy(people, keep_last=2)
    job = services.schedule_deletion(checkpoint=checkpoint(100), reason="superseded", actor=people.act(people.olga))
    assert job.approvals_required == 2
    services.approve(job=job, actor=people.act(people.april))
    job.refresh_from_db()
    assert job.state == DeletionState.AWAITING_APPROVAL
    with pytest.raises(PermissionRefused, match="needs a second, different approver"):
        services.approve(job=job, actor=people.act(people.april))
    services.approve(job=job, actor=people.act(people.abe))
    job.refresh_from_db()
    assert job.state == DeletionState.SCHEDULED and job.approvals_given == 2


def test_a_policy_locked_after_scheduling_wins_over_the_deletion(
    s3, scanned, people, django_capture_on_commit_callbacks
):
    name, _bucket = scanned
    before = versions(s3, name)
    policy = make_policy(people, keep_last=2, lock=False)
    job = services.schedule_deletion(checkpoint=checkpoint(100), reason="superseded", actor=people.act(people.olga))
    assert job.state == DeletionState.SCHEDULED
    retention.policy_lock(policy_id=policy.pk, actor=people.act(people.abe), reason="audit starts")
    make_due(job)
    run_due(django_capture_on_commit_callbacks)
    job.refresh_from_db()
    assert job.state == DeletionState.BLOCKED
    assert "llm audit" in job.outcome and "0 of the 1 approvals" in job.outcome
    assert versions(s3, name) == before and job.items_deleted == 0


def test_a_copy_that_leaves_another_verified_copy_leaves_the_checkpoint_kept(s3, scanned, people):
    """A move's source once its new copy verified, a host copy with a verified object copy: the checkpoint stays."""
    make_policy(people, keep_last=2)
    ckpt = checkpoint(100)
    theirs, _other = two_verified_copies(s3, scanned, ckpt)
    assert services.preview(checkpoint=ckpt, actor=people.act(people.olga)).kept_approvals == 1  # the whole: quorum
    preview = services.preview(checkpoint=ckpt, copy=theirs, actor=people.act(people.olga))
    assert [k.why for k in preview.kept_by] == ["among the last 2"] and preview.kept_approvals == 0
    job = services.schedule_deletion(
        checkpoint=ckpt, copy=theirs, reason="one copy is enough", actor=people.act(people.olga)
    )
    assert job.state == DeletionState.SCHEDULED
    assert execution.blocker(execution.lock(job.pk)) == ""  # and it stays allowed when it runs


def test_cleaning_up_a_deleted_runs_copies_that_a_locked_policy_keeps_takes_its_quorum(s3, scanned, people, settings):
    settings.LOCKED_POLICY_QUORUM = 3
    _name, bucket = scanned
    make_policy(people, keep_last=2)
    Run.objects.filter(name="llama-tiny").update(status=RunStatus.DELETED)
    run = Run.objects.get(name="llama-tiny")
    prefix = CheckpointCopy.objects.filter(checkpoint__run=run).values_list("path", flat=True).first().rsplit("/", 1)[0]
    preview = orphans.preview(kind="deleted_run", location=bucket.location, prefix=prefix, run=run)
    assert preview.allowed, preview.refusal
    assert sorted(preview.kept_by) == sorted(str(checkpoint(s)) for s in (100, 200))
    assert preview.approvals_required == 2
    job = orphans.schedule_cleanup(
        kind="deleted_run",
        location=bucket.location,
        prefix=prefix,
        run=run,
        reason="gone",
        actor=people.act(people.olga),
    )
    assert job.state == DeletionState.AWAITING_APPROVAL and job.approvals_required == 2
    assert DeletionItem.objects.filter(job=job, state=ItemState.PENDING).exists()
