"""The jobs page: scans, promotions and deletions in one list, filtered, with live progress as JSON."""

from __future__ import annotations

import pytest
from django.urls import reverse
from django.utils import timezone

from actions.models import DeletionJob, DeletionState
from fleet.models import Inventory
from promotion.models import PromotionJob
from tests.conftest import queries_for
from tests.helpers.catalog import make_copy, make_location, make_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def jobs():
    nvme = make_location("gpu-a01")
    copy = make_copy(make_run("vision", "vit-huge"), 100, nvme, files=4, size=1024**3)
    now = timezone.now()
    applied = Inventory.objects.create(
        location=nvme, source="agent", status="applied", started_at=now, finished_at=now, files_count=1200,
        files_added=1000, files_changed=0, files_gone=3,
    )  # fmt: skip
    failed = Inventory.objects.create(location=nvme, source="agent", status="failed", error="line 9: NUL in a path")
    running = Inventory.objects.create(location=nvme, source="agent", status="processing", started_at=now)
    deletion = DeletionJob.objects.create(
        checkpoint=copy.checkpoint, state=DeletionState.RUNNING, reason="superseded by step 200",
        requested_label="grace", requested_at=now, execute_after=now, started_at=now, items_total=4, items_deleted=1,
        bytes_total=4 * 1024**3,
    )  # fmt: skip
    promotion = PromotionJob.objects.create(
        checkpoint=copy.checkpoint, source_copy=copy, target_location=nvme, target_tier="nvme", method="copy",
        state="copying", reason="incident INC-1", requested_label="ada", requested_at=now, bytes_total=4 * 1024**3,
        bytes_done=1024**3,
    )  # fmt: skip
    return {"applied": applied, "failed": failed, "running": running, "deletion": deletion, "promotion": promotion}


def test_every_kind_of_job_is_listed_with_state_progress_and_outcome(signed_in, jobs):
    page = signed_in.get("/jobs/").content.decode()
    assert "Host agent: gpu-a01" in page and "1,000 added, 0 changed, 3 gone" in page
    assert "line 9: NUL in a path" in page
    assert "Delete vision/vit-huge step 100 (every copy)" in page and "1 of 4 items</span>" in page
    assert "1,200 files</span>" in page and "itemss" not in page and "filess" not in page
    assert "Promote vision/vit-huge step 100 to gpu-a01" in page and "1.0 GiB of 4.0 GiB" in page
    assert f'href="{reverse("actions:deletion-detail", args=[jobs["deletion"].pk])}"' in page
    assert f'href="{reverse("promotion:job-detail", args=[jobs["promotion"].pk])}"' in page
    assert page.count("data-active") == 3  # the running scan, deletion and promotion poll for progress


def test_filters_narrow_by_kind_and_state(signed_in, jobs):
    failed = signed_in.get("/jobs/?state=failed").content.decode()
    assert "line 9: NUL in a path" in failed and "Promote" not in failed
    deletions = signed_in.get("/jobs/?kind=deletion").content.decode()
    assert "Delete vision" in deletions and "Host agent" not in deletions
    nothing = signed_in.get("/jobs/?kind=promotion&state=failed").content.decode()
    assert "No job matches these filters" in nothing
    assert signed_in.get("/jobs/?kind=<bad>&state=x").status_code == 200
    assert signed_in.get("/jobs/?kind=<bad>&state=%00").status_code == 400  # PostgreSQL holds no NUL


def test_a_scan_still_fetching_its_checksums_is_active_not_ended(signed_in, jobs):
    from dashboard.jobs import recent_jobs

    Inventory.objects.filter(pk=jobs["applied"].pk).update(checksums_total=2000, checksums_done=500)
    active = {j.key for j in recent_jobs(kind="scan", state="active")}
    ended = {j.key for j in recent_jobs(kind="scan", state="ended")}
    assert f"scan:{jobs['applied'].pk}" in active and f"scan:{jobs['applied'].pk}" not in ended
    assert "checksums: 500 of 2,000 objects" in signed_in.get("/jobs/?state=active").content.decode()
    Inventory.objects.filter(pk=jobs["applied"].pk).update(checksums_done=2000, checksums_finished_at=timezone.now())
    assert f"scan:{jobs['applied'].pk}" in {j.key for j in recent_jobs(kind="scan", state="ended")}
    assert "checksums: 2,000 of 2,000 objects" not in signed_in.get("/jobs/?state=active").content.decode()


def test_progress_json_reports_the_jobs_asked_for(signed_in, jobs):
    keys = [f"deletion:{jobs['deletion'].pk}", f"promotion:{jobs['promotion'].pk}", "scan:999999", "nonsense", "x:1"]
    data = signed_in.get("/jobs/progress.json", {"job": keys}).json()["jobs"]
    by_key = {j["key"]: j for j in data}
    assert set(by_key) == {f"deletion:{jobs['deletion'].pk}", f"promotion:{jobs['promotion'].pk}"}
    assert by_key[f"deletion:{jobs['deletion'].pk}"]["percent"] == 25
    assert by_key[f"promotion:{jobs['promotion'].pk}"]["unit"] == "bytes"


def test_an_empty_jobs_page_says_where_jobs_come_from(signed_in):
    page = signed_in.get("/jobs/").content.decode()
    assert "No job yet" in page and "Fleet" in page


def test_the_jobs_page_query_count_does_not_grow(signed_in, jobs):
    first = queries_for(signed_in, "/jobs/")
    for i in range(5):
        Inventory.objects.create(location=jobs["applied"].location, source="agent", status="failed", error=f"e{i}")
    assert queries_for(signed_in, "/jobs/") == first


def test_progress_needs_a_signed_in_person(client):
    assert client.get("/jobs/progress.json?job=scan:1").status_code in (302, 401, 403)


def test_refused_task_messages_are_listed_with_a_link_to_their_audit_events(signed_in, jobs):
    from audit.services import audit_refused_delivery

    assert "Refused task messages" not in signed_in.get("/jobs/").content.decode()
    audit_refused_delivery(task_name="actions.tasks.execute_deletion", task_id="6f1c-poison", deliveries=6)
    page = signed_in.get("/jobs/").content.decode()
    assert "Refused task messages" in page
    assert "<code>actions.tasks.execute_deletion[6f1c-poison]</code>" in page and "6 deliveries" in page
    assert 'href="/audit/?action=task.refused"' in page
