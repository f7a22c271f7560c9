"""The overview: bytes and spend by tier, what needs attention with links to its queue, scans and recent actions."""

from __future__ import annotations

import pytest
from django.db import transaction
from django.utils import timezone

from audit.services import audit_record
from catalog.choices import CopyState, Verification
from catalog.models import Run
from fleet.models import Inventory
from fleet.pricebook import utc_today
from spend.usage import usage_refresh
from tests.conftest import queries_for
from tests.helpers.catalog import make_copy, make_location, make_run

pytestmark = pytest.mark.django_db


def a_fleet(runs: int = 1):
    nvme = make_location("gpu-a01")
    for i in range(runs):
        run = make_run("vision", f"vit-{i}")
        make_copy(run, 100, nvme, files=3, size=1024**3)
        make_copy(run, 200, nvme, state=CopyState.PARTIAL, reasons=["rank 3 of 4 is missing: __3_0.distcp"])
        mismatch = make_copy(
            run, 300, nvme, state=CopyState.CORRUPT, reasons=["model-00002 is shorter than its header"]
        )
        mismatch.verification = Verification.MISMATCH
        mismatch.save()
    nvme.last_applied_at = timezone.now()
    nvme.save()
    usage_refresh(location=nvme, day=utc_today())
    return nvme


def test_an_empty_fleet_shows_how_to_start(signed_in):
    page = signed_in.get("/").content.decode()
    assert "No checkpoints reported yet" in page and "make demo" in page


def test_the_overview_shows_bytes_by_tier_and_the_queues_with_counts(signed_in):
    a_fleet()
    page = signed_in.get("/").content.decode()
    assert "Bytes and spend by tier this month" in page and "GiB" in page
    assert "Partial copies</strong></a>:\n      1 copy" in page
    assert "Corrupt copies</strong></a>:\n      1 copy" in page
    assert "Complete but unverified copies</strong></a>:\n      1 copy" in page
    # The corrupt copy whose checksums disagree too is one copy of one queue, not one of two.
    assert "Copies whose checksums disagree" not in page
    assert 'href="/problems/?kind=partial"' in page
    assert 'href="/problems/?kind=under_replicated"' in page
    assert "Scan freshness" in page and "gpu-a01" in page


def test_a_failed_scan_is_counted_and_its_error_shown(signed_in):
    nvme = a_fleet()
    Inventory.objects.create(location=nvme, source="agent", status="failed", error="line 7: path escapes the root")
    page = signed_in.get("/").content.decode()
    assert "Locations whose last scan failed</strong></a>:\n      1 location" in page
    assert "line 7: path escapes the root" in page


def test_recent_actions_link_to_the_audit_trail(signed_in):
    with transaction.atomic():
        audit_record(
            actor_kind="user", actor_label="grace", source="ui", action="hold.place", target_type="checkpoint",
            target_label="vision/vit-0 step 100", case_ref="LEGAL-7", reason="litigation",
        )  # fmt: skip
    page = signed_in.get("/").content.decode()
    assert "grace" in page and "hold.place" in page and "case LEGAL-7" in page and 'href="/audit/"' in page


def test_the_copy_queue_lists_the_copies_with_their_reasons_and_links(signed_in):
    a_fleet()
    page = signed_in.get("/queue/copies/?kind=partial").content.decode()
    assert "rank 3 of 4 is missing" in page and 'href="/runs/' in page and 'href="/checkpoints/' in page
    assert "3.0 GiB" in signed_in.get("/queue/copies/?kind=unverified").content.decode()
    # An unknown queue falls back to the first one rather than failing.
    assert signed_in.get("/queue/copies/?kind=<script>").status_code == 200
    empty = make_run("speech", "whisper")
    assert empty and "Nothing in this queue" in signed_in.get("/queue/copies/?kind=mismatch&after=1").content.decode()


def test_the_queue_pages_with_a_keyset(signed_in, monkeypatch):
    from dashboard import views_overview

    monkeypatch.setattr(views_overview, "QUEUE_PAGE", 2)
    a_fleet(runs=3)
    first = signed_in.get("/queue/copies/?kind=partial")
    after = first.context["next_after"]
    assert len(first.context["copies"]) == 2 and after
    second = signed_in.get(f"/queue/copies/?kind=partial&after={after}")
    assert len(second.context["copies"]) == 1 and second.context["next_after"] is None
    seen = {c.pk for c in first.context["copies"]} | {c.pk for c in second.context["copies"]}
    assert len(seen) == 3


def test_the_overview_query_count_does_not_grow_with_the_fleet(signed_in):
    a_fleet(runs=1)
    small = queries_for(signed_in, "/")
    more = make_location("gpu-b02")
    for i in range(8):
        make_copy(make_run("speech", f"whisper-{i}"), 10, more)
    usage_refresh(location=more, day=utc_today())
    assert queries_for(signed_in, "/") == small
    assert queries_for(signed_in, "/queue/copies/?kind=partial") == queries_for(
        signed_in, "/queue/copies/?kind=unverified"
    )


def test_the_api_gives_the_overview_recovery_and_jobs(signed_in):
    a_fleet()
    overview = signed_in.get("/api/v1/overview/").json()
    by_key = {a["key"]: a for a in overview["attention"]}
    assert by_key["partial"]["count"] == 1 and by_key["corrupt"]["count"] == 1 and by_key["unverified"]["count"] == 1
    assert overview["stored_bytes"] > 0 and overview["currency"]
    run = Run.objects.get(name="vit-0")
    recovery = signed_in.get(f"/api/v1/recovery/{run.pk}/").json()
    assert recovery["label"] == "step 100" and recovery["verified"] is False
    assert recovery["copies"][0]["commands"][0].startswith("rsync -a")
    assert signed_in.get("/api/v1/recovery/999999/").status_code == 404
    assert signed_in.get("/api/v1/jobs/?kind=scan").json() == {"jobs": []}
    bad = signed_in.get("/api/v1/jobs/?kind=tape")
    assert bad.status_code == 400 and "kind" in bad.json()["fields"]


def test_the_schema_documents_the_dashboard_endpoints(signed_in):
    schema = signed_in.get("/api/v1/schema/?format=json").json()
    assert {"/api/v1/overview/", "/api/v1/recovery/{id}/", "/api/v1/jobs/"} <= set(schema["paths"])


def test_deletions_that_ended_blocked_recently_need_attention(signed_in):
    from datetime import timedelta

    from actions.models import DeletionJob, DeletionState
    from catalog.models import Checkpoint

    a_fleet()
    checkpoint = Checkpoint.objects.get(run__name="vit-0", step=100)
    now = timezone.now()

    def ended(state, days_ago):
        at = now - timedelta(days=days_ago)
        DeletionJob.objects.create(
            checkpoint=checkpoint,
            state=state,
            reason="tidy up",
            requested_label="ops",
            requested_at=at - timedelta(days=8),
            execute_after=at,
            started_at=at,
            finished_at=at,
        )

    ended(DeletionState.BLOCKED, 1)  # the store refused objects: counted
    ended(DeletionState.COMPLETED, 1)  # fine: not counted
    ended(DeletionState.FAILED, 30)  # long ago: not counted
    page = signed_in.get("/").content.decode()
    assert "Deletions and promotions that failed or were blocked (last 7 days)</strong></a>:\n      1 job" in page
    assert 'href="/jobs/?state=failed"' in page
    by_key = {a["key"]: a for a in signed_in.get("/api/v1/overview/").json()["attention"]}
    assert by_key["jobs_ended_badly"]["count"] == 1
