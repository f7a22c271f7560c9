"""The main pages in real Chromium under the Content-Security-Policy (issue 26): each works, and none logs a
violation (an inline script or handler the policy refused, a script or style from elsewhere).

Violations are caught twice: Chromium's console message ("Refused to ... because it violates the following
Content Security Policy directive"), and the page's own ``securitypolicyviolation`` events, recorded by a script
Playwright adds before the page's (which the policy does not govern)."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import in_the_sqlite_pass_only
from tests.helpers.demo_seed import seed_demo

pytestmark = in_the_sqlite_pass_only("the CSP checks")

RECORD_VIOLATIONS = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", (e) => {
  const where = `${e.sourceFile}:${e.lineNumber}`;
  window.__cspViolations.push(`${e.violatedDirective} blocked ${e.blockedURI || "inline"} (${where})`);
});
"""

PAGES = [
    "/",
    "/runs/",
    "/fleet/",
    "/spend/",
    "/recovery/",
    "/jobs/",
    "/problems/",
    "/approvals/",
    "/audit/",
    "/retention/",
    "/promotions/",
    "/account/tokens/",
    "/api/v1/docs/",
    "/admin/",
]


def test_the_main_pages_work_under_the_policy_and_log_no_violation(
    live_server, browser_page, tmp_path_factory, settings
):
    seed_demo(settings, tmp_path_factory.getbasetemp())
    password = (Path(settings.VAR_DIR) / "demo-password").read_text().strip()
    page = browser_page
    console: list[str] = []
    page.on("console", lambda msg: console.append(msg.text) if "Content Security Policy" in msg.text else None)
    page.add_init_script(RECORD_VIOLATIONS)

    response = page.goto(f"{live_server.url}/runs/")
    assert "script-src 'self'" in response.headers["content-security-policy"]
    page.get_by_label("Username").fill("demo")
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{live_server.url}/runs/")

    seen = {}
    for path in PAGES:
        response = page.goto(f"{live_server.url}{path}")
        page.wait_for_load_state("networkidle")
        assert response.status == 200, path
        assert "unsafe-inline" not in response.headers["content-security-policy"].split("script-src")[1].split(";")[0]
        seen[path] = page.evaluate("window.__cspViolations")
    # The run and checkpoint pages (charts, copy buttons, the bulk form's script) and a script that must have run.
    page.goto(f"{live_server.url}/runs/")
    page.get_by_role("link", name="llama-tiny").click()
    page.wait_for_selector("text=Newest restorable checkpoint")
    seen["run"] = page.evaluate("window.__cspViolations")
    page.get_by_role("link", name="Step 300").first.click()
    page.wait_for_selector("text=__0_0.distcp")
    seen["checkpoint"] = page.evaluate("window.__cspViolations")
    # Swagger UI's start-up script is a file now (the split view): it drew the operations.
    page.goto(f"{live_server.url}/api/v1/docs/")
    page.wait_for_selector(".opblock", timeout=20_000)
    seen["api docs drawn"] = page.evaluate("window.__cspViolations")

    assert {path: found for path, found in seen.items() if found} == {}
    assert console == []
    print(f"\n[csp] {len(seen)} pages under the policy, 0 violations")
