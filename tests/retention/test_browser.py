"""In real Chromium: from a run page to its retention simulation, change a rule, and read the plan."""

from __future__ import annotations

from tests.helpers.browser import shot
from tests.retention.fleet import Fleet, alpha


def test_an_engineer_simulates_retention_for_a_run(live_server, browser_page, django_user_model):
    fleet = Fleet()
    steps = alpha(fleet)
    run = steps[100].run
    user = django_user_model.objects.create_user(username="viv", password="a-long-password-1")
    from tests.conftest import give_roles

    give_roles(user, "viewer")
    page = browser_page
    page.goto(f"{live_server.url}/runs/{run.pk}/")
    page.get_by_label("Username").fill("viv")
    page.get_by_label("Password").fill("a-long-password-1")
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("link", name="Simulate retention").click()
    page.wait_for_selector("text=Checkpoint by checkpoint")
    page.get_by_label("Keep the last N").fill("1")
    page.get_by_label("Keep critical checkpoints").uncheck()
    page.get_by_role("button", name="Simulate").click()
    page.wait_for_selector("text=critical checkpoints are not kept")
    assert page.get_by_text("2.08 USD").first.is_visible()
    assert page.get_by_role("link", name="step 500").first.is_visible()
    shot(page, "retention-simulator")
    page.get_by_role("link", name="tiering what-if").click()
    page.wait_for_selector("text=Assumptions")
    assert page.get_by_text("60.0 GiB").first.is_visible()  # six steps of 10 GiB on NVMe, none held
    assert not page.console_errors
