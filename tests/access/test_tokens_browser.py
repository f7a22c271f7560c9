"""The API tokens page in real Chromium against the live app, at a desktop's and a phone's width: a token is
created, shown once, works for a script, is revoked, and then is refused."""

from __future__ import annotations

import re
import urllib.error
import urllib.request

import pytest

from tests.conftest import give_roles
from tests.helpers.browser import shot

PASSWORD = "a-long-password-1"
NO_SIDEWAYS_SCROLL = """() => ({
  page: [document.documentElement.scrollWidth, document.documentElement.clientWidth],
  boxes: [...document.querySelectorAll(".tokens-new pre, .tokens-create, main section")]
    .filter((el) => el.scrollWidth > el.clientWidth + 1)
    .map((el) => el.tagName.toLowerCase() + "." + (el.className || "")),
})"""


def api_status(url: str, token: str) -> int:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status
    except urllib.error.HTTPError as refused:
        return refused.code


def assert_fits(page, where: str) -> None:
    shot(page, "tokens " + re.sub(r"[^a-z0-9]+", "-", where.lower()).strip("-"))
    state = page.evaluate(NO_SIDEWAYS_SCROLL)
    scroll, width = state["page"]
    assert scroll <= width, f"{where}: the page is {scroll} px wide in a {width} px window"
    assert not state["boxes"], f"{where}: these scroll sideways: {state['boxes']}"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("width", "height"), [(1440, 900), (390, 844)])
def test_a_token_is_created_shown_once_used_and_revoked(live_server, django_user_model, request, width, height):
    page = request.getfixturevalue("browser_page")
    page.set_viewport_size({"width": width, "height": height})
    give_roles(django_user_model.objects.create_user(username="ada", password=PASSWORD), "viewer")
    tokens_url = f"{live_server.url}/account/tokens/"
    page.goto(tokens_url)
    page.get_by_label("Username").fill("ada")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(tokens_url)
    assert "You have no API tokens yet" in page.locator("main").inner_text()
    assert_fits(page, f"{width} px, no tokens")

    page.get_by_label("What it is for").fill("nightly spend export from the finance cluster")
    with page.expect_navigation():
        page.get_by_role("button", name="Create token").click()
    shown = page.locator("[data-token]")
    raw = shown.inner_text().strip()
    assert re.fullmatch(r"cfu_[0-9a-f]{12}_[A-Za-z0-9_-]{43}", raw)
    assert "This is the only time it is shown" in page.locator("main").inner_text()
    assert page.locator("#new-token-curl").inner_text().startswith(f'curl -H "Authorization: Bearer {raw}"')
    assert page.get_by_role("button", name="Copy token").is_visible()
    assert_fits(page, f"{width} px, the new token")

    runs = f"{live_server.url}/api/v1/runs/"
    assert api_status(runs, raw) == 200

    # Shown once: the page again lists the token by its prefix only.
    page.goto(tokens_url)
    listed = page.locator("main").inner_text()
    assert raw not in listed and raw[:16] in listed
    assert "nightly spend export from the finance cluster" in listed
    assert_fits(page, f"{width} px, the list")

    page.get_by_text("Revoke…").click()
    with page.expect_navigation():
        page.get_by_role("button", name=re.compile("^Revoke “nightly spend export")).click()
    page.wait_for_url(tokens_url)
    assert "is revoked: requests with it are refused from now on" in page.locator("ul.messages").inner_text()
    assert "revoked" in page.locator("tbody").inner_text()
    assert_fits(page, f"{width} px, after revoking")

    assert api_status(runs, raw) == 401
    assert page.console_errors == []
