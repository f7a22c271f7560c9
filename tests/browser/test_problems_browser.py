"""The problems list in Chromium on the seeded demo, for a viewer, an operator and finance, on a laptop and a phone:
every kind is there, filters and sort are links a person can follow, the CSV downloads, nothing scrolls sideways."""

from __future__ import annotations

import pytest

from tests.browser.test_accessibility import OVERFLOW, axe_violations

pytestmark = pytest.mark.django_db(transaction=True)

SIZES = {"laptop": {"width": 1440, "height": 900}, "phone": {"width": 390, "height": 844}}


@pytest.mark.parametrize("username", ["demo-viewer", "demo-operator", "demo-finance"])
def test_the_problems_list_reads_and_fits_for_each_role_on_a_laptop_and_a_phone(demo, person, username):
    who = person(username)
    who.sign_in("/problems/")
    problems = []
    for size, viewport in SIZES.items():
        who.page.set_viewport_size(viewport)
        for path in ("/problems/", "/problems/?kind=corrupt", "/problems/?sort=-cost&age=0", "/problems/?kind=tape"):
            status = 400 if "tape" in path else 200
            who.visit(path, status=status, name=f"{size} {path}")
            state = who.page.evaluate(OVERFLOW)
            fits = who.page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
            if not fits or state["scroll"] > state["width"]:
                problems.append(f"{size} {path}: {state['scroll']} px wide at {state['width']} px: {state['wide']}")
            for v in axe_violations(who.page):
                problems.append(f"{size} {path}: [{v['impact']}] {v['rule']} at {v['target']!r}: {v['help']}")
    assert not problems, "\n".join(problems)

    who.page.set_viewport_size(SIZES["laptop"])
    who.visit("/problems/", name="every kind")
    totals = who.page.locator("dl.stats").inner_text()
    for label in ("Partial", "Corrupt", "Disputed", "Unverified", "Under-replicated", "Misplaced", "Orphaned"):
        assert label.upper() in totals.upper(), totals
    # The kind filter by its select, then the size column's header sorts largest first.
    who.page.select_option("#problems-kind", "misplaced")
    who.click_and_settle(who.page.get_by_role("button", name="Show"), "misplaced")
    who.page.wait_for_url("**/problems/?*kind=misplaced*")
    assert who.page.locator("tbody tr").count() >= 1
    assert "Move off NVMe" in who.page.locator("tbody").inner_text()
    who.click_and_settle(who.page.get_by_role("link", name="Size", exact=True), "by size")
    who.page.wait_for_url("**sort=-bytes*")
    name, rows = who.download_csv(who.page.get_by_role("link", name="Export CSV"))
    assert name.startswith("problems-") and name.endswith(".csv")
    assert rows and {r["kind"] for r in rows} == {"misplaced"}
    sizes = [int(r["bytes"]) for r in rows]
    assert sizes == sorted(sizes, reverse=True)
    assert all(len(r["cost_per_month"].split(".")[1]) == 4 for r in rows if r["cost_per_month"])
    who.assert_clean()
