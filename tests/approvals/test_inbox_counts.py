"""The approver's inbox in numbers: the navigation's badge, the overview's "Awaiting approval", and an approver who
turns a deletion down ("Reject", not "Cancel"), with the same rule in the service as on the page."""

from __future__ import annotations

import pytest

from access.roles import Role
from actions import services as actions_services
from actions.models import DeletionJob, DeletionState
from ckptfleet.errors import PermissionRefused
from dashboard.inbox import inbox_of
from retention import services as retention
from tests.approvals.test_change_requests import fleet, people  # noqa: F401 (fixtures)
from tests.retention.fleet import alpha


@pytest.fixture
def waiting(fleet, people):  # noqa: F811
    """A milestone deletion asked by olga (awaiting approval) and a policy enabled by olga (a change request)."""
    steps = alpha(fleet)
    job = actions_services.schedule_deletion(
        checkpoint=steps[200], reason="milestone no longer needed", actor=people.olga
    )
    assert job.state == DeletionState.AWAITING_APPROVAL
    retention.policy_create(actor=people.olga, name="llm", team=fleet.team, enabled=True)
    return job


def test_the_counts_say_what_awaits_and_what_is_for_this_approver(waiting, people):  # noqa: F811
    abe = inbox_of(people.abe.user)
    assert (abe.total, abe.for_you, abe.is_approver) == (2, 2, True)
    labels = {row.label: row.count for row in abe.rows}
    assert labels["Checkpoint deletions"] == 1 and sum(labels.values()) == 2
    assert [r.bytes for r in abe.rows if r.label == "Checkpoint deletions"] == [waiting.bytes_total]
    olga = inbox_of(people.olga.user)  # she asked for both: nothing is hers to decide, and she is no approver
    assert (olga.total, olga.for_you) == (2, 0)


def test_a_deletion_proposed_by_a_policy_counts_for_every_approver(waiting, people):  # noqa: F811
    DeletionJob.objects.filter(pk=waiting.pk).update(requested_by=None, requested_label="policy llm")
    assert inbox_of(people.abe.user).for_you == 2


def test_the_badge_and_the_overview_show_the_inbox(waiting, signed_in_as):
    approver = signed_in_as(Role.APPROVER)
    page = approver.get("/").content.decode()
    assert 'data-inbox-count title="2 awaiting your approval"' in page
    assert "Awaiting approval" in page and "2 for you to decide" in page and "Checkpoint deletions" in page
    viewer = signed_in_as(Role.VIEWER).get("/").content.decode()
    assert "data-inbox-count" not in viewer  # a viewer decides nothing
    assert "Awaiting approval" in viewer and "Each waits for a person with the approver role" in viewer


def test_an_empty_inbox_shows_no_badge_and_no_section(fleet, signed_in_as):  # noqa: F811
    page = signed_in_as(Role.APPROVER).get("/").content.decode()
    assert "data-inbox-count" not in page and "Awaiting approval" not in page


def test_an_approver_rejects_what_awaits_approval_and_cannot_cancel_what_was_approved(waiting, people, signed_in_as):  # noqa: F811
    page = signed_in_as(Role.APPROVER).get(f"/actions/deletions/{waiting.pk}/").content.decode()
    assert "Reject deletion" in page and "Cancel deletion" not in page
    operator = signed_in_as(Role.OPERATOR, username="oscar2").get(f"/actions/deletions/{waiting.pk}/").content.decode()
    assert "Cancel deletion" in operator and "Reject deletion" not in operator

    approved = actions_services.approve(job=waiting, actor=people.abe)
    assert approved.state == DeletionState.SCHEDULED
    page = signed_in_as(Role.APPROVER, username="abe2").get(f"/actions/deletions/{waiting.pk}/").content.decode()
    assert "Cancel deletion" not in page and "Reject deletion" not in page
    with pytest.raises(PermissionRefused):
        actions_services.cancel(job=approved, reason="changed my mind", actor=people.abe)
    assert DeletionJob.objects.get(pk=waiting.pk).state == DeletionState.SCHEDULED


def test_an_approver_rejecting_cancels_the_deletion_with_their_reason(waiting, people):  # noqa: F811
    done = actions_services.cancel(job=waiting, reason="we still need this milestone", actor=people.abe)
    assert done.state == DeletionState.CANCELLED and done.cancelled_label == "abe"
