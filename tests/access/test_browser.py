"""Roles and the audit trail in real Chromium against the live app: what each person sees and may do."""

from __future__ import annotations

import pytest
from django.db import transaction

from audit.services import audit_record
from tests.conftest import give_roles
from tests.helpers.browser import shot

PASSWORD = "a-long-password-1"


def sign_in(page, live_server, username: str, path: str = "/runs/") -> None:
    page.context.clear_cookies()
    page.goto(f"{live_server.url}{path}")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{live_server.url}{path}")


@pytest.mark.django_db(transaction=True)
def test_people_see_what_their_role_allows_and_an_admin_verifies_the_trail(live_server, django_user_model, request):
    page = request.getfixturevalue("browser_page")
    for name, roles in {"boss": ["admin"], "vera": ["viewer"], "newbie": []}.items():
        give_roles(django_user_model.objects.create_user(username=name, password=PASSWORD), *roles)
    with transaction.atomic():
        for action, reason in [("hold.place", "litigation"), ("checkpoint.pin", "paper"), ("hold.release", "settled")]:
            audit_record(
                actor_kind="user",
                actor_label="grace",
                source="ui",
                action=action,
                target_type="checkpoint",
                target_id=1,
                reason=reason,
            )

    sign_in(page, live_server, "newbie")
    assert page.get_by_role("heading", name="You are signed in, but have no role here yet").is_visible()
    assert page.get_by_text("ask an administrator: boss").is_visible()
    shot(page, "no-role")
    assert [e for e in page.console_errors if "403" not in e] == []
    page.console_errors.clear()  # the 403 itself is logged as a failed load

    sign_in(page, live_server, "vera", "/audit/")
    page.get_by_label("Action").fill("hold")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url("**/audit/?*action=hold*")
    rows = page.locator("tbody tr")
    assert rows.count() == 2
    assert page.get_by_text("litigation").is_visible() and page.get_by_text("paper").count() == 0
    assert page.get_by_role("button", name="Verify the chain now").count() == 0
    assert page.get_by_role("link", name="Export CSV").get_attribute("href").startswith("/audit/export.csv?")
    shot(page, "audit-filtered")

    sign_in(page, live_server, "boss", "/audit/")
    page.get_by_role("button", name="Verify the chain now").click()
    page.wait_for_selector("text=The audit chain is intact: 3 events checked.")
    assert page.locator(".badge--ok", has_text="Intact").is_visible()
    shot(page, "audit-verified")
    assert page.console_errors == []
