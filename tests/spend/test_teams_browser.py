"""The Teams page in real Chromium: finance changes a team's cost center from a day; a viewer only reads it."""

from __future__ import annotations

from datetime import timedelta

import pytest

from catalog.models import Team, TeamCostCenter
from fleet.pricebook import utc_today
from tests.conftest import give_roles
from tests.helpers.browser import shot

PASSWORD = "a-long-password-1"


def sign_in(page, live_server, username: str, path: str) -> None:
    page.context.clear_cookies()
    page.goto(f"{live_server.url}{path}")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{live_server.url}{path}")


@pytest.mark.django_db(transaction=True)
def test_finance_sets_a_cost_center_from_the_teams_page_and_a_viewer_only_reads(
    live_server, django_user_model, request
):
    page = request.getfixturevalue("browser_page")
    give_roles(django_user_model.objects.create_user(username="fiona", password=PASSWORD), "finance")
    give_roles(django_user_model.objects.create_user(username="vera", password=PASSWORD), "viewer")
    team = Team.objects.create(name="vision", cost_center="CC-OLD")
    first = utc_today().replace(day=1)

    sign_in(page, live_server, "fiona", "/spend/")
    page.get_by_role("link", name="Teams and cost centers").click()
    page.wait_for_url(f"{live_server.url}/spend/teams/")
    page.get_by_role("link", name="vision").click()
    page.wait_for_url(f"{live_server.url}/spend/teams/{team.pk}/")
    form = page.get_by_role("form", name="Change the cost center")
    form.get_by_label("Cost center").fill("CC-NEW")
    form.get_by_label("From").fill(first.isoformat())
    form.get_by_label("Reason").fill("reorganisation")
    form.get_by_role("button", name="Set cost center").click()
    page.wait_for_url(f"{live_server.url}/spend/teams/{team.pk}/")
    assert page.get_by_text(f"vision is billed to CC-NEW from {first:%Y-%m-%d}").is_visible()
    assert page.get_by_test_id("current-cost-center").inner_text() == "CC-NEW"
    history = page.get_by_role("table", name="Cost center history")
    assert history.locator("tbody tr").count() == 2 and "reorganisation" in history.inner_text()
    shot(page, "team-cost-center-set")

    # A day before this month is refused, on the page, and nothing changes.
    form = page.get_by_role("form", name="Change the cost center")
    form.get_by_label("Cost center").fill("CC-LATE")
    form.get_by_label("From").fill((first - timedelta(days=1)).isoformat())
    form.get_by_role("button", name="Set cost center").click()
    assert page.get_by_role("alert").get_by_text("earlier months are closed").is_visible()
    assert TeamCostCenter.objects.filter(team=team).count() == 2

    sign_in(page, live_server, "vera", f"/spend/teams/{team.pk}/")
    assert page.get_by_test_id("current-cost-center").inner_text() == "CC-NEW"
    assert page.get_by_test_id("read-only").is_visible()
    assert page.get_by_role("form", name="Change the cost center").count() == 0
    assert page.get_by_role("button", name="Set cost center").count() == 0
    page.goto(f"{live_server.url}/spend/teams/")
    assert page.get_by_role("heading", name="Create a team").count() == 0
    assert page.get_by_role("table", name="Teams").get_by_text("CC-NEW").is_visible()
    shot(page, "teams-read-only")
    assert page.console_errors == []
    team.refresh_from_db()
    assert team.cost_center == "CC-NEW"
