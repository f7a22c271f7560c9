"""One person in real Chromium: signs in through the login form, browses, and keeps every page honest.

A ``Visitor`` is one browser context (its own cookies: one person) on a Chromium shared by a test
module. Every page it loads is checked the same way: no console error, no uncaught exception, no
failed request, no response of 400 or more unless the step said to expect one, no Django error page;
and every page is saved as a screenshot under the artefact folder ($CKPTFLEET_ARTEFACTS, else
<pytest basetemp>/screenshots).
"""

from __future__ import annotations

import csv
import io
import os
import re
import shutil
from pathlib import Path

from tests.conftest import need_service

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-sync",
    "--disable-background-networking",
    "--disable-component-update",
]
# Text that only Django's own error pages show: a page that shows it is broken, whatever its status.
BROKEN_PAGE = re.compile(r"Traceback \(most recent call last\)|TemplateSyntaxError|Server Error \(500\)")


def artefact_dir(tmp_path_factory) -> Path:
    """$CKPTFLEET_ARTEFACTS if set, else <pytest basetemp>/screenshots (never under the repository)."""
    chosen = os.environ.get("CKPTFLEET_ARTEFACTS")
    path = Path(chosen) if chosen else tmp_path_factory.getbasetemp() / "screenshots"
    path.mkdir(parents=True, exist_ok=True)
    return path


AXE = Path(__file__).resolve().parents[1] / "vendor" / "axe-core" / "axe.min.js"


def inject_axe(page) -> None:
    """Load the vendored axe-core into the page, once.

    Through DevTools' evaluation, not a <script> tag: the pages' Content-Security-Policy (script-src 'self', no
    'unsafe-inline') rightly refuses an inline script, and the checks must see the page exactly as a person gets it.
    """
    assert AXE.is_file(), f"{AXE} is missing: the vendored axe-core is part of the tests"
    if not page.evaluate("() => typeof window.axe !== 'undefined'"):
        page.evaluate(AXE.read_text(encoding="utf-8") + "\n;true")


def launch_chromium():
    """Start Playwright and Debian's Chromium, headless; the caller stops both. Skips (or fails) without them."""
    need_service("Chromium", CHROMIUM is not None, "install Debian's chromium (make test does, as root)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:  # pragma: no cover - the dev extra installs it
        need_service("Playwright", False, "pip install -e '.[dev]'")
    # Playwright's sync API runs an event loop in this thread; Django's ORM would refuse to run beside it.
    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    playwright = sync_playwright().start()
    try:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    except Exception:
        playwright.stop()
        raise
    return playwright, browser


class Visitor:
    """One signed-in person in their own browser context."""

    def __init__(self, browser, base_url: str, username: str, password: str, shots: Path, prefix: str) -> None:
        self.base_url = base_url.rstrip("/")
        self.username = username
        self.password = password
        self.shots = shots
        self.prefix = prefix
        self.context = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
        self.context.set_default_timeout(15_000)
        self.page = self.context.new_page()
        self.problems: list[str] = []
        self.pages_seen: list[str] = []
        self._allowed: dict[str, int] = {}  # path -> the error status a step expects from it
        self._shot_count = 0
        page = self.page
        page.on("console", self._on_console)
        page.on("pageerror", lambda exc: self.problems.append(f"{self._where()}: uncaught {exc}"))
        page.on("requestfailed", self._on_request_failed)
        page.on("response", self._on_response)

    # --- what goes wrong, collected as it happens ----------------------------------------------

    def _where(self) -> str:
        return f"{self.username} at {self.page.url}"

    def _path(self, url: str) -> str:
        return url[len(self.base_url) :] if url.startswith(self.base_url) else url

    def _on_console(self, msg) -> None:
        if msg.type != "error":
            return
        where = msg.location.get("url", "") if msg.location else ""
        # Chromium reports a document answered with an expected error status as a console error too.
        if "Failed to load resource" in msg.text and self._path(where.split("#")[0]) in self._allowed:
            return
        self.problems.append(f"{self._where()}: console error {msg.text!r} ({where})")

    def _on_request_failed(self, request) -> None:
        if request.failure == "net::ERR_ABORTED":
            # Cancelled by the browser itself (the page navigated on before, say, the favicon arrived):
            # no answer was refused. What the server answers badly is caught by _on_response.
            return
        self.problems.append(f"{self._where()}: request failed {request.method} {request.url}: {request.failure}")

    def _on_response(self, response) -> None:
        if response.status < 400:
            return
        path = self._path(response.url.split("#")[0])
        if self._allowed.get(path) == response.status:
            return
        self.problems.append(f"{self._where()}: {response.request.method} {response.url} answered {response.status}")

    def allow(self, path: str, status: int) -> None:
        """Expect ``status`` from ``path`` (e.g. the 403 page of a person without a role): not a problem."""
        self._allowed[path] = status

    def assert_clean(self) -> None:
        assert not self.problems, "problems in the browser:\n" + "\n".join(self.problems)

    # --- moving around -------------------------------------------------------------------------

    def shot(self, name: str) -> Path:
        self._shot_count += 1
        slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:60] or "page"
        path = self.shots / f"{self.prefix}-{self.username}-{self._shot_count:02d}-{slug}.jpeg"
        # JPEG: half the time of a PNG of a long page, and as readable for a person looking at it.
        self.page.screenshot(path=str(path), full_page=True, type="jpeg", quality=70)
        return path

    def settle(self, name: str = "", *, status: int = 200) -> None:
        """After a navigation: the page loaded, is not an error page, is clean; keep a screenshot."""
        page = self.page
        page.wait_for_load_state("load")
        body = page.locator("body").inner_text()
        if status < 400:
            assert not BROKEN_PAGE.search(body), f"{page.url} is an error page:\n{body[:2000]}"
        self.pages_seen.append(self._path(page.url))
        self.shot(name or self._path(page.url))
        self.assert_clean()

    def visit(self, path: str, *, status: int = 200, name: str = "") -> None:
        """Open ``path`` directly and check it answers ``status`` (a 403 page is a page too)."""
        if status >= 400:
            self.allow(path, status)
        response = self.page.goto(self.base_url + path)
        assert response is not None and response.status == status, (
            f"{self.username}: {path} answered {response.status if response else 'nothing'}, not {status}"
        )
        self.settle(name or path, status=status)

    def click_and_settle(self, locator, name: str = "") -> None:
        """Click something that navigates (a link or a submit button) and check the page it leads to."""
        with self.page.expect_navigation():
            locator.click()
        self.settle(name)

    def sign_in(self, start: str = "/") -> None:
        """Through the real login form: the page asks for a sign-in and returns to ``start``."""
        page = self.page
        page.goto(self.base_url + start)
        page.wait_for_url(re.compile(r"/accounts/login/"))
        self.settle("login")
        page.get_by_label("Username").fill(self.username)
        page.get_by_label("Password").fill(self.password)
        with page.expect_navigation():
            page.get_by_role("button", name="Sign in").click()
        assert "/accounts/login/" not in page.url, f"{self.username} could not sign in: {page.url}"

    def nav(self, name: str) -> None:
        """Follow a link of the main navigation."""
        self.click_and_settle(
            self.page.get_by_role("navigation", name="Main").get_by_role("link", name=name, exact=True)
        )

    def messages(self) -> list[str]:
        """The flash messages the page shows, as a person reads them."""
        return [m.strip() for m in self.page.locator("ul.messages li").all_inner_texts()]

    def post_form(self, action: str, fields: dict[str, str], name: str = "") -> None:
        """Submit a form the page does not offer (as a person with a saved request could), with the page's CSRF token.

        It is a real form post from the browser: the answer is the page the server redirects to.
        """
        with self.page.expect_navigation():
            self.page.evaluate(
                """([action, fields]) => {
                    const form = document.createElement("form");
                    form.method = "post";
                    form.action = action;
                    const token = document.querySelector("input[name=csrfmiddlewaretoken]").value;
                    for (const [k, v] of Object.entries({...fields, csrfmiddlewaretoken: token})) {
                        const input = document.createElement("input");
                        input.type = "hidden"; input.name = k; input.value = v;
                        form.appendChild(input);
                    }
                    document.body.appendChild(form);
                    form.submit();
                }""",
                [action, fields],
            )
        self.settle(name or f"posted {action}")

    def download_csv(self, locator) -> tuple[str, list[dict[str, str]]]:
        """Click an export link and read the CSV file the browser saved: (file name, rows as dicts)."""
        with self.page.expect_download() as info:
            locator.click()
        download = info.value
        assert download.failure() is None, f"download failed: {download.failure()}"
        text = Path(download.path()).read_text(encoding="utf-8")
        self.assert_clean()
        return download.suggested_filename, list(csv.DictReader(io.StringIO(text)))

    def close(self) -> None:
        self.context.close()
