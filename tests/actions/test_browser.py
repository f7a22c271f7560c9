"""An operator schedules a deletion in Chromium: the form, the preview of exactly what would go, the confirmation."""

from __future__ import annotations

from pathlib import Path

import pytest

from actions.models import DeletionJob, DeletionState
from tests.helpers.browser import shot
from tests.helpers.demo_seed import seed_demo

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_operator_previews_and_schedules_a_deletion_and_sees_what_a_hold_protects(
    live_server,
    browser_page,
    tmp_path_factory,
    settings,
):
    seed_demo(settings, tmp_path_factory.getbasetemp())
    password = (Path(settings.VAR_DIR) / "demo-password").read_text().strip()
    page = browser_page

    page.goto(f"{live_server.url}/runs/")
    page.get_by_label("Username").fill("demo-operator")
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{live_server.url}/runs/")
    page.get_by_role("link", name="gpt-megatron").click()
    page.wait_for_selector("text=Protection and actions")
    page.get_by_role("link", name="Step 200").first.click()
    page.get_by_text("Schedule deletion").click()
    page.get_by_role("button", name="Preview what would be deleted").click()
    page.wait_for_selector("text=What goes")
    assert page.get_by_text("Saves per month").is_visible()
    assert page.get_by_text("The newest restorable checkpoint of the run afterwards").is_visible()
    shot(page, "actions-confirm-deletion")

    # Confirming without a reason is stopped by the form; with one, the deletion is scheduled.
    page.get_by_label("Reason").fill("superseded by step 300")
    page.get_by_role("button", name="Schedule deletion").click()
    page.wait_for_selector("text=The frozen list")
    job = DeletionJob.objects.order_by("-pk").first()
    assert job.reason == "superseded by step 300" and job.state in (
        DeletionState.SCHEDULED,
        DeletionState.AWAITING_APPROVAL,
    )
    assert page.get_by_text(f"Deletion {job.pk} scheduled").is_visible()
    shot(page, "actions-deletion")

    # The held demo checkpoint: its page says so, and its deletion preview refuses with the promise.
    held = "vision/resnet-tiny"
    page.goto(f"{live_server.url}/runs/")
    page.get_by_role("link", name=held.split("/")[1]).click()
    page.wait_for_selector("text=Under legal hold")
    assert page.get_by_text("DEMO-LEGAL-1").first.is_visible()
    assert not page.console_errors, page.console_errors
