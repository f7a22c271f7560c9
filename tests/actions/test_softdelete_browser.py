"""An operator restores a soft deletion in Chromium: the trash and what it costs on the page, then Restore."""

from __future__ import annotations

import pytest

from actions import services
from actions.models import DeletionState, ItemState
from tests.actions.test_softdelete import content, execute
from tests.helpers.deletion import OPERATOR, checkpoint

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_operator_restores_a_deletion_from_the_trash(
    live_server, browser_page, s3, scanned, signed_in_as, settings, django_capture_on_commit_callbacks
):
    settings.SOFT_DELETE_DAYS = 7
    name, _bucket = scanned
    before = content(s3, name)
    job = execute(
        services.schedule_deletion(checkpoint=checkpoint(100), reason="superseded", actor=OPERATOR),
        django_capture_on_commit_callbacks,
    )
    assert job.items.filter(state=ItemState.TRASHED).count() == 3
    client = signed_in_as("operator")
    page = browser_page
    page.context.add_cookies(
        [{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": live_server.url}]
    )

    page.goto(f"{live_server.url}/spend/")
    assert page.locator("#pending-reclaim").is_visible()
    page.goto(f"{live_server.url}/actions/deletions/{job.pk}/")
    assert page.get_by_text("moved to the trash, recoverable until").first.is_visible()
    assert page.locator("#pending-reclaim").get_by_text("3 items").is_visible()
    page.get_by_placeholder("Why restore it (required)").fill("the run resumes from step 100")
    page.get_by_role("button", name="Restore from the trash").click()
    page.wait_for_selector(f"text=Deletion {job.pk} is being restored")
    job.refresh_from_db()
    assert job.state == DeletionState.RESTORED
    assert content(s3, name) == before
    assert "3 of 3 restored" in job.outcome and page.get_by_text("3 of 3 restored from the trash").first.is_visible()
    assert not page.get_by_role("button", name="Restore from the trash").count()
    assert not page.console_errors, page.console_errors
