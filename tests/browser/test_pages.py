"""The first pages in real Chromium (Debian's, driven by Playwright) against the live app with demo data."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from django.core.management import call_command

from tests.conftest import need_service

# Screenshots are test artefacts: `make test` keeps them in var/test-artefacts/<database>/.
ARTIFACTS = Path(os.environ.get("CKPTFLEET_ARTEFACTS", Path(__file__).resolve().parents[2] / "var" / "test-artefacts"))
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture
def browser_page():
    need_service("Chromium", CHROMIUM is not None, "install Debian's chromium (make test does, as root)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:  # pragma: no cover - the dev extra installs it
        need_service("Playwright", False, "pip install -e '.[dev]'")
    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs an event loop
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-sync",
                "--disable-background-networking",
                "--disable-component-update",
            ],
        )
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        page = context.new_page()
        errors: list[str] = []
        page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.console_errors = errors
        yield page
        browser.close()


def shot(page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def test_a_person_signs_in_and_follows_a_broken_checkpoint(live_server, browser_page, tmp_path, settings):
    settings.VAR_DIR = tmp_path
    call_command("seed_demo", dir=str(tmp_path / "demo"))
    password = (tmp_path / "demo-password").read_text().strip()
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
    assert page.get_by_text("rank file __1_0.distcp is missing (listed in .metadata)").is_visible()
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
