"""In real Chromium: one person asks to enable a retention policy, a second approves it from the Approvals inbox."""

from __future__ import annotations

from access.roles import Role
from audit.models import AuditEvent
from retention.models import RetentionPolicy
from tests.conftest import give_roles
from tests.helpers.browser import shot
from tests.retention.fleet import Fleet, alpha


def sign_in(page, url: str, name: str) -> None:
    page.goto(f"{url}/accounts/login/")
    page.get_by_label("Username").fill(name)
    page.get_by_label("Password").fill("a-long-password-1")
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_selector("text=Sign out")


def test_a_change_that_can_delete_is_applied_only_when_a_second_person_approves(
    live_server, browser_page, django_user_model
):
    fleet = Fleet()
    run = alpha(fleet)[100].run
    for name, role in (("olga", Role.OPERATOR), ("abe", Role.APPROVER)):
        give_roles(django_user_model.objects.create_user(username=name, password="a-long-password-1"), role)
    policy = RetentionPolicy.objects.create(
        name="alpha keep 2", run=run, keep_last=2, created_label="tests", created_at=run.created_at,
        updated_at=run.created_at,
    )  # fmt: skip
    page = browser_page

    sign_in(page, live_server.url, "olga")
    page.goto(f"{live_server.url}/retention/policies/{policy.pk}/")
    page.get_by_label("Enabled").check()
    page.get_by_label("Reason").last.fill("start cleaning alpha")
    page.get_by_role("button", name="Save").click()
    page.wait_for_selector("text=Not applied yet")
    assert page.get_by_text("Enabled: no → yes").is_visible()
    assert page.get_by_role("button", name="Approve change").count() == 0  # not for the person who asked
    policy.refresh_from_db()
    assert not policy.enabled
    shot(page, "change-request-asked")
    page.get_by_role("button", name="Sign out").click()

    sign_in(page, live_server.url, "abe")
    nav = page.get_by_role("navigation", name="Main").get_by_role("link")
    tops = {round(nav.nth(i).bounding_box()["y"]) for i in range(nav.count())}
    assert len(tops) == 1, f"the navigation wraps onto {len(tops)} rows at 1280 px"
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Approvals").click()
    page.wait_for_selector("text=Changes awaiting approval")
    assert page.get_by_text("asked by olga", exact=False).first.is_visible()
    shot(page, "approvals-inbox")
    page.get_by_role("button", name="Approve change").click()
    page.wait_for_selector("text=approved and applied")
    assert page.get_by_text("No change is waiting for approval").is_visible()
    policy.refresh_from_db()
    assert policy.enabled
    event = AuditEvent.objects.get(action="retention_policy.enable")
    assert (event.actor_label, event.after["requested_by"]) == ("abe", "olga")
    page.goto(f"{live_server.url}/retention/policies/{policy.pk}/")
    assert page.get_by_text("retention_policy.enable").first.is_visible()
    assert not page.console_errors
