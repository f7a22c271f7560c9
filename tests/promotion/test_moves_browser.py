"""The move flow in real Chromium: the checkpoint page's form, the preview with its figures, the request."""

from __future__ import annotations

import pytest

from promotion.choices import Direction
from promotion.models import PromotionJob
from tests.helpers.browser import shot

pytestmark = pytest.mark.services


def test_an_operator_previews_a_move_to_a_colder_class_and_requests_it(
    live_server, transactional_db, browser_page, kit, client
):
    checkpoint, _copy = kit.checkpoint(800, {"a": (b"a" * 2048, "STANDARD"), "b": (b"b" * 1024, "STANDARD")})
    client.force_login(kit.operator)
    page = browser_page
    page.context.add_cookies(
        [{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": live_server.url}]
    )

    page.goto(f"{live_server.url}/checkpoints/{checkpoint.pk}/")
    form = page.get_by_role("form", name="Move to a colder tier")
    form.get_by_label("To bucket").select_option(label=kit.source.location.name)
    form.get_by_label("Storage class").select_option("STANDARD_IA")
    form.get_by_role("button", name="Preview move").click()
    page.wait_for_selector("text=What will happen")
    assert page.get_by_text("Storage-class change in place", exact=False).first.is_visible()
    assert page.get_by_text("the class change replaces the object in place").is_visible()
    assert page.get_by_text("3.0 KiB", exact=False).first.is_visible()
    assert not PromotionJob.objects.exists()  # a preview changes nothing
    shot(page, "move-preview")

    page.get_by_label("Why (goes into the audit trail)").fill("finished run: cheaper class")
    page.get_by_role("button", name="Request the move").click()
    page.wait_for_selector("h1:has-text('Demotion #')")
    job = PromotionJob.objects.get()
    assert job.direction == Direction.DEMOTE and job.reason == "finished run: cheaper class"
    assert page.get_by_text("freed only after the new copy verifies", exact=False).is_visible()
    shot(page, "move-requested")
    assert [e for e in page.console_errors if "status of 500" not in e] == []
