"""Two approvers for a deletion above the blast radius, in Chromium (issue 15, item 5).

The first approver's click records one of two approvals and the page says a second, different approver is
needed (and offers the first no second click); the second approver's click schedules it.
"""

from __future__ import annotations

import pytest

from access.roles import Role
from actions import services
from actions.models import DeletionJob, DeletionState
from tests.actions.conftest import as_ui, build_fleet, make_person
from tests.helpers.browser import shot

pytestmark = pytest.mark.django_db(transaction=True)

PASSWORD = "a-long-password-1"


def sign_in(page, url: str, username: str) -> None:
    page.context.clear_cookies()
    page.goto(f"{url}/accounts/login/?next=/actions/deletions/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{url}/actions/deletions/")


def test_a_deletion_above_the_blast_radius_takes_two_approvers(live_server, browser_page, settings):
    settings.BLAST_MAX_RUN_PERCENT = 30  # one whole checkpoint of three is a third of the run
    fleet = build_fleet()
    olga = make_person("olga", Role.OPERATOR)
    make_person("april", Role.APPROVER)
    make_person("otto", Role.APPROVER)
    job = services.schedule_deletion(checkpoint=fleet.checkpoints[100], reason="superseded", actor=as_ui(olga))
    assert job.approvals_required == 2
    page = browser_page

    sign_in(page, live_server.url, "april")
    page.goto(f"{live_server.url}/actions/deletions/{job.pk}/")
    assert page.get_by_text("blast radius is above a limit").is_visible()
    page.get_by_role("button", name=f"Approve deletion {job.pk}").click()
    page.wait_for_selector("text=your approval is recorded (1 of 2)")
    assert page.get_by_text("1 of 2 approvals: awaiting a second approver").is_visible()
    assert page.get_by_role("button", name=f"Approve deletion {job.pk}").count() == 0
    assert page.get_by_text("needs a second, different approver").is_visible()
    shot(page, "actions-deletion-first-of-two-approvals")
    assert DeletionJob.objects.get(pk=job.pk).state == DeletionState.AWAITING_APPROVAL

    sign_in(page, live_server.url, "otto")
    page.goto(f"{live_server.url}/actions/deletions/{job.pk}/")
    page.get_by_role("button", name=f"Approve deletion {job.pk}").click()
    page.wait_for_selector(f"text=Deletion {job.pk} approved")
    assert page.get_by_text("by april").first.is_visible() and page.get_by_text("and otto").first.is_visible()
    assert DeletionJob.objects.get(pk=job.pk).state == DeletionState.SCHEDULED
    assert not page.console_errors, page.console_errors
