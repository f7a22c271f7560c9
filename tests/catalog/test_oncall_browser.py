"""The on-call engineer's pages in Chromium: the recovery page's ladder, resume pointers and GPUs-left check, a
host marked down from the page, and a lease taken from the checkpoint page. Real trees read by the real agent."""

from __future__ import annotations

import shutil

import pytest

from actions.models import Lease
from catalog.models import Checkpoint, Run
from dashboard.management.commands.seed_demo import DEMO_TREES as TREES
from fleet import agent
from fleet.models import Host
from fleet.services import gzip_lines
from tests.conftest import give_roles
from tests.helpers.browser import shot
from tests.helpers.ingest import post

pytestmark = pytest.mark.django_db(transaction=True)
PASSWORD = "a-long-password-1"


@pytest.fixture
def ds_run(tmp_path, make_host, client, django_user_model) -> Run:
    """speech/ds on gpu-a01 whose DeepSpeed `latest` was lost, and the same tree on gpu-b07."""
    give_roles(django_user_model.objects.create_user(username="olga", password=PASSWORD), "operator")
    for name in ("gpu-a01", "gpu-b07"):
        root = tmp_path / name
        shutil.copytree(TREES / "pfs/speech/ds-tiny", root / "speech/ds")
        if name == "gpu-a01":
            (root / "speech/ds/latest").unlink()
        kit = make_host(name=name, root=str(root))
        lines = list(agent.inventory_lines(str(root) + "/", kit.host.name, started_at="2026-11-21T23:00:00Z"))
        assert post(client, kit, gzip_lines(lines)).status_code == 202
    return Run.objects.get(name="ds")


def sign_in(page, url: str) -> None:
    page.goto(url)
    page.get_by_label("Username").fill("olga")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(url)


def test_the_recovery_page_answers_the_on_call_questions(live_server, browser_page, ds_run):
    page = browser_page
    url = f"{live_server.url}/recovery/{ds_run.pk}/"
    sign_in(page, url)
    ladder = page.locator("#ladder").inner_text()
    assert "step 200" in ladder.lower() and "100 steps" in ladder
    pointers = page.locator("#pointers").inner_text()
    assert "Pointer missing" in pointers and "Pointer OK" in pointers and "global_step200" in pointers
    page.get_by_label("GPUs left").fill("1")
    page.get_by_role("button", name="Check").click()
    page.wait_for_selector("text=Does not load on 1 GPU as it is")
    assert "ds_to_universal.py" in page.locator("#layout").inner_text()
    shot(page, "recovery-oncall")

    best = page.locator(".recovery-copy").first.inner_text()
    host = "gpu-a01" if "gpu-a01" in best.split("\n")[0] else "gpu-b07"
    page.get_by_placeholder(f"Why is {host} down?").fill("node failure INC-9")
    page.get_by_role("button", name=f"Mark {host} down").click()
    page.wait_for_selector(f"text={host} is marked down")
    assert "not offered: the host is down or silent" in page.locator("#unreachable").inner_text()
    assert host not in page.locator(".recovery-copy").first.inner_text().split("\n")[0]
    assert Host.objects.get(name=host).down_reason == "node failure INC-9"

    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(url)
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    shot(page, "recovery-oncall-phone")
    assert not page.console_errors, page.console_errors


def test_an_operator_takes_and_releases_a_lease_from_the_checkpoint_page(live_server, browser_page, ds_run):
    page = browser_page
    ckpt = Checkpoint.objects.get(run=ds_run, step=200)
    url = f"{live_server.url}/checkpoints/{ckpt.pk}/"
    sign_in(page, url)
    page.get_by_text("Take a lease (a job is using it)").click()
    page.get_by_label("Owner").fill("resume-job-7")
    page.get_by_label("For how many hours").fill("2")
    page.get_by_role("button", name="Take lease").click()
    page.wait_for_selector("text=In use: 1 live lease")
    assert Lease.objects.get().owner == "resume-job-7"
    page.get_by_role("button", name="Release").click()
    page.wait_for_selector("text=released")
    assert Lease.objects.get().released_at is not None
    assert not page.console_errors, page.console_errors


def test_the_recovery_page_says_when_its_checkpoint_is_about_to_be_deleted_or_leased(ds_run, client):
    from actions import leases, services
    from audit.actor import Actor

    operator = Actor.command(label="tests")
    client.force_login(Run.objects.model._meta.apps.get_model("auth", "User").objects.get(username="olga"))
    page = client.get(f"/recovery/{ds_run.pk}/").content.decode()
    assert "No deletion of it is scheduled." in page
    top = Checkpoint.objects.get(run=ds_run, step=200)
    job = services.schedule_deletion(checkpoint=top, reason="tidy", actor=operator)
    leases.take(checkpoint=top, owner="eval-9", purpose="evaluating", ttl_seconds=600, actor=operator)
    page = client.get(f"/recovery/{ds_run.pk}/").content.decode()
    assert f"deletion {job.pk}</a>" in page and "About to be deleted" in page
    assert "Leased</span> by eval-9" in page
