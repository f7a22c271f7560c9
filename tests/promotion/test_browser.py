"""The promotion panel in real Chromium: a restore in progress is followed live until it completes."""

from __future__ import annotations

import pytest

from promotion import runner
from promotion.choices import JobState
from promotion.services import promote
from tests.conftest import is_postgres
from tests.helpers.browser import shot

pytestmark = pytest.mark.services


def test_an_operator_previews_a_promotion_and_watches_a_restore_finish(
    live_server,
    transactional_db,
    browser_page,
    kit,
    client,
):
    checkpoint, copy = kit.checkpoint(600, {"a": (b"a" * 3072, "GLACIER")})
    target = kit.bucket()
    client.force_login(kit.operator)
    page = browser_page
    page.context.add_cookies(
        [{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": live_server.url}]
    )

    page.goto(f"{live_server.url}/checkpoints/{checkpoint.pk}/")
    assert page.get_by_text("This checkpoint has never been promoted.").is_visible()
    page.get_by_label("To location").select_option(label=f"{target.location.name} · Object storage, standard")
    page.get_by_role("button", name="Preview promotion").click()
    page.wait_for_selector("text=What will happen")
    assert page.get_by_text("Restore 1 archived object(s) (3.0 KiB)", exact=False).is_visible()
    shot(page, "promotion-preview")

    kit.restores_take(4)  # the restore stays under way for a few reads, until the test lets it finish
    job = promote(copy=copy, target_location=target.location, actor=kit.actor, reason="browser test")
    job.refresh_from_db()
    assert job.state == JobState.RESTORING
    page.goto(f"{live_server.url}/checkpoints/{checkpoint.pk}/")
    progress = page.locator(f"[data-promotion-progress='/promotions/{job.pk}/progress.json']")
    assert "0 B of 3.0 KiB" in progress.inner_text()

    kit.restores_take(0)
    runner.poll(job.pk)
    job.refresh_from_db()
    assert job.state == JobState.COMPLETED, job.error

    # No reload: the page's script polls the progress endpoint and shows the outcome.
    page.wait_for_function(
        "el => el.innerText.includes('3.0 KiB of 3.0 KiB') && el.innerText.includes('Completed')",
        arg=progress.element_handle(),
        timeout=15000,
    )
    shot(page, "promotion-completed")
    errors = page.console_errors
    if not is_postgres():
        # The live server's thread and this one share SQLite's in-memory database, which answers a
        # read during the worker's write with "table is locked" (a 500 the script retries past).
        errors = [e for e in errors if "status of 500" not in e]
    assert errors == []
