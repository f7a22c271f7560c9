"""An operator acts on two rows of a copy queue at once in Chromium: select, preview, confirm, read the result."""

from __future__ import annotations

import pytest

from actions.models import Pin
from audit.models import AuditEvent
from catalog.choices import CopyState
from catalog.models import CheckpointCopy
from tests.actions.conftest import build_fleet, make_person
from tests.browser.visitor import inject_axe
from tests.helpers.browser import shot

pytestmark = pytest.mark.django_db(transaction=True)

# axe-core as the accessibility tests vendor it (tests/browser/test_accessibility.py); these pages exist only
# for an operator with rows selected, which the site-wide check does not reach.
RUN_AXE = """async () => (await window.axe.run(document, {
  runOnly: {type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa"]},
  resultTypes: ["violations"],
})).violations.filter((v) => ["serious", "critical"].includes(v.impact)).map((v) => v.id + ": " + v.help)"""


def serious_axe_violations(page) -> list[str]:
    inject_axe(page)
    return page.evaluate(RUN_AXE)


def test_an_operator_pins_two_checkpoints_from_the_copy_queue(live_server, browser_page):
    fleet = build_fleet()
    CheckpointCopy.objects.filter(location=fleet.nvme).update(state=CopyState.PARTIAL)
    make_person("olga", "operator")
    page = browser_page

    page.goto(f"{live_server.url}/queue/copies/?kind=partial")
    page.get_by_label("Username").fill("olga")
    page.get_by_label("Password").fill("a-long-password-1")
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_selector("text=Partial copies")

    # "Select all" is there with JavaScript, and selects every row of the page; unticking it clears them.
    select_all = page.get_by_label("Select all on this page")
    select_all.check()
    assert page.get_by_text("3 selected").is_visible()
    select_all.uncheck()

    nvme = fleet.nvme.name
    page.get_by_label(f"Select vision/vit-huge step 100 at {nvme}").check()
    page.get_by_label(f"Select vision/vit-huge step 300 at {nvme}").check()
    assert page.get_by_text("2 selected").is_visible()
    shot(page, "bulk-queue")
    assert serious_axe_violations(page) == []
    page.get_by_label("With the selected").select_option("pin")
    page.get_by_role("button", name="Preview").click()

    page.wait_for_selector("text=Pin 2 checkpoints?")
    assert page.get_by_text("What would be done").is_visible()
    assert not Pin.objects.exists()  # the preview changes nothing
    shot(page, "bulk-preview")
    assert serious_axe_violations(page) == []

    page.get_by_label("Reason").fill("baselines for the paper")
    page.get_by_role("button", name="Confirm: pin 2 checkpoints").click()
    page.wait_for_selector("text=Pin: 2 done, 0 refused")
    assert page.get_by_role("link", name="vision/vit-huge step 100").is_visible()
    assert page.get_by_role("link", name="vision/vit-huge step 300").is_visible()
    shot(page, "bulk-result")
    assert serious_axe_violations(page) == []

    assert sorted(Pin.objects.values_list("checkpoint__step", flat=True)) == [100, 300]
    assert AuditEvent.objects.filter(action="checkpoint.pin").count() == 2
    page.get_by_role("link", name="Back to the list").click()
    page.wait_for_selector("text=Partial copies")

    # The run page's timeline shows the pins; the placement flag list offers the same checkboxes.
    page.get_by_role("link", name="vision/vit-huge").first.click()
    page.wait_for_selector("text=Checkpoints by step")
    assert page.locator(f"#checkpoint-{fleet.checkpoints[100].pk}").get_by_text("Pinned").is_visible()
    shot(page, "bulk-run-timeline")
    assert serious_axe_violations(page) == []
    page.goto(f"{live_server.url}/placement/?flag=newest_on_one_host")
    assert page.get_by_label("Select vision/vit-huge step 300").is_visible()
    assert serious_axe_violations(page) == []
    assert page.console_errors == []
