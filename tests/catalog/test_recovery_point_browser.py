"""The fleet's recovery points in Chromium: runs over their objective, worst first, with units; an operator
sets a run's objective from its recovery page and the run leaves the list; the run page shows its lineage."""

from __future__ import annotations

import pytest

from catalog.models import Checkpoint, Run
from tests.catalog.test_lifecycle_browser import PASSWORD, sign_in
from tests.catalog.test_recovery_point import fresh
from tests.conftest import give_roles

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def fleet(make_host, push, django_user_model):
    give_roles(django_user_model.objects.create_user(username="olga", password=PASSWORD), "operator")
    llama = fresh(100, "llama-7b", ranks=8, age_h=30) + fresh(200, "llama-7b", ranks=8, missing=1, age_h=1)
    push(make_host(), llama + fresh(10, "llama-8b", age_h=50) + fresh(20, "llama-sft", age_h=2))
    sft = Run.objects.get(name="llama-sft")
    Run.objects.filter(pk=sft.pk).update(
        parent_checkpoint=Checkpoint.objects.get(run__name="llama-7b", step=100),
        parent_ref="llm/llama-7b@100",
        parent_source="operator",
    )
    return {r.name: r for r in Run.objects.all()}


def test_the_fleet_page_lists_runs_over_their_objective_worst_first(live_server, browser_page, fleet):
    from tests.helpers.browser import shot

    page = browser_page
    url = f"{live_server.url}/recovery/points/"
    sign_in(page, url, "olga")
    rows = page.locator("#recovery-points tbody tr")
    assert rows.count() == 2
    first, second = rows.nth(0).inner_text(), rows.nth(1).inner_text()
    # llama-7b: 30 h x 8 GPUs = 240 GPU-h; llama-8b: 50 h x 2 GPUs = 100 GPU-h; llama-sft is within 24 h.
    assert "llm/llama-7b" in first and "240 GPU-h" in first and "30.0 h" in first and "100 steps" in first
    assert "8 GPUs (world size)" in first and "24.0 h (default)" in first
    assert "llm/llama-8b" in second and "100 GPU-h" in second
    shot(page, "recovery-points")

    # From the row to the run's recovery page: a longer objective takes it off the list.
    page.get_by_role("link", name="llm/llama-8b").click()
    page.wait_for_selector("#recovery-point")
    assert "over its objective" in page.locator("#recovery-point").inner_text()
    page.get_by_label("This run's objective, hours").fill("72")
    page.get_by_role("button", name="Set objective").click()
    page.wait_for_selector("text=llm/llama-8b: objective set to 72 h.")
    assert "within its objective" in page.locator("#recovery-point").inner_text()
    shot(page, "recovery-point-run")
    page.goto(url)
    assert page.locator("#recovery-points tbody tr").count() == 1

    # A bad objective is refused with a message; nothing changes.
    page.goto(f"{live_server.url}/recovery/{fleet['llama-7b'].pk}/")
    page.get_by_label("This run's objective, hours").fill("0")
    page.get_by_role("button", name="Set objective").click()
    page.wait_for_selector("text=Nothing was changed: the objective must be above 0")
    assert Run.objects.get(name="llama-7b").rpo_hours is None

    # The parent's run page names the fine-tune started from it.
    page.goto(f"{live_server.url}/runs/{fleet['llama-7b'].pk}/")
    assert "llm/llama-sft" in page.locator("#lineage").inner_text()

    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(url)
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    shot(page, "recovery-points-phone")
    assert not page.console_errors, page.console_errors
