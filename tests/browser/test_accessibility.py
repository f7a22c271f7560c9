"""Accessibility in real Chromium: every page checked by axe-core, the keyboard path in, a phone's width, paper.

axe-core is vendored for the tests (``tests/vendor/axe-core``, see its README): no download at test
time. Each page is opened by the person whose role it is for (the demo's people, ``seed_demo``, with
its two demo buckets on moto's S3 server), through ``tests.browser.visitor`` (so it is also free of
console errors and failed requests, and kept as a screenshot), then axe runs the WCAG 2.0, 2.1 and
2.2 level A and AA rules on it. Any violation of impact serious or critical fails, with the page, the
rule, the element and axe's help, all pages first and then one failure listing them all.

Left out, with the reason: the API docs page (``/api/v1/docs/``) is drf-spectacular's Swagger UI,
third-party markup we do not write; and Django's own admin.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from django.core.management import call_command

from access.services import api_token_create
from audit.actor import Actor
from tests.browser.visitor import artefact_dir, inject_axe
from tests.conftest import in_the_sqlite_pass_only, restore_default_prices
from tests.helpers.browser import Demo, checkpoint_of

pytestmark = [
    pytest.mark.services,
    in_the_sqlite_pass_only("the accessibility checks"),
]

WCAG_A_AA = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa"]
FAILING_IMPACTS = {"serious", "critical"}
ALL_IMPACTS = {"minor", "moderate", "serious", "critical"}
RUN = "llama-tiny"  # the demo run with a broken copy, a pin, a hold and a scheduled deletion


@pytest.fixture
def demo(live_server, settings, tmp_path, s3) -> Demo:
    """The journeys' demo fleet, with the demo's two buckets on moto's S3 server (the fleet page's bucket table)."""
    settings.VAR_DIR = tmp_path
    settings.S3_SECRETS_DIR = tmp_path / "s3-secrets"
    restore_default_prices()
    call_command("seed_demo", dir=str(tmp_path / "demo"), s3_endpoint=s3.url, stdout=io.StringIO())
    password = (tmp_path / "demo-password").read_text().strip()
    return Demo(url=live_server.url, password=password, trees=tmp_path / "demo")


# --- axe ---------------------------------------------------------------------------------------------

RUN_AXE = """async (tags) => {
  const result = await window.axe.run(document, {
    runOnly: {type: "tag", values: tags},
    resultTypes: ["violations"],
  });
  return result.violations.map((v) => ({
    id: v.id, impact: v.impact, help: v.help, helpUrl: v.helpUrl,
    nodes: v.nodes.map((n) => ({target: n.target.join(" "), impact: n.impact, summary: n.failureSummary})),
  }));
}"""


def axe_violations(page, *, impacts: set[str] = FAILING_IMPACTS) -> list[dict]:
    """The WCAG 2 A/AA violations of the page as it is now (serious and critical unless told), one per element."""
    inject_axe(page)
    found = []
    for rule in page.evaluate(RUN_AXE, WCAG_A_AA):
        for node in rule["nodes"]:
            impact = node["impact"] or rule["impact"]
            if impact in impacts:
                found.append({"rule": rule["id"], "impact": impact, "help": rule["help"], **node})
    return found


class Audit:
    """Collects what axe finds on every page, then fails once with all of it."""

    def __init__(self, shots: Path) -> None:
        self.shots = shots
        self.checked: list[str] = []
        self.lines: list[str] = []
        self.report: list[dict] = []

    def check(self, who, path: str, *, status: int = 200, label: str = "") -> None:
        if path:
            who.visit(path, status=status)
        where = f"{label or who.page.url} as {who.username}"
        self.checked.append(where)
        for v in axe_violations(who.page, impacts=ALL_IMPACTS):
            self.report.append({"page": where, **v})  # the artefact has the minor and moderate ones too
            if v["impact"] not in FAILING_IMPACTS:
                continue
            line = f"{where}: [{v['impact']}] {v['rule']} at {v['target']!r}: {v['help']}"
            detail = (v.get("summary") or "").replace("\n", " ")
            print(line, "|", detail)
            self.lines.append(f"{line}\n      {detail}")

    def assert_clean(self) -> None:
        (self.shots / "axe-report.json").write_text(json.dumps(self.report, indent=2))
        assert not self.lines, f"{len(self.lines)} serious or critical WCAG 2 A/AA violations:\n" + "\n".join(
            self.lines
        )


def test_axe_finds_what_it_should_on_a_page_made_to_fail(chromium):
    """The check itself: on a page with an unlabelled field, a nameless button and low contrast, axe speaks up."""
    context = chromium.new_context()
    page = context.new_page()
    page.set_content(
        '<!doctype html><html lang="en"><head><title>bad</title></head><body><main>'
        '<input type="text"><button></button><p style="color:#bbb;background:#fff">faint</p></main></body></html>'
    )
    rules = {v["rule"] for v in axe_violations(page)}
    context.close()
    assert {"label", "button-name", "color-contrast"} <= rules, rules


def promotable():
    """A complete bucket copy and a location it may be promoted to, as the promotion service judges them."""
    from catalog.models import CheckpointCopy
    from ckptfleet.errors import DomainError
    from fleet.models import StorageLocation
    from promotion.services import promotion_plan

    copies = CheckpointCopy.objects.filter(location__bucket__isnull=False, gone_at=None).select_related(
        "checkpoint", "location"
    )
    for copy in copies.order_by("pk"):
        for target in StorageLocation.objects.order_by("pk"):
            try:
                promotion_plan(copy=copy, target_location=target)
            except DomainError:
                continue
            return copy, target
    raise AssertionError("the demo has no copy that may be promoted anywhere")


def test_every_page_passes_axe_as_the_role_it_is_for(demo, person, django_user_model, tmp_path_factory):
    from actions.models import DeletionJob
    from catalog.models import ShardFile
    from fleet.models import Bucket, Host
    from retention.services import policy_create

    checkpoint = checkpoint_of(RUN, 300)
    run = checkpoint.run
    copy = checkpoint.copies.order_by("pk").first()
    assert ShardFile.objects.filter(copy=copy).exists()
    host = Host.objects.order_by("name").first()
    host_inventory = host.locations.exclude(last_inventory=None).order_by("pk").first().last_inventory
    bucket = Bucket.objects.select_related("location__last_inventory").order_by("pk").first()
    assert bucket is not None and bucket.location.last_inventory is not None, "the demo has no scanned bucket"
    policy = policy_create(actor=Actor.command(label="tests"), name="keep five", run=run, reason="accessibility")
    deletion = DeletionJob.objects.order_by("pk").first()
    assert deletion is not None, "the demo scheduled no deletion"
    audit = Audit(artefact_dir(tmp_path_factory))

    # Signed out: the login page.
    nobody = person("demo")
    audit.check(nobody, "/accounts/login/?next=/")

    operator = person("demo-operator")
    operator.sign_in("/")
    for path in (
        "/",
        "/runs/",
        f"/runs/{run.pk}/",
        f"/checkpoints/{checkpoint.pk}/",
        f"/copies/{copy.pk}/files/",
        "/queue/copies/",
        "/fleet/",
        f"/fleet/?host={host.pk}",
        f"/fleet/hosts/{host.pk}/",
        f"/fleet/locations/{host_inventory.location_id}/",
        f"/fleet/locations/{bucket.location.pk}/",
        f"/runs/?host={host.pk}&tier=nvme",
        f"/fleet/inventories/{host_inventory.pk}/",
        f"/fleet/inventories/{bucket.location.last_inventory.pk}/",
        "/placement/",
        "/orphans/",
        "/recovery/",
        f"/recovery/?q={RUN}",
        f"/recovery/{run.pk}/",
        "/jobs/",
        "/actions/deletions/",
        "/promotions/",
        "/retention/",
        f"/retention/?run={run.pk}",
        "/retention/tiering/",
        "/retention/policies/",
        f"/retention/policies/{policy.pk}/",
        f"/runs/{run.pk}999/",
    ):
        audit.check(operator, path, status=404 if path.endswith("999/") else 200)
    # A promotion's preview: a bucket copy the demo may pull to a host (promotion_plan only checks).
    source, target = promotable()
    audit.check(operator, f"/checkpoints/{source.checkpoint_id}/promote/?copy={source.pk}&target={target.pk}")
    # The deletion the demo scheduled, as the approver who may approve it.
    approver = person("demo-approver")
    approver.sign_in("/actions/deletions/")
    audit.check(approver, "/actions/deletions/")
    audit.check(approver, f"/actions/deletions/{deletion.pk}/")
    audit.check(approver, "/approvals/")

    finance = person("demo-finance")
    finance.sign_in("/spend/")
    for path in ("/spend/", "/spend/runs/", f"/spend/runs/{run.pk}/", "/spend/prices/", "/spend/report/"):
        audit.check(finance, path)

    admin = person("demo")
    admin.sign_in("/audit/")
    audit.check(admin, "/audit/")
    # The API tokens page with tokens of the admin's own and of another person's (which an admin may revoke).
    for username, label in (("demo", "nightly spend export"), ("demo-finance", "month-end report")):
        api_token_create(
            user=django_user_model.objects.get(username=username), label=label, actor=Actor.command(label="tests")
        )
    audit.check(admin, "/account/tokens/")

    # A viewer reads the printable report (a read, as the spend page is); refused: a person with no role at all.
    viewer = person("demo-viewer")
    viewer.sign_in("/")
    audit.check(viewer, "/spend/report/")
    django_user_model.objects.create_user(username="newcomer", password=demo.password)
    newcomer = person("newcomer")
    newcomer.allow("/", 403)
    newcomer.sign_in("/")
    newcomer.settle("no role", status=403)
    audit.check(newcomer, "", label="the no-role page")

    assert len(audit.checked) >= 35
    audit.assert_clean()


# --- the keyboard ------------------------------------------------------------------------------------

FOCUS = """() => {
  const el = document.activeElement;
  const style = getComputedStyle(el);
  const box = el.getBoundingClientRect();
  return {
    tag: el.tagName, text: (el.innerText || el.value || "").trim(), href: el.getAttribute("href"),
    label: el.labels && el.labels.length ? el.labels[0].innerText.trim() : "",
    outline: style.outlineStyle !== "none" && parseFloat(style.outlineWidth) >= 2,
    shadow: style.boxShadow !== "none",
    inView: box.width > 0 && box.height > 0 && box.top >= 0 && box.bottom <= window.innerHeight,
    inNav: !!el.closest("nav[aria-label=Main]"), inMain: !!el.closest("main"),
  };
}"""


def focused(page) -> dict:
    return page.evaluate(FOCUS)


def assert_visibly_focused(state: dict) -> None:
    assert state["inView"], f"the focused element is off screen: {state}"
    assert state["outline"] or state["shadow"], f"the focused element shows no focus ring: {state}"


def test_the_keyboard_goes_skip_link_first_then_the_navigation_and_the_search(demo, person):
    who = person("demo-operator")
    who.sign_in("/")
    who.settle("overview")
    page = who.page

    page.keyboard.press("Tab")
    first = focused(page)
    assert first["tag"] == "A" and first["text"] == "Skip to content" and first["href"] == "#main", first
    assert_visibly_focused(first)
    who.shot("skip link focused")

    seen = []
    for _ in range(4):  # the brand, then the main navigation
        page.keyboard.press("Tab")
        state = focused(page)
        seen.append(state)
        if state["inNav"]:
            break
    assert state["inNav"] and state["text"] == "Runs", seen
    assert_visibly_focused(state)
    who.shot("navigation focused")

    # The skip link takes the keyboard past the header, into the page's own content.
    for _ in range(len(seen) + 1):
        page.keyboard.press("Shift+Tab")
        if focused(page)["text"] == "Skip to content":
            break
    page.keyboard.press("Enter")
    page.keyboard.press("Tab")
    assert focused(page)["inMain"], focused(page)

    # The recovery page puts the keyboard in its search at once (autofocus): the run's name, then Enter.
    who.nav("Recover")
    state = focused(page)
    assert state["tag"] == "INPUT" and state["inMain"] and state["label"] == "Run or team", state
    assert_visibly_focused(state)
    page.keyboard.press("Shift+Tab")  # and back up: the skip link and the navigation are before it
    assert focused(page)["inNav"] or focused(page)["text"] in ("Sign out", "Skip to content"), focused(page)
    who.shot("recovery search focused")
    who.assert_clean()


# --- a phone's width ---------------------------------------------------------------------------------

OVERFLOW = """() => {
  const width = document.documentElement.clientWidth;
  const wide = [];
  for (const el of document.querySelectorAll("body *")) {
    const box = el.getBoundingClientRect();
    if (box.right > width + 1 && !el.closest(".table-wrap, pre")) {
      const cls = typeof el.className === "string" ? el.className.trim().split(/\\s+/).join(".") : "";
      wide.push(el.tagName.toLowerCase() + (el.id ? "#" + el.id : "") + (cls ? "." + cls : ""));
    }
  }
  return {scroll: document.documentElement.scrollWidth, width, wide: wide.slice(0, 8)};
}"""


def test_at_390_pixels_wide_the_main_pages_do_not_scroll_sideways(demo, person):
    run = checkpoint_of(RUN, 300).run
    who = person("demo-operator")
    who.page.set_viewport_size({"width": 390, "height": 844})
    who.sign_in("/")
    problems = []
    for path in ("/", "/runs/", f"/recovery/{run.pk}/"):
        who.visit(path, name=f"390px {path}")
        state = who.page.evaluate(OVERFLOW)
        if state["scroll"] > state["width"]:
            problems.append(f"{path}: the page is {state['scroll']} px wide at {state['width']} px: {state['wide']}")
        # What scrolls sideways inside the page (a wide table) must still be reachable with the keyboard.
        for v in axe_violations(who.page):
            problems.append(f"{path}: [{v['impact']}] {v['rule']} at {v['target']!r}: {v['help']}")
    assert not problems, "at 390 px wide:\n" + "\n".join(problems)


# --- the spend report on paper -----------------------------------------------------------------------


def test_the_spend_report_prints_without_navigation_a_section_per_page(demo, person, tmp_path_factory):
    who = person("demo-finance")
    who.sign_in("/spend/")
    who.settle("spend")
    page = who.page
    who.click_and_settle(page.get_by_role("link", name=re.compile(r"^Printable report of ")), "report")
    assert re.search(r"/spend/report/\?month=\d{4}-\d{2}$", page.url), page.url
    assert page.get_by_role("heading", name=re.compile(r"^Storage spend report")).is_visible()
    assert page.get_by_role("button", name="Print").is_visible()
    assert page.get_by_text(re.compile(r"Generated")).first.is_visible()
    assert re.search(r"\d[\d,]*\.\d{2} USD", page.locator("main").inner_text())
    sections = page.locator(".report-section")
    assert sections.count() == 8

    page.emulate_media(media="print")
    for hidden in (".site-header", ".skip-link", ".site-footer", ".period-nav", ".breadcrumbs"):
        assert page.locator(hidden).first.is_hidden(), hidden
    assert page.get_by_role("button", name="Print").is_hidden()
    breaks = page.evaluate(
        "() => [...document.querySelectorAll('.report-section')].map((s) => getComputedStyle(s).breakBefore)"
    )
    assert breaks == ["auto"] + ["page"] * 7, breaks
    assert page.locator("#by-team table").is_visible()
    who.shot("spend report printed")
    shots = artefact_dir(tmp_path_factory)
    pdf = shots / "spend-report.pdf"
    page.pdf(path=str(pdf), format="A4", landscape=True, print_background=True)
    body = pdf.read_bytes()
    assert body.startswith(b"%PDF")
    pages = max(int(n) for n in re.findall(rb"/Count (\d+)", body))  # the page tree's root counts every page
    assert pages >= 8, f"{pages} pages for 8 sections, each on a page of its own"
    page.emulate_media(media="screen")
    who.assert_clean()
