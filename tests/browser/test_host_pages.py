"""The host page and the bucket page in real Chromium, on the seeded demo with its buckets on moto's S3 server,
for a viewer, an operator and an admin, on a desktop (1440x900) and a phone (390x844): what each sees, what each
may do, and that nothing is wider than the window."""

from __future__ import annotations

import io
import re

import pytest
from django.core.management import call_command

from fleet.models import Host, StorageLocation
from tests.conftest import restore_default_prices
from tests.helpers.browser import Demo

pytestmark = pytest.mark.django_db(transaction=True)

SIZES = [(1440, 900), (390, 844)]
PEOPLE = [("demo-viewer", False), ("demo-operator", True), ("demo", True)]  # demo is the admin


@pytest.fixture
def demo(live_server, settings, tmp_path, s3) -> Demo:
    settings.VAR_DIR = tmp_path
    settings.S3_SECRETS_DIR = tmp_path / "s3-secrets"
    restore_default_prices()
    call_command("seed_demo", dir=str(tmp_path / "demo"), s3_endpoint=s3.url, stdout=io.StringIO())
    password = (tmp_path / "demo-password").read_text().strip()
    return Demo(url=live_server.url, password=password, trees=tmp_path / "demo")


def fits(visitor, width: int) -> None:
    page = visitor.page
    scroll, inner = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert inner == width and scroll <= inner, f"{page.url} at {width} px is {scroll} px wide"


def test_the_host_page_for_each_role_and_width(demo, person):
    host = Host.objects.get(name="gpu-a01")
    root = StorageLocation.objects.get(host=host)
    for username, may_act in PEOPLE:
        visitor = person(username)
        visitor.sign_in("/fleet/")
        page = visitor.page
        # From the fleet page, the host's name leads to its page.
        visitor.click_and_settle(page.get_by_role("link", name="gpu-a01", exact=True), "fleet to host")
        assert page.url.endswith(f"/fleet/hosts/{host.pk}/")
        for width, height in SIZES:
            page.set_viewport_size({"width": width, "height": height})
            visitor.visit(f"/fleet/hosts/{host.pk}/", name=f"host {width}")
            assert page.get_by_role("heading", name=re.compile("gpu-a01")).first.is_visible()
            assert "8 GPUs" in page.locator("section", has=page.get_by_role("heading", name="Identity")).inner_text()
            fill = page.locator(f"#location-{root.pk} .fill").inner_text()
            assert re.search(r"\d+\.\d% used: [\d.]+ TiB of 6\.98 TiB · [\d.]+ TiB free", fill), fill
            lives = page.locator("section", has=page.get_by_role("heading", name="What lives here"))
            assert lives.get_by_role("link", name="llama-tiny").first.is_visible()
            assert lives.get_by_role("link", name="llm").first.is_visible()
            assert page.get_by_role("heading", name="Spend this month").is_visible()
            assert (page.get_by_role("button", name="Mark down").count() == 1) is may_act
            fits(visitor, width)
        visitor.assert_clean()


def test_the_bucket_page_for_each_role_and_width(demo, person):
    bucket = StorageLocation.objects.get(name="s3:ckpt-demo-eu")
    for username, may_act in PEOPLE:
        visitor = person(username)
        visitor.sign_in("/fleet/")
        page = visitor.page
        visitor.click_and_settle(page.locator(f"#location-{bucket.pk}").get_by_role("link").first, "fleet to bucket")
        assert page.url.endswith(f"/fleet/locations/{bucket.pk}/")
        for width, height in SIZES:
            page.set_viewport_size({"width": width, "height": height})
            visitor.visit(f"/fleet/locations/{bucket.pk}/", name=f"bucket {width}")
            identity = page.locator("section", has=page.get_by_role("heading", name="Identity")).inner_text()
            assert "ckpt-demo-eu" in identity and "Versioning" in identity and "Object Lock" in identity
            assert re.search(r"Last scan\s+#\d+\s+✓?\s*Applied taken", page.locator("#health").inner_text())
            classes = page.get_by_role("table", name=re.compile("Bytes here now by tier"))
            assert classes.get_by_text("STANDARD").first.is_visible()
            lives = page.locator("section", has=page.get_by_role("heading", name="What lives here"))
            assert lives.get_by_role("link").count() >= 2
            assert (page.get_by_role("button", name="Scan now").count() == 1) is may_act
            fits(visitor, width)
        visitor.assert_clean()


def test_the_runs_list_filters_by_host_from_the_host_page(demo, person):
    host = Host.objects.get(name="gpu-b07")
    visitor = person("demo-viewer")
    visitor.sign_in(f"/fleet/hosts/{host.pk}/")
    page = visitor.page
    visitor.click_and_settle(page.get_by_role("link", name="These runs in the runs list"), "host's runs")
    assert f"host={host.pk}" in page.url
    assert page.get_by_role("link", name=re.compile("Remove the filter host gpu-b07")).is_visible()
    assert page.get_by_label("Host", exact=True).input_value() == str(host.pk)
    assert page.get_by_role("link", name="llama-tiny").count() == 0  # gpu-a01's run, not on gpu-b07
    for width, height in SIZES:
        page.set_viewport_size({"width": width, "height": height})
        fits(visitor, width)
