"""An operator places a compliance hold in Chromium, and nobody, the admin included, gets to release it."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from actions.models import Hold, HoldMode
from tests.helpers.browser import shot
from tests.helpers.demo_seed import seed_demo
from tests.helpers.holds import forget_compliance_holds

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def compliance_holds_forgotten():
    """The test's compliance holds go before the runner's flush, which the database would otherwise refuse."""
    yield
    forget_compliance_holds()


def sign_in(page, url: str, username: str, password: str) -> None:
    page.goto(f"{url}/runs/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{url}/runs/")


def test_an_operator_places_a_compliance_hold_and_its_release_is_refused_to_everyone(
    live_server, browser_page, tmp_path_factory, settings, compliance_holds_forgotten
):
    seed_demo(settings, tmp_path_factory.getbasetemp())
    password = (Path(settings.VAR_DIR) / "demo-password").read_text().strip()
    page = browser_page
    sign_in(page, live_server.url, "demo-operator", password)
    page.get_by_role("link", name="gpt-megatron").click()
    page.get_by_role("link", name="Step 200").first.click()
    checkpoint_url = page.url

    page.get_by_text("Place a hold on this checkpoint").click()
    assert page.get_by_text("nobody can release it or shorten the date before then").is_visible()
    page.get_by_role("radio", name="Compliance hold").check()
    day = (timezone.now() + timedelta(days=365)).date().isoformat()
    page.get_by_label("Retain until (compliance holds only)").fill(day)
    page.get_by_label("Case reference").fill("SEC-2026-7")
    page.locator("#hold-reason").fill("regulator's preservation order")
    page.get_by_role("button", name="Place hold").click()
    page.wait_for_selector("text=Compliance hold SEC-2026-7 placed")
    held = Hold.objects.get(case_ref="SEC-2026-7")
    assert held.mode == HoldMode.COMPLIANCE and held.retain_until.date().isoformat() == day
    item = page.locator(f"li[data-hold='{held.pk}']")
    assert f"Retained until {day} 00:00:00 UTC; cannot be released" in item.inner_text()
    assert item.get_by_role("button", name="Release hold").count() == 0
    shot(page, "actions-compliance-hold")

    # The admin (a superuser) is offered no release either; a release sent anyway is refused with the reason.
    page.context.clear_cookies()
    sign_in(page, live_server.url, "demo", password)
    page.goto(checkpoint_url)
    item = page.locator(f"li[data-hold='{held.pk}']")
    assert item.get_by_text("cannot be released").is_visible()
    assert item.get_by_role("button", name="Release hold").count() == 0
    page.evaluate(
        """([action, token]) => {
            const form = document.createElement("form");
            form.method = "post";
            form.action = action;
            for (const [name, value] of [["csrfmiddlewaretoken", token], ["reason", "I am the admin"]]) {
                const input = document.createElement("input");
                input.type = "hidden"; input.name = name; input.value = value;
                form.appendChild(input);
            }
            document.body.appendChild(form);
            form.submit();
        }""",
        [f"/actions/holds/{held.pk}/release/", page.locator("input[name=csrfmiddlewaretoken]").first.input_value()],
    )
    page.wait_for_selector("text=Not released")
    assert page.get_by_text("is a compliance hold retained until").first.is_visible()
    held.refresh_from_db()
    assert held.active
    assert not page.console_errors, page.console_errors
