"""The run page's status form in Chromium: an operator ends a run with a reason; a viewer sees no form."""

from __future__ import annotations

import pytest

from catalog.models import Run
from tests.conftest import give_roles
from tests.helpers.browser import shot
from tests.helpers.ingest import dcp

pytestmark = pytest.mark.django_db(transaction=True)
PASSWORD = "a-long-password-1"


@pytest.fixture
def run(make_host, push, django_user_model) -> Run:
    for name, role in (("olga", "operator"), ("vic", "viewer")):
        give_roles(django_user_model.objects.create_user(username=name, password=PASSWORD), role)
    push(make_host(), dcp(100))
    return Run.objects.get(name="llama-7b")


def sign_in(page, url: str, username: str) -> None:
    page.goto(url)
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(url)


def test_an_operator_marks_a_run_failed_from_its_page(live_server, browser_page, run):
    page = browser_page
    url = f"{live_server.url}/runs/{run.pk}/"
    sign_in(page, url, "olga")
    assert page.get_by_text("nobody has said otherwise yet").is_visible()
    page.get_by_label("Status", exact=True).select_option("failed")
    page.get_by_label("Why", exact=True).fill("NCCL timeout on node 12")
    page.get_by_role("button", name="Set status").click()
    page.wait_for_selector("text=llm/llama-7b is now failed.")
    header = page.locator("#run-status").inner_text()
    assert "Failed · operator just now (by olga)" in header and "NCCL timeout on node 12" in header
    shot(page, "run-status-failed")
    run.refresh_from_db()
    assert (run.status, run.status_source, run.status_reason) == ("failed", "operator", "NCCL timeout on node 12")

    page.goto(f"{live_server.url}/runs/?status=failed")
    row = page.get_by_role("row", name="llama-7b")
    assert "Failed" in row.inner_text() and "operator" in row.inner_text()

    # On a phone the form wraps inside the page: nothing scrolls sideways.
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(url)
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    assert page.get_by_role("button", name="Set status").is_visible()
    shot(page, "run-status-phone")
    assert not page.console_errors, page.console_errors


def test_a_viewer_sees_the_status_but_no_form(live_server, browser_page, run):
    page = browser_page
    url = f"{live_server.url}/runs/{run.pk}/"
    sign_in(page, url, "vic")
    assert page.locator("#run-status").is_visible()
    assert page.get_by_role("button", name="Set status").count() == 0
    assert page.locator('form[aria-label="Set the run\'s status"]').count() == 0
