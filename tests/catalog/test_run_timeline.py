"""The run page's timeline: one row per checkpoint along the step axis, with its state, copies, tiers,
importance and protection, the copies under their locations, and a fixed number of queries."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from actions import services
from actions.models import DeletionJob, DeletionState, Hold
from audit.actor import Actor
from catalog.choices import CopyState, Importance, Verification
from catalog.models import Checkpoint
from tests.conftest import queries_for
from tests.helpers.placement import bucket, checkpoint, copy, host_location, make_run

pytestmark = pytest.mark.django_db

ACTOR = Actor.command(label="tests")


def timeline_of(html: str) -> str:
    """The timeline section of a run page."""
    start = html.index('id="timeline"')
    return html[start : html.index("</section>", start)]


def row_of(html: str, ck: Checkpoint) -> str:
    """One checkpoint's rows (its tbody) in the timeline."""
    start = html.index(f'id="checkpoint-{ck.pk}"')
    return html[start : html.index("</tbody>", start)]


def test_each_checkpoint_is_one_row_newest_first_linking_to_its_page(signed_in):
    run = make_run()
    nvme = host_location("gpu-a01")
    cks = [checkpoint(run, step) for step in (100, 200, 300)]
    for ck in cks:
        copy(ck, nvme)
    html = signed_in.get(f"/runs/{run.pk}/").content.decode()
    timeline = timeline_of(html)
    assert timeline.index("Step 300") < timeline.index("Step 200") < timeline.index("Step 100")
    for ck in cks:
        # Rendered once: one row, one link to the checkpoint in the timeline, one id in the page.
        assert timeline.count(f'href="/checkpoints/{ck.pk}/"') == 1
        assert html.count(f'id="checkpoint-{ck.pk}"') == 1
    # The placement matrix is the same rows, not a second table of the same checkpoints.
    assert "placement-matrix" not in html
    assert html.count("Step 200") == 1


def test_a_row_shows_state_verified_copies_domains_tiers_and_each_copy_under_its_location(signed_in):
    run = make_run()
    nvme, eu = host_location("gpu-a01"), bucket("ckpt-eu", "eu-west")
    ck = checkpoint(run, 700, Importance.CRITICAL)
    copy(ck, nvme)
    copy(ck, eu, verification=Verification.UNVERIFIED, classes={"GLACIER": "archive"})
    broken = checkpoint(run, 800)
    bad = copy(broken, nvme, state=CopyState.CORRUPT, verification=Verification.MISMATCH)
    bad.reasons = ["rank 3 shard is 0 B but the manifest says 1.0 GiB"]
    bad.verification_reasons = ["__1_0.distcp: sha256 differs from the copy at s3://ckpt-eu"]
    bad.save(update_fields=["reasons", "verification_reasons"])
    half = checkpoint(run, 750)
    copy(half, nvme, state=CopyState.PARTIAL, verification=Verification.UNVERIFIED)

    html = signed_in.get(f"/runs/{run.pk}/").content.decode()
    row = row_of(html, ck)
    assert "Critical" in row
    assert "2 copies" in row
    assert "1 verified copy in 1 failure domain" in row and "host gpu-a01" in row
    assert "NVMe" in row and "GLACIER" in row  # the tiers its bytes are on, hottest first
    assert row.index("NVMe") < row.index("GLACIER")
    assert row.count('class="timeline__copy"') == 2  # one under each location's column
    assert "Newest restorable" in row  # step 800 is corrupt and 750 partial
    corrupt = row_of(html, broken)
    assert "Corrupt" in corrupt and "Checksums disagree" in corrupt and "no verified copy" in corrupt
    assert "rank 3 shard is 0 B but the manifest says 1.0 GiB" in corrupt
    assert "Checksums disagree: __1_0.distcp: sha256 differs from the copy at s3://ckpt-eu" in corrupt
    assert "timeline__mark--corrupt" in corrupt
    assert "Partial" in row_of(html, half) and "timeline__mark--partial" in row_of(html, half)
    # The column heads are the locations with their tier and failure domain, linking to the location's page.
    timeline = timeline_of(html)
    assert f'href="/fleet/locations/{nvme.pk}/"' in timeline
    assert "s3://ckpt-eu" in timeline and "region eu-west" in timeline


def test_the_newest_complete_checkpoint_is_marked(signed_in):
    run = make_run()
    nvme = host_location("gpu-a01")
    good = checkpoint(run, 100)
    copy(good, nvme)
    newer = checkpoint(run, 200)
    copy(newer, nvme, state=CopyState.PARTIAL)
    html = signed_in.get(f"/runs/{run.pk}/").content.decode()
    assert "Newest restorable" in row_of(html, good)
    assert "is-newest" in row_of(html, good) and "is-newest" not in row_of(html, newer)
    assert "Newest restorable" not in row_of(html, newer)


def test_pinned_held_and_scheduled_checkpoints_carry_badges(signed_in):
    run = make_run()
    nvme, eu = host_location("gpu-a01"), bucket("ckpt-eu")
    pinned, held, going, plain = (checkpoint(run, s) for s in (100, 200, 300, 400))
    for ck in (pinned, held, going, plain):
        copy(ck, nvme)
        copy(ck, eu)
    services.pin(checkpoint=pinned, reason="baseline", actor=ACTOR)
    services.hold(run=run, checkpoint=held, reason="litigation", case_ref="LEGAL-7", actor=ACTOR)
    job = DeletionJob.objects.create(
        checkpoint=going,
        state=DeletionState.SCHEDULED,
        reason="superseded",
        requested_label="tests",
        requested_at=timezone.now(),
        execute_after=timezone.now() + timedelta(days=7),
    )
    html = signed_in.get(f"/runs/{run.pk}/").content.decode()
    assert "Pinned" in row_of(html, pinned) and "Held" not in row_of(html, pinned)
    assert "Held (LEGAL-7)" in row_of(html, held)
    assert f'href="/actions/deletions/{job.pk}/"' in row_of(html, going)
    assert f"Deletion {job.pk} scheduled" in row_of(html, going)
    for badge in ("Pinned", "Held (", "scheduled"):
        assert badge not in row_of(html, plain)


def test_a_hold_on_the_whole_run_marks_every_checkpoint_held(signed_in):
    run = make_run()
    nvme = host_location("gpu-a01")
    cks = [checkpoint(run, s) for s in (1, 2)]
    for ck in cks:
        copy(ck, nvme)
    Hold.objects.create(run=run, reason="audit", case_ref="RUN-HOLD", placed_label="x", placed_at=timezone.now())
    html = signed_in.get(f"/runs/{run.pk}/").content.decode()
    assert all("Held (RUN-HOLD)" in row_of(html, ck) for ck in cks)


def test_marks_sit_on_the_runs_step_axis_and_a_stepless_checkpoint_has_none(signed_in):
    run = make_run()
    nvme = host_location("gpu-a01")
    low, mid, high = checkpoint(run, 1000), checkpoint(run, 1500), checkpoint(run, 3000)
    final = checkpoint(run, None, tag="final")
    for ck in (low, mid, high, final):
        copy(ck, nvme)
    html = signed_in.get(f"/runs/{run.pk}/").content.decode()
    assert "left: 0.00%" in row_of(html, low)
    assert "left: 25.00%" in row_of(html, mid)
    assert "left: 100.00%" in row_of(html, high)
    assert "saved without a step" in row_of(html, final) and "left:" not in row_of(html, final)
    assert "step 1,000 at the left, step 3,000 at the right" in html


def test_a_large_run_is_paginated_and_the_axis_spans_the_whole_run(signed_in):
    run = make_run()
    nvme = host_location("gpu-a01")
    for step in range(1, 61):
        copy(checkpoint(run, step * 10), nvme)
    first = signed_in.get(f"/runs/{run.pk}/").content.decode()
    second = signed_in.get(f"/runs/{run.pk}/?page=2").content.decode()
    assert len(re.findall(r'id="checkpoint-\d+"', first)) == 50
    assert len(re.findall(r'id="checkpoint-\d+"', second)) == 10
    assert "Step 600" in first and "Step 100<" in second
    oldest = Checkpoint.objects.get(run=run, step=10)
    assert "left: 0.00%" in row_of(second, oldest)
    assert "Page 1 of 2" in first


@pytest.mark.parametrize("page", ["", "?page=2"])
def test_the_query_count_is_the_same_for_10_and_60_checkpoints(signed_in, page):
    run = make_run()
    nvme, eu = host_location("gpu-a01"), bucket("ckpt-eu")

    def grow(steps):
        for step in steps:
            ck = checkpoint(run, step, Importance.CRITICAL if step % 3 == 0 else Importance.ROUTINE)
            copy(ck, nvme, state=CopyState.PARTIAL if step % 5 == 0 else CopyState.COMPLETE)
            copy(ck, eu, classes={"GLACIER": "archive"} if step % 2 else None)
            if step % 4 == 0:
                services.pin(checkpoint=ck, reason="keep", actor=ACTOR)
            if step % 7 == 0:
                Hold.objects.create(
                    run=run, checkpoint=ck, reason="r", case_ref=f"c{step}", placed_label="x", placed_at=timezone.now()
                )
            if step % 9 == 0:
                DeletionJob.objects.create(
                    checkpoint=ck,
                    state=DeletionState.SCHEDULED,
                    reason="r",
                    requested_label="x",
                    requested_at=timezone.now(),
                    execute_after=timezone.now() + timedelta(days=7),
                )

    grow(range(1, 11) if not page else range(1, 56))
    one = queries_for(signed_in, f"/runs/{run.pk}/{page}")
    grow(range(11, 61) if not page else range(56, 111))
    assert queries_for(signed_in, f"/runs/{run.pk}/{page}") == one
