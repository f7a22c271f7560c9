"""The audit page's integrity callout in real Chromium: anchored and intact, then the red banner once a rewrite is
found by the scheduled verification."""

from __future__ import annotations

import pytest

from audit.anchors import anchor_write
from audit.choices import VerificationTrigger
from audit.verify import verify_and_record
from tests.conftest import give_roles
from tests.helpers.audit import record, tamper
from tests.helpers.browser import shot

PASSWORD = "a-long-password-1"


@pytest.mark.django_db(transaction=True)
def test_the_audit_page_turns_red_when_verification_finds_a_rewrite(
    live_server, django_user_model, audit_anchor_dir, request
):
    page = request.getfixturevalue("browser_page")
    give_roles(django_user_model.objects.create_user(username="vera", password=PASSWORD), "viewer")
    events = [record(f"checkpoint.pin.{i}", reason="paper") for i in range(4)]
    anchor_write()
    verify_and_record(trigger=VerificationTrigger.SCHEDULE)

    page.goto(f"{live_server.url}/audit/")
    page.get_by_label("Username").fill("vera")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{live_server.url}/audit/")
    assert page.get_by_role("alert").count() == 0
    assert page.get_by_text("Intact").first.is_visible()
    assert page.locator("#audit-last-anchor").is_visible()
    assert "event 4" in page.locator("#audit-last-anchor").inner_text()
    shot(page, "audit-intact-anchored")

    tamper("UPDATE catalog_auditevent SET reason = %s WHERE id = %s", ["nothing to see", events[2].pk])
    verify_and_record(trigger=VerificationTrigger.SCHEDULE)
    page.reload()
    banner = page.get_by_role("alert")
    assert banner.is_visible()
    text = banner.inner_text()
    assert "The audit trail failed verification" in text
    assert f"the chain is broken at event {events[2].pk}" in text
    # Red: the banner uses the "bad" colours of the style sheet, not the default callout's.
    colour = banner.evaluate("el => getComputedStyle(el).backgroundColor")
    assert colour == "rgb(253, 228, 228)", colour
    assert page.get_by_text("Broken").first.is_visible()
    shot(page, "audit-verification-failed")
    assert page.console_errors == []
