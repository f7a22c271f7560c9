"""Layouts that fit: at 1440x900 and at 390x844 no page is wider than the window, and the navigation fits.

Every page the main navigation links to (read from the navigation itself, "More" included, so a link added there
is checked too) and the detail pages of ``DETAIL_PAGES`` are opened by a demo person at both sizes. On each:

- the document is no wider than the window, and no visible element reaches past its right edge unless it sits in
  a container that scrolls or clips sideways (a wide table scrolls inside its card);
- at 1440 px the top-level navigation items share one row; at 390 px they fold into the "Menu" disclosure, which
  opens with the keyboard and fits the window too.

A screenshot of each page at each size is kept in the artefact folder (``visitor.artefact_dir``).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.conftest import in_the_sqlite_pass_only
from tests.helpers.browser import checkpoint_of

pytestmark = [
    pytest.mark.services,
    pytest.mark.django_db(transaction=True),
    in_the_sqlite_pass_only("the layout checks"),
]

WIDE = {"width": 1440, "height": 900}
PHONE = {"width": 390, "height": 844}


def _run(name: str) -> int:
    from catalog.models import Run

    return Run.objects.get(name=name).pk


def _deletion() -> int:
    from actions.models import DeletionJob

    return DeletionJob.objects.order_by("pk").values_list("pk", flat=True)[0]


def _promotion() -> int:
    """A promotion of llama-tiny step 100 from a bucket to a GPU host: its page lists the files the host's agent
    pulls, with their long keys. (The seeded demo has buckets only beside a local S3 endpoint; this one is a row.)"""
    from django.contrib.auth import get_user_model

    from audit.actor import Actor
    from audit.choices import EventSource
    from catalog.choices import Verification
    from fleet.models import Bucket, StorageLocation
    from promotion.services import promote
    from tests.factories import CheckpointCopyFactory, StorageLocationFactory

    checkpoint = checkpoint_of("llama-tiny", 100)
    location = StorageLocationFactory(bucket=True, name="s3:ckpt-layout-eu")
    Bucket.objects.create(location=location, bucket_name="ckpt-layout-eu", region_name="eu-west-1")
    copy = CheckpointCopyFactory(
        checkpoint=checkpoint,
        location=location,
        path="llm/llama-tiny/checkpoint-100-with-a-rather-long-folder-name-as-real-saves-have",
        files=12,
        size=3 * 2**30,
        shards=True,
        verification=Verification.VERIFIED,
    )
    operator = get_user_model().objects.get(username="demo-operator")
    job = promote(
        copy=copy,
        target_location=StorageLocation.objects.get(name="gpu-b07:nvme0"),
        actor=Actor.person(operator, EventSource.UI),
        reason="resume on gpu-b07 (layout test)",
    )
    return job.pk


# The pages besides the navigation's own, one place for them all: (name, how to find its path in the seeded demo).
# Add a page here (a host, a bucket, API tokens, problems) and it is checked at both sizes.
DETAIL_PAGES: list[tuple[str, Callable[[], str]]] = [
    ("overview (the brand's link)", lambda: "/"),
    ("run page", lambda: f"/runs/{_run('llama3-70b')}/"),
    ("run page with broken copies", lambda: f"/runs/{_run('llama-tiny')}/"),
    ("checkpoint page", lambda: f"/checkpoints/{checkpoint_of('llama-tiny', 200).pk}/"),
    ("held checkpoint page", lambda: f"/checkpoints/{checkpoint_of('resnet-tiny', 200).pk}/"),
    ("deletion page", lambda: f"/actions/deletions/{_deletion()}/"),
    ("promotion page", lambda: f"/promotions/{_promotion()}/"),
    ("audit trail", lambda: "/audit/"),
    ("recovery page", lambda: f"/recovery/{_run('llama3-70b')}/"),
    ("spend of one team", lambda: "/spend/?team=1"),
    ("host page", lambda: f"/fleet/hosts/{_host('gpu-c12')}/"),
    ("location page of a host", lambda: f"/fleet/locations/{_location('gpu-a01:nvme0')}/"),
    ("location page of a parallel file system", lambda: f"/fleet/locations/{_location('lustre-gw1:lustre')}/"),
    ("problems list", lambda: "/problems/"),
    ("wrong resume pointers", lambda: "/problems/?kind=pointer"),
    ("API tokens", lambda: "/account/tokens/"),
    ("recovery points", lambda: "/recovery/points/"),
    ("jobs", lambda: "/jobs/"),
]


def _host(name: str) -> int:
    from fleet.models import Host

    return Host.objects.get(name=name).pk


def _location(name: str) -> int:
    from fleet.models import StorageLocation

    return StorageLocation.objects.get(name=name).pk


# What reaches past the window's right edge outside anything that scrolls or clips sideways; and the navigation.
MEASURE = """() => {
  const width = window.innerWidth;
  const clipped = (el) => {
    for (let p = el.parentElement; p && p !== document.documentElement; p = p.parentElement) {
      if (["auto", "scroll", "hidden", "clip"].includes(getComputedStyle(p).overflowX)) return true;
    }
    return false;
  };
  const wide = [];
  for (const el of document.querySelectorAll("body *")) {
    if (!el.checkVisibility()) continue;
    const box = el.getBoundingClientRect();
    if (box.width === 0 || box.right <= width + 1 || clipped(el)) continue;
    const cls = typeof el.className === "string" ? el.className.trim().split(/\\s+/).join(".") : "";
    const name = el.tagName.toLowerCase() + (el.id ? "#" + el.id : "") + (cls ? "." + cls : "");
    wide.push(`${name} (right edge ${Math.round(box.right)})`);
  }
  const items = [...document.querySelectorAll("nav[aria-label=Main] .nav__list > li")]
    .filter((li) => li.checkVisibility());
  return {
    scroll: document.documentElement.scrollWidth,
    width,
    wide: wide.slice(0, 8),
    navTops: [...new Set(items.map((li) => li.offsetTop))],
    navItems: items.length,
    hasNav: document.querySelector("nav[aria-label=Main]") !== null,
  };
}"""

NAV_LINKS = """() => [...document.querySelectorAll("nav[aria-label=Main] a[href]")]
  .map((a) => new URL(a.href).pathname)"""


def check(who, path: str, size: dict, problems: list[str]) -> dict:
    state = who.page.evaluate(MEASURE)
    where = f"{path} at {size['width']}x{size['height']}"
    if state["scroll"] > state["width"]:
        problems.append(f"{where}: the page is {state['scroll']} px wide: {state['wide']}")
    elif state["wide"]:
        problems.append(f"{where}: past the right edge: {state['wide']}")
    return state


def test_every_page_fits_1440_and_390_pixels_and_the_navigation_fits_too(demo, person):
    who = person("demo-operator")
    page = who.page
    page.set_viewport_size(WIDE)
    who.sign_in("/")
    nav_paths = list(dict.fromkeys(p for p in page.evaluate(NAV_LINKS) if not p.startswith("/admin/")))
    assert len(nav_paths) >= 10, nav_paths
    paths = [*nav_paths, *(find() for _, find in DETAIL_PAGES)]
    problems: list[str] = []

    for size in (WIDE, PHONE):
        page.set_viewport_size(size)
        for path in paths:
            who.visit(path, name=f"{size['width']}px {path}")
            state = check(who, path, size, problems)
            if not state["hasNav"]:  # a page of its own, as the API docs (Swagger UI)
                continue
            if size is WIDE:
                if len(state["navTops"]) != 1:
                    problems.append(f"{path}: the navigation takes {len(state['navTops'])} rows at 1440 px")
                # The last top-level item ends before the person's name and Sign out begin: nothing overlaps.
                gap = page.evaluate(
                    "(() => { const items = document.querySelectorAll('nav[aria-label=Main] .nav__list > li');"
                    " const user = document.querySelector('.user');"
                    " return user.getBoundingClientRect().left - items[items.length - 1].getBoundingClientRect().right;"
                    " })()"
                )
                if gap < 0:
                    problems.append(f"{path}: the navigation runs {-gap:.0f} px into the signed-in person's name")
            elif state["navItems"]:
                problems.append(f"{path}: {state['navItems']} navigation items show at 390 px with the menu closed")
    assert not problems, "layouts that do not fit:\n" + "\n".join(problems)


# The pages other people see differently: finance's exports and report, the approver's inbox and its count.
OTHERS = {"demo-finance": ["/spend/", "/spend/report/"], "demo-approver": ["/", "/approvals/"]}


def test_the_pages_of_finance_and_the_approver_fit_too_and_the_approver_sees_what_waits(demo, person, settings):
    from django.contrib.auth import get_user_model

    from actions.services import schedule_deletion
    from audit.actor import Actor
    from audit.choices import EventSource

    # A deletion that needs a second person (every deletion does, over one byte): the approver's count shows it.
    settings.DELETION_APPROVAL_BYTES = 1
    operator = get_user_model().objects.get(username="demo-operator")
    from catalog.models import Checkpoint

    schedule_deletion(
        checkpoint=Checkpoint.objects.filter(run__name="vit-jax").order_by("step").first(),
        reason="superseded (layout test)",
        actor=Actor.person(operator, EventSource.UI),
    )
    problems: list[str] = []
    for username, paths in OTHERS.items():
        who = person(username)
        who.page.set_viewport_size(WIDE)
        who.sign_in("/")
        for size in (WIDE, PHONE):
            who.page.set_viewport_size(size)
            for path in paths:
                who.visit(path, name=f"{size['width']}px {path}")
                state = check(who, path, size, problems)
                if size is WIDE and len(state["navTops"]) != 1:
                    problems.append(f"{username} at {path}: the navigation takes {len(state['navTops'])} rows")
        if username == "demo-approver":
            who.page.set_viewport_size(WIDE)
            who.visit("/runs/", name="approver runs")
            count = who.page.locator("nav[aria-label=Main] .nav__count")
            # What awaits this approver's decision (dashboard.inbox: not what they asked for themselves).
            assert count.is_visible() and count.inner_text().split()[0].isdigit(), count.all_inner_texts()
    assert not problems, "layouts that do not fit:\n" + "\n".join(problems)


def test_on_a_phone_the_menu_opens_from_the_keyboard_and_the_runs_list_is_near_the_top(demo, person):
    who = person("demo-viewer")
    page = who.page
    page.set_viewport_size(PHONE)
    who.sign_in("/runs/")
    who.visit("/runs/", name="phone runs")

    # The filters fold under "Filters": the first run is on the first screen.
    assert page.locator("details.filters-fold").get_attribute("open") is None
    assert not page.get_by_label("Run or team").is_visible()
    first_row = page.locator("table tbody tr").first.bounding_box()
    assert first_row is not None and first_row["y"] < PHONE["height"] / 2, first_row
    page.get_by_text("Filters", exact=True).click()
    assert page.get_by_label("Run or team").is_visible()

    # The menu: one button; Tab to it, Enter opens it, the links (those under "More" too) fit the window.
    nav = page.get_by_role("navigation", name="Main")
    assert not nav.get_by_role("link", name="Runs", exact=True).is_visible()
    toggle = page.locator("summary.site-menu__toggle")
    toggle.focus()
    page.keyboard.press("Enter")
    for name in ("Runs", "Recover", "Spend", "Audit", "Orphans", "Placement"):
        link = nav.get_by_role("link", name=name, exact=True)
        assert link.is_visible(), name
        box = link.bounding_box()
        assert box is not None and box["x"] + box["width"] <= PHONE["width"], (name, box)
    problems: list[str] = []
    check(who, "/runs/ (menu open)", PHONE, problems)
    assert not problems, problems
    who.shot("phone menu open")
    who.click_and_settle(nav.get_by_role("link", name="Spend", exact=True), "phone spend from the menu")
    assert page.url.endswith("/spend/")
    assert not nav.get_by_role("link", name="Runs", exact=True).is_visible()  # closed again on the new page
    who.assert_clean()
