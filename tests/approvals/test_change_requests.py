"""Changes that can delete wait for a second person: asked by one, applied by another approver, both in the audit.

Retention policies are the first owner of change requests (``retention.changes``); these tests go through its
services, pages and API, on SQLite and on PostgreSQL.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from access.refusals import refusals_collected
from access.roles import Role
from actions import services as actions_services
from approvals import services
from approvals.choices import ChangeState
from approvals.models import ChangeRequest
from audit.models import AuditEvent
from ckptfleet.errors import DomainError, PermissionRefused
from retention import services as retention
from retention.models import RetentionPolicy
from tests.helpers.approvals import person
from tests.retention.fleet import Fleet, alpha


@pytest.fixture
def people(db, django_user_model):
    class People:
        olga = person(django_user_model, "olga", Role.OPERATOR)
        oscar = person(django_user_model, "oscar", Role.OPERATOR)
        abe = person(django_user_model, "abe", Role.APPROVER)
        ada = person(django_user_model, "ada", Role.ADMIN)
        vic = person(django_user_model, "vic", Role.VIEWER)

    return People


@pytest.fixture
def fleet(db) -> Fleet:
    return Fleet()


@pytest.fixture
def policy(fleet, people) -> RetentionPolicy:
    return retention.policy_create(actor=people.olga, name="llm", team=fleet.team, keep_last=5)


def waiting(policy) -> ChangeRequest:
    return ChangeRequest.objects.get(target_id=policy.pk, state=ChangeState.AWAITING_APPROVAL)


def test_enabling_waits_and_a_second_approver_applies_it_with_both_people_in_the_audit(policy, people):
    edit = retention.policy_update(policy_id=policy.pk, actor=people.olga, enabled=True, reason="start cleaning")
    assert edit.change_request is not None and edit.changed == ("enabled",)
    policy.refresh_from_db()
    assert not policy.enabled
    [asked] = AuditEvent.objects.filter(action="change_request.create")
    assert asked.actor_label == "olga" and asked.target_id == policy.pk and asked.after["enabled"] is True
    change = waiting(policy)
    assert change.change["before"]["enabled"] is False and change.change["after"]["enabled"] is True
    assert change.change["after"]["keep_last"] == change.change["before"]["keep_last"] == 5
    applied = services.approve_change(change=change, actor=people.abe)
    assert applied.state == ChangeState.APPLIED and applied.decided_label == "abe"
    policy.refresh_from_db()
    assert policy.enabled
    [event] = AuditEvent.objects.filter(action="retention_policy.enable")
    assert event.actor_label == "abe" and event.target_type == "retention_policy" and event.target_id == policy.pk
    assert event.after["requested_by"] == "olga" and event.after["approved_by"] == "abe"
    assert event.after["change_request"] == change.pk
    assert "requested by olga: start cleaning; approved by abe" in event.reason


def test_the_person_who_asked_cannot_approve_it_even_as_an_admin(fleet, people):
    policy = retention.policy_create(actor=people.ada, name="mine", team=fleet.team, enabled=True)
    change = waiting(policy)
    with refusals_collected(source="ui"), pytest.raises(PermissionRefused, match="another person must approve it"):
        services.approve_change(change=change, actor=people.ada)
    refused = AuditEvent.objects.get(action="access.refused")
    assert refused.actor_label == "ada" and refused.target_id == policy.pk
    policy.refresh_from_db()
    assert not policy.enabled and waiting(policy).awaiting


@pytest.mark.parametrize("who", ["vic", "oscar"])
def test_a_viewer_or_an_operator_cannot_approve(policy, people, who):
    retention.policy_update(policy_id=policy.pk, actor=people.olga, enabled=True)
    with pytest.raises(PermissionRefused, match="needs the approver role"):
        services.approve_change(change=waiting(policy), actor=getattr(people, who))
    policy.refresh_from_db()
    assert not policy.enabled


def test_a_policy_changed_after_the_request_is_refused_at_approval(policy, people, approver_enables):
    approver_enables(policy)
    stale = retention.policy_update(policy_id=policy.pk, actor=people.olga, keep_last=1, reason="less").change_request
    assert stale is not None and stale.change["before"]["keep_last"] == 5
    retention.policy_update(policy_id=policy.pk, actor=people.oscar, keep_last=7, reason="more, at once")
    count = AuditEvent.objects.count()
    with pytest.raises(DomainError, match="changed since this was asked for: Keep the last N is 7 \\(was 5\\)") as err:
        services.approve_change(change=stale, actor=people.abe)
    assert err.value.code == "stale" and err.value.http_status == 409
    policy.refresh_from_db()
    assert policy.keep_last == 7 and AuditEvent.objects.count() == count
    assert ChangeRequest.objects.get(pk=stale.pk).awaiting


def test_enabling_is_refused_when_a_rule_changed_since_even_of_the_disabled_policy(policy, people):
    """The approver approves the rules shown: loosening a disabled policy applies at once, so an enable asked for
    before it must not carry the looser rules through."""
    enable = retention.policy_update(policy_id=policy.pk, actor=people.olga, enabled=True).change_request
    assert "Its rules then: keep the last 5" in " ".join(services_lines(enable))
    retention.policy_update(policy_id=policy.pk, actor=people.oscar, keep_last=1)  # disabled: at once
    with pytest.raises(DomainError, match="Keep the last N is 1 \\(was 5\\)"):
        services.approve_change(change=enable, actor=people.abe)
    policy.refresh_from_db()
    assert not policy.enabled


def services_lines(change) -> list[str]:
    from approvals.registry import kind_of

    return kind_of(change.kind).describe(change.change)


def test_an_edit_that_cannot_delete_more_applies_at_once(policy, people, approver_enables):
    approver_enables(policy)
    for change in ({"keep_last": 8}, {"name": "llm (renamed)"}, {"keep_every": 100}, {"enabled": False}):
        edit = retention.policy_update(policy_id=policy.pk, actor=people.olga, **change)
        assert edit.change_request is None, change
    policy.refresh_from_db()
    assert (policy.keep_last, policy.name, policy.keep_every, policy.enabled) == (8, "llm (renamed)", 100, False)
    # Disabled, its rules may loosen at once: it proposes nothing until someone approves enabling it.
    assert retention.policy_update(policy_id=policy.pk, actor=people.olga, keep_last=1).change_request is None


def test_keeping_less_while_enabled_waits_whole(policy, people, approver_enables):
    approver_enables(policy)
    edit = retention.policy_update(policy_id=policy.pk, actor=people.olga, keep_last=2, name="llm lean")
    assert edit.change_request is not None
    policy.refresh_from_db()
    assert (policy.keep_last, policy.name) == (5, "llm")
    assert services.approve_change(change=edit.change_request, actor=people.abe).state == ChangeState.APPLIED
    policy.refresh_from_db()
    assert (policy.keep_last, policy.name) == (2, "llm lean")


def test_a_worker_or_command_is_not_asked_for_a_second_person(fleet):
    from audit.actor import Actor

    policy = retention.policy_create(actor=Actor.command(label="seed"), name="seeded", team=fleet.team, enabled=True)
    assert policy.enabled and not ChangeRequest.objects.exists()


def test_rejecting_needs_a_reason_and_another_approver_and_is_audited(policy, people):
    retention.policy_update(policy_id=policy.pk, actor=people.olga, enabled=True)
    change = waiting(policy)
    with pytest.raises(DomainError, match="reason is required"):
        services.reject_change(change=change, actor=people.abe, reason=" ")
    with pytest.raises(PermissionRefused):
        services.reject_change(change=change, actor=people.oscar, reason="no")
    rejected = services.reject_change(change=change, actor=people.abe, reason="not before the audit")
    assert rejected.state == ChangeState.REJECTED and rejected.decision_note == "not before the audit"
    event = AuditEvent.objects.get(action="change_request.reject")
    assert (
        event.actor_label == "abe" and event.after["requested_by"] == "olga" and event.reason == "not before the audit"
    )
    with pytest.raises(DomainError, match="rejected, not awaiting approval"):
        services.approve_change(change=rejected, actor=people.ada)
    policy.refresh_from_db()
    assert not policy.enabled


def test_the_requester_cancels_their_own_and_nobody_else_but_an_admin_does(policy, people):
    retention.policy_update(policy_id=policy.pk, actor=people.olga, enabled=True)
    change = waiting(policy)
    with pytest.raises(DomainError, match="cancel it instead"):
        services.reject_change(change=change, actor=approver_too(people.olga), reason="changed my mind")
    with pytest.raises(PermissionRefused):
        services.cancel_change(change=change, actor=people.oscar)
    assert services.cancel_change(change=change, actor=people.olga, reason="wrong policy").state == "cancelled"
    assert AuditEvent.objects.filter(action="change_request.cancel", actor_label="olga").exists()


def test_an_old_request_expires_instead_of_being_approved(policy, people, settings):
    settings.CHANGE_REQUEST_EXPIRY_DAYS = 14
    retention.policy_update(policy_id=policy.pk, actor=people.olga, enabled=True)
    change = waiting(policy)
    ChangeRequest.objects.filter(pk=change.pk).update(requested_at=timezone.now() - timedelta(days=15))
    change.refresh_from_db()
    with pytest.raises(DomainError, match="expired"):
        services.approve_change(change=change, actor=people.abe)
    change.refresh_from_db()
    assert change.state == ChangeState.EXPIRED
    assert AuditEvent.objects.filter(action="change_request.expire", target_id=policy.pk).exists()
    policy.refresh_from_db()
    assert not policy.enabled


def approver_too(actor):
    from tests.conftest import give_roles

    give_roles(actor.user, Role.APPROVER)
    return actor


@pytest.fixture
def approver_enables(people):
    def enable(policy):
        retention.policy_update(policy_id=policy.pk, actor=people.olga, enabled=True)
        services.approve_change(change=waiting(policy), actor=people.abe)
        policy.refresh_from_db()
        assert policy.enabled

    return enable


# --- pages and API ----------------------------------------------------------------------------------


def test_the_inbox_lists_deletions_and_changes_awaiting_a_second_person(fleet, people, signed_in_as):
    steps = alpha(fleet)
    job = actions_services.schedule_deletion(
        checkpoint=steps[200], reason="milestone no longer needed", actor=people.olga
    )
    assert job.state == "awaiting_approval"
    policy = retention.policy_create(actor=people.olga, name="llm", team=fleet.team, enabled=True)
    approver = signed_in_as(Role.APPROVER)
    page = approver.get("/approvals/").content.decode()
    assert "Approvals" in page and f"Deletion {job.pk}" in page and "Enabled: no → yes" in page
    assert page.count('class="badge badge--info">1<') == 2  # one of each
    assert "Approve change" in page and f'href="/retention/policies/{policy.pk}/"' in page
    viewer = signed_in_as(Role.VIEWER).get("/approvals/").content.decode()
    assert "Approve change" not in viewer and "you can read them but not approve them" in viewer
    assert 'href="/approvals/"' in page  # in the navigation


def test_the_inbox_is_empty_with_words(db, signed_in_as):
    page = signed_in_as(Role.APPROVER).get("/approvals/").content.decode()
    assert "No deletion is waiting for approval" in page and "No change is waiting for approval" in page


def test_the_pages_buttons_approve_and_reject(policy, people, signed_in_as):
    retention.policy_update(policy_id=policy.pk, actor=people.olga, enabled=True)
    change = waiting(policy)
    approver = signed_in_as(Role.APPROVER)
    response = approver.post(f"/approvals/changes/{change.pk}/reject/", {"reason": "", "next": "/approvals/"})
    assert response.status_code == 302 and ChangeRequest.objects.get(pk=change.pk).awaiting  # no reason: refused
    response = approver.post(f"/approvals/changes/{change.pk}/approve/", {"next": "https://evil.example/"})
    assert response.status_code == 302 and response.url == "/approvals/"
    policy.refresh_from_db()
    assert policy.enabled


def test_the_change_request_api(policy, people, signed_in_as):
    ops = signed_in_as(Role.OPERATOR, username="olga2")
    asked = ops.patch(f"/api/v1/retention/policies/{policy.pk}/", {"enabled": True}, content_type="application/json")
    assert asked.status_code == 202
    pk = asked.json()["change_request"]["id"]
    listed = ops.get("/api/v1/approvals/changes/").json()
    assert [c["id"] for c in listed] == [pk] and listed[0]["lines"][0] == "Enabled: no → yes"
    assert ops.get("/api/v1/approvals/changes/?state=nonsense").status_code == 400
    assert ops.get("/api/v1/approvals/changes/999999/").status_code == 404
    refused = ops.post(f"/api/v1/approvals/changes/{pk}/approve/", content_type="application/json")
    assert refused.status_code == 403
    admin_self = signed_in_as(Role.ADMIN)
    assert (
        admin_self.post(f"/api/v1/approvals/changes/{pk}/reject/", {}, content_type="application/json").status_code
        == 400
    )
    approved = admin_self.post(f"/api/v1/approvals/changes/{pk}/approve/", content_type="application/json")
    assert approved.status_code == 200 and approved.json()["state"] == "applied"
    again = admin_self.post(f"/api/v1/approvals/changes/{pk}/approve/", content_type="application/json")
    assert again.status_code == 400 and again.json()["error"] == "not_awaiting_approval"
    assert ops.get(f"/api/v1/retention/policies/{policy.pk}/").json()["enabled"] is True


def test_a_scoped_person_does_not_see_another_teams_change_requests(fleet, people, signed_in_as, settings):
    from catalog.models import Team
    from tests.conftest import give_roles

    settings.CKPTFLEET_TEAM_SCOPING = True
    other = Team.objects.create(name="vision")
    theirs = retention.policy_create(actor=people.olga, name="vision", team=other, enabled=True)
    scoped = signed_in_as(Role.APPROVER, username="sam")
    give_roles(scoped.user, "team:llm")
    pk = waiting(theirs).pk
    assert scoped.get("/api/v1/approvals/changes/").json() == []
    assert scoped.post(f"/api/v1/approvals/changes/{pk}/approve/", content_type="application/json").status_code == 404
    assert "vision" not in scoped.get("/approvals/").content.decode()


def test_the_inbox_makes_as_many_queries_for_five_requests_as_for_one(fleet, people, signed_in_as):
    from catalog.models import Team
    from tests.conftest import queries_for

    approver = signed_in_as(Role.APPROVER)
    retention.policy_create(actor=people.olga, name="first", team=fleet.team, enabled=True)
    one = queries_for(approver, "/approvals/")
    for i in range(4):
        retention.policy_create(actor=people.olga, name=f"p{i}", team=Team.objects.create(name=f"t{i}"), enabled=True)
    assert ChangeRequest.objects.filter(state=ChangeState.AWAITING_APPROVAL).count() == 5
    assert queries_for(approver, "/approvals/") == one


def test_the_page_says_when_a_request_expires_and_offers_no_button_once_it_has(policy, people, signed_in_as):
    retention.policy_update(policy_id=policy.pk, actor=people.olga, enabled=True)
    approver = signed_in_as(Role.APPROVER)
    page = approver.get("/approvals/").content.decode()
    assert "unless decided" in page and "Approve change" in page
    ChangeRequest.objects.update(requested_at=timezone.now() - timedelta(days=30))
    page = approver.get("/approvals/").content.decode()
    assert "ask again if it is still wanted" in page and "Approve change" not in page
