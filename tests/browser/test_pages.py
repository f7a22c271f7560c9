"""The first pages in real Chromium (Debian's, driven by Playwright) against the live app with demo data."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.browser import shot
from tests.helpers.demo_seed import seed_demo


def test_a_person_signs_in_and_follows_a_broken_checkpoint(live_server, browser_page, tmp_path_factory, settings):
    seed_demo(settings, tmp_path_factory.getbasetemp())
    password = (Path(settings.VAR_DIR) / "demo-password").read_text().strip()
    page = browser_page

    page.goto(f"{live_server.url}/runs/")
    page.get_by_label("Username").fill("demo")
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{live_server.url}/runs/")
    assert page.get_by_role("link", name="llama-tiny").is_visible()
    shot(page, "runs")

    page.get_by_role("link", name="llama-tiny").click()
    page.wait_for_selector("text=Newest restorable checkpoint")
    assert page.locator("#timeline").get_by_text("rank file __1_0.distcp is missing (listed in .metadata)").is_visible()
    # step 400's interrupted save is no checkpoint of the run: the orphans page lists it.
    assert not page.get_by_text("interrupted save: .metadata.tmp left behind").is_visible()
    shot(page, "run")

    page.get_by_role("link", name="Step 300").first.click()  # the list and the placement matrix both link it
    page.wait_for_selector("text=__0_0.distcp")
    shot(page, "checkpoint")

    page.get_by_role("link", name="Fleet", exact=True).click()
    page.wait_for_selector("text=lustre-gw1")
    assert page.get_by_text("Applied").count() >= 4
    shot(page, "fleet")
    assert page.console_errors == []
