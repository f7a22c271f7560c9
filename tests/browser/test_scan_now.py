""" "Scan now" on the fleet page, in real Chromium against the live app and moto's S3 server over HTTP.

The bucket is reached through a proxy in front of moto (tests/fleet/test_scan_faults.py) that holds
the listing of incomplete multipart uploads, the scan's last request, for a moment: long enough for
the page to show the scan running with the objects it has counted, whatever the machine's speed.
Every text the button's status line showed is recorded in the page (a MutationObserver), so the
test can assert the sequence a person saw, not just the end.
"""

from __future__ import annotations

import re

import pytest

from fleet.choices import InventoryStatus
from fleet.models import Inventory
from tests.conftest import give_roles
from tests.helpers.browser import shot
from tests.helpers.faults import FaultyEndpoint

pytestmark = [pytest.mark.services]

PASSWORD = "a-long-password-1"
# Each text the status lines show, in order, kept across the reload in sessionStorage.
RECORD_STATUS = """
(() => {
  const key = "scan-status-log";
  const log = JSON.parse(sessionStorage.getItem(key) || "[]");
  window.scanStatusLog = log;
  const seen = new WeakMap();
  const watch = () => {
    document.querySelectorAll("[id^=scan-status-]").forEach((el) => {
      if (seen.has(el)) return;
      seen.set(el, true);
      new MutationObserver(() => {
        const text = el.textContent.trim();
        if (text && log[log.length - 1] !== text) {
          log.push(text);
          sessionStorage.setItem(key, JSON.stringify(log));
        }
      }).observe(el, { childList: true, characterData: true, subtree: true });
    });
  };
  document.addEventListener("DOMContentLoaded", watch);
})();
"""


def uploads_listing(method: str, path: str, query: dict) -> bool:
    return method == "GET" and "uploads" in query


@pytest.fixture
def slow_endpoint(moto_endpoint):
    endpoint = FaultyEndpoint(moto_endpoint)
    yield endpoint
    endpoint.close()


def sign_in(page, live_server, django_user_model) -> None:
    user = django_user_model.objects.create_user(username="ops", password=PASSWORD)
    give_roles(user, "operator")
    page.add_init_script(RECORD_STATUS)
    page.goto(f"{live_server.url}/fleet/")
    page.get_by_label("Username").fill("ops")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{live_server.url}/fleet/")


def scan_and_watch(page, location_pk: int) -> list[str]:
    row = page.locator(f"#location-{location_pk}")
    row.get_by_role("button", name="Scan now").click()
    # The page reloads once the scan is applied: the reloaded row links to the scan as its last one.
    page.wait_for_selector(f"#location-{location_pk} a[href^='/fleet/inventories/']", timeout=60_000)
    page.wait_for_load_state("load")
    return page.evaluate("JSON.parse(sessionStorage.getItem('scan-status-log') || '[]')")


def register(s3, endpoint_url: str):
    name = s3.bucket()
    s3.upload_tree(name, "nvme-a", prefix="fleet/")
    return s3.register(name, prefix="fleet/", endpoint_url=endpoint_url, scan_every_minutes=0)


@pytest.mark.django_db(transaction=True)
def test_scan_now_shows_progress_then_the_finished_scan(
    live_server, browser_page, s3, slow_endpoint, django_user_model
):
    """Without a worker (the embedded default) the scan runs in the request that starts it."""
    bucket = register(s3, slow_endpoint.url)
    slow_endpoint.fail(uploads_listing, times=1, delay=1.5)  # then botocore retries and it answers
    page = browser_page
    sign_in(page, live_server, django_user_model)
    assert page.get_by_text("Never scanned").is_visible()

    log = scan_and_watch(page, bucket.location.pk)

    inventory = Inventory.objects.get(location=bucket.location)
    assert inventory.status == InventoryStatus.APPLIED, inventory.error
    assert log[0] == "Starting a scan…"
    assert re.fullmatch(rf"Scan #{inventory.pk} applied: 9 objects, [\d.]+ KiB\. Reloading…", log[-1]), log
    row = page.locator(f"#location-{bucket.location.pk}")
    assert row.get_by_role("link", name=f"#{inventory.pk}").is_visible()
    assert row.get_by_text("9 objects").first.is_visible()
    assert "Object storage, standard" in row.inner_text()
    shot(page, "scan-now-applied")
    assert page.console_errors == []


@pytest.mark.django_db(transaction=True)
def test_scan_now_through_a_worker_shows_the_objects_counted_while_it_runs(
    live_server, browser_page, s3, slow_endpoint, celery_worker_process, django_user_model
):
    bucket = register(s3, slow_endpoint.url)
    fault = slow_endpoint.fail(uploads_listing, times=1, delay=3.0)
    page = browser_page
    sign_in(page, live_server, django_user_model)

    log = scan_and_watch(page, bucket.location.pk)

    inventory = Inventory.objects.get(location=bucket.location)
    assert inventory.status == InventoryStatus.APPLIED, inventory.error
    assert fault.served == 1
    assert log[0] == "Starting a scan…"
    assert any(re.fullmatch(rf"Scan #{inventory.pk} is running: 9 objects \([\d.]+ KiB\) so far…", t) for t in log), log
    assert log[-1].startswith(f"Scan #{inventory.pk} applied: 9 objects")
    shot(page, "scan-now-worker")
    assert page.console_errors == []


@pytest.mark.django_db(transaction=True)
def test_a_scan_that_fails_says_why_in_words(live_server, browser_page, s3, slow_endpoint, django_user_model):
    bucket = register(s3, slow_endpoint.url)
    slow_endpoint.fail(
        lambda method, path, query: "list-type" in query, status=403, code="AccessDenied", message="Access Denied"
    )
    page = browser_page
    sign_in(page, live_server, django_user_model)

    row = page.locator(f"#location-{bucket.location.pk}")
    row.get_by_role("button", name="Scan now").click()
    page.wait_for_selector("text=Scan failed", timeout=60_000)

    inventory = Inventory.objects.get(location=bucket.location)
    assert inventory.status == InventoryStatus.FAILED
    log = page.evaluate("JSON.parse(sessionStorage.getItem('scan-status-log') || '[]')")
    assert any(t.startswith(f"Scan #{inventory.pk} failed: ") and "AccessDenied: Access Denied" in t for t in log), log
    assert page.get_by_text("AccessDenied: Access Denied").first.is_visible()
    assert page.get_by_text("Nothing was applied or marked gone").first.is_visible()
    assert "Traceback" not in page.content()
    shot(page, "scan-now-failed")
    assert page.console_errors == []
