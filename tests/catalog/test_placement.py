"""Tier placement: the matrix of a run, a checkpoint's copies and failure domains, and the four flags."""

from __future__ import annotations

import random

import pytest
from django.utils import timezone

from actions.models import Hold
from catalog import recovery, selectors
from catalog.choices import CopyState, Importance, RunStatus, Verification
from catalog.models import Checkpoint, CheckpointCopy, Run
from fleet.models import StorageLocation
from spend import placement
from spend.placement import Flag
from tests.conftest import queries_for
from tests.helpers.placement import bucket, checkpoint, copy, host_location, make_run

pytestmark = pytest.mark.django_db


# --- the fleet is built by tests.helpers.placement --------------------------------------------------


def flagged_ids(flag: str, **kwargs) -> set[int]:
    return set(placement.flagged(flag, **kwargs).values_list("pk", flat=True))


# --- under-replicated critical and milestone checkpoints -------------------------------------------


def test_a_critical_checkpoint_on_two_drives_of_one_host_is_under_replicated():
    run = make_run()
    ck = checkpoint(run, 1000, Importance.CRITICAL)
    copy(ck, host_location("gpu-a01", drive="nvme0"))
    copy(ck, host_location("gpu-a01", drive="nvme1"))
    assert flagged_ids(Flag.UNDER_REPLICATED) == {ck.pk}
    copy(ck, bucket("ckpt-us"))
    assert flagged_ids(Flag.UNDER_REPLICATED) == set()


def test_only_verified_non_temporary_copies_count_towards_failure_domains():
    run = make_run()
    ck = checkpoint(run, 2000, Importance.MILESTONE)
    copy(ck, host_location("gpu-a01"))
    copy(ck, bucket("ckpt-eu", "eu-west"), verification=Verification.UNVERIFIED)
    copy(ck, bucket("ckpt-us", "us-east"), temporary=True)
    copy(ck, host_location("gpu-a02"), verification=Verification.MISMATCH, state=CopyState.CORRUPT)
    assert flagged_ids(Flag.UNDER_REPLICATED) == {ck.pk}
    assert flagged(ck) == [Flag.UNDER_REPLICATED]


def test_two_buckets_in_one_region_are_one_failure_domain_and_hosts_of_one_site_are_two():
    run = make_run()
    same_region = checkpoint(run, 1, Importance.CRITICAL)
    copy(same_region, bucket("a", "us-east"))
    copy(same_region, bucket("b", "us-east"))
    two_hosts = checkpoint(run, 2, Importance.CRITICAL)
    copy(two_hosts, host_location("gpu-a01", site="dc1"))
    copy(two_hosts, host_location("gpu-a02", site="dc1"))
    assert flagged_ids(Flag.UNDER_REPLICATED) == {same_region.pk}


def test_routine_checkpoints_and_deleted_runs_are_not_flagged_as_under_replicated():
    run = make_run()
    copy(checkpoint(run, 1, Importance.ROUTINE), host_location("gpu-a01"))
    gone = make_run("old", status=RunStatus.DELETED)
    copy(checkpoint(gone, 1, Importance.CRITICAL), host_location("gpu-a02"))
    nothing_left = checkpoint(run, 2, Importance.CRITICAL)
    c = copy(nothing_left, host_location("gpu-a03"))
    CheckpointCopy.objects.filter(pk=c.pk).update(gone_at=timezone.now())
    assert flagged_ids(Flag.UNDER_REPLICATED) == set()


# --- finished runs still on NVMe -------------------------------------------------------------------------


def test_a_finished_runs_checkpoints_on_nvme_are_flagged_after_the_configured_days(settings):
    settings.NVME_FINISHED_DAYS = 14
    run = make_run(status=RunStatus.FINISHED)
    old = checkpoint(run, 100, age_days=40)
    newest = checkpoint(run, 200, age_days=20)
    in_bucket = checkpoint(run, 50, age_days=60)
    nvme = host_location("gpu-a01")
    copy(old, nvme)
    copy(newest, nvme)
    copy(in_bucket, bucket("ckpt-eu"))
    assert flagged_ids(Flag.FINISHED_ON_NVME) == {old.pk, newest.pk}
    settings.NVME_FINISHED_DAYS = 30  # the run's newest checkpoint is 20 days old: not yet
    assert flagged_ids(Flag.FINISHED_ON_NVME) == set()


def test_an_active_run_or_a_recently_finished_one_is_not_flagged_on_nvme(settings):
    settings.NVME_FINISHED_DAYS = 14
    active = make_run("active")
    copy(checkpoint(active, 1, age_days=90), host_location("gpu-a01"))
    recent = make_run("recent", status=RunStatus.FINISHED)
    copy(checkpoint(recent, 1, age_days=90), host_location("gpu-a02"))
    copy(checkpoint(recent, 2, age_days=3), bucket("ckpt-eu"))  # it wrote 3 days ago
    assert flagged_ids(Flag.FINISHED_ON_NVME) == set()


def test_a_copy_that_left_nvme_no_longer_flags(settings):
    settings.NVME_FINISHED_DAYS = 1
    run = make_run(status=RunStatus.FINISHED)
    ck = checkpoint(run, 1, age_days=10)
    c = copy(ck, host_location("gpu-a01"))
    assert flagged_ids(Flag.FINISHED_ON_NVME) == {ck.pk}
    CheckpointCopy.objects.filter(pk=c.pk).update(gone_at=timezone.now())
    assert flagged_ids(Flag.FINISHED_ON_NVME) == set()


# --- held or critical checkpoints only in archive classes --------------------------------------------


def test_a_critical_checkpoint_only_in_glacier_is_flagged_until_a_fast_complete_copy_exists():
    run = make_run()
    ck = checkpoint(run, 1, Importance.CRITICAL)
    copy(ck, bucket("ckpt-archive"), classes={"GLACIER": "archive"})
    copy(ck, bucket("ckpt-eu", "eu-west"), state=CopyState.PARTIAL)  # a partial copy restores nothing
    assert flagged_ids(Flag.ARCHIVE_ONLY) == {ck.pk}
    copy(ck, bucket("ckpt-us"), classes={"STANDARD": "object_standard"})
    assert flagged_ids(Flag.ARCHIVE_ONLY) == set()


def test_a_copy_split_between_standard_and_deep_archive_restores_in_hours():
    run = make_run()
    ck = checkpoint(run, 1, Importance.CRITICAL)
    copy(ck, bucket("ckpt-eu"), classes={"STANDARD": "object_standard", "DEEP_ARCHIVE": "deep_archive"})
    assert flagged_ids(Flag.ARCHIVE_ONLY) == {ck.pk}


def test_a_held_routine_checkpoint_only_in_archive_is_flagged_while_the_hold_is_active():
    run = make_run(status=RunStatus.FINISHED)
    ck = checkpoint(run, 1, Importance.ROUTINE)
    copy(ck, bucket("ckpt-archive"), classes={"DEEP_ARCHIVE": "deep_archive"})
    other = checkpoint(make_run("other"), 1, Importance.ROUTINE)
    copy(other, bucket("ckpt-archive-2"), classes={"GLACIER": "archive"})
    assert flagged_ids(Flag.ARCHIVE_ONLY) == set()
    hold = Hold.objects.create(
        run=run, reason="litigation", case_ref="LEGAL-7", placed_label="lee", placed_at=timezone.now()
    )
    assert flagged_ids(Flag.ARCHIVE_ONLY) == {ck.pk}  # a hold of the whole run covers the checkpoint
    Hold.objects.filter(pk=hold.pk).update(released_at=timezone.now(), released_label="kim", release_reason="closed")
    assert flagged_ids(Flag.ARCHIVE_ONLY) == set()
    Hold.objects.create(
        run=other.run,
        checkpoint=other,
        reason="incident",
        case_ref="INC-1",
        placed_label="lee",
        placed_at=timezone.now(),
    )
    assert flagged_ids(Flag.ARCHIVE_ONLY) == {other.pk}


def test_a_copy_not_rolled_up_yet_counts_by_its_locations_tier():
    run = make_run()
    ck = checkpoint(run, 1, Importance.CRITICAL)
    archive = StorageLocation.objects.create(name="tape", kind="bucket", tier="deep_archive", region="x")
    CheckpointCopy.objects.create(
        checkpoint=ck, location=archive, path="p", format="pytorch_dcp", state=CopyState.COMPLETE, file_count=1, bytes=1
    )
    assert flagged_ids(Flag.ARCHIVE_ONLY) == {ck.pk}


# --- the newest restorable checkpoint on one host --------------------------------------------------------


def test_the_newest_restorable_checkpoint_on_one_host_is_flagged_until_it_leaves_the_host():
    run = make_run()
    older = checkpoint(run, 100)
    copy(older, bucket("ckpt-eu"))
    newest = checkpoint(run, 200)
    copy(newest, host_location("gpu-a01", drive="nvme0"))
    copy(newest, host_location("gpu-a01", drive="nvme1"))
    assert flagged_ids(Flag.NEWEST_ON_ONE_HOST) == {newest.pk}
    copy(newest, host_location("gpu-b01"), state=CopyState.PARTIAL)  # a partial copy elsewhere does not help
    assert flagged_ids(Flag.NEWEST_ON_ONE_HOST) == {newest.pk}
    copy(newest, host_location("gpu-b02"))
    assert flagged_ids(Flag.NEWEST_ON_ONE_HOST) == set()


def test_a_verified_older_checkpoint_is_the_newest_restorable_one():
    run = make_run()
    verified = checkpoint(run, 100)
    copy(verified, host_location("gpu-a01"))
    unverified = checkpoint(run, 200)
    copy(unverified, bucket("ckpt-eu"), verification=Verification.UNVERIFIED)
    assert flagged_ids(Flag.NEWEST_ON_ONE_HOST) == {verified.pk}


@pytest.mark.parametrize("seed", range(6))
def test_the_newest_restorable_checkpoint_is_the_one_recovery_picks(seed):
    rng = random.Random(seed)
    locations = [host_location(f"gpu-{i}") for i in range(3)] + [bucket("ckpt-eu")]
    runs = [make_run(f"run-{i}") for i in range(5)]
    for run in runs:
        steps = rng.sample(range(0, 50), rng.randint(1, 6))
        tags = rng.sample(["final", "last.ckpt", "release"], rng.randint(0, 2))
        for key in [*steps, *tags]:
            ck = checkpoint(run, key if isinstance(key, int) else None, tag=key if isinstance(key, str) else "")
            for loc in rng.sample(locations, rng.randint(1, 3)):
                copy(
                    ck,
                    loc,
                    state=rng.choice([CopyState.COMPLETE, CopyState.COMPLETE, CopyState.PARTIAL]),
                    verification=rng.choice(
                        [Verification.VERIFIED, Verification.UNVERIFIED, Verification.DISPUTED, Verification.MISMATCH]
                    ),
                    temporary=rng.random() < 0.1,
                )
    expected = {run_id: ck_id for run_id, (ck_id, _) in recovery.newest_restorable_ids(r.pk for r in runs).items()}
    for run in runs:  # the one-run form agrees with the batch
        one = recovery.newest_restorable(run)[0]
        assert (one.pk if one else None) == expected.get(run.pk)
    got = dict(
        Run.objects.filter(pk__in=[r.pk for r in runs])
        .annotate(newest=placement.newest_restorable_subquery())
        .filter(newest__isnull=False)
        .values_list("pk", "newest")
    )
    assert got == expected


# --- the matrix, counts and paging -------------------------------------------------------------------


def test_the_matrix_puts_each_copy_under_its_location_hottest_tier_first():
    run = make_run()
    eu, nvme = bucket("ckpt-eu", "eu-west"), host_location("gpu-a01")
    a, b = checkpoint(run, 2), checkpoint(run, 1)
    copy(a, nvme)
    copy(a, eu, verification=Verification.UNVERIFIED, classes={"STANDARD": "object_standard", "GLACIER": "archive"})
    copy(b, eu)
    columns = placement.run_columns(run.pk)
    assert [c.location.pk for c in columns] == [nvme.pk, eu.pk]
    rows = placement.matrix_rows(list(selectors.run_checkpoints(run)), columns, run_id=run.pk)
    assert [r.checkpoint.pk for r in rows] == [a.pk, b.pk]
    first, second = rows
    assert [[p.copy.location_id for p in cell] for cell in first.cells] == [[nvme.pk], [eu.pk]]
    assert second.cells[0] == []
    assert first.cells[1][0].tier_summary == "STANDARD, GLACIER"
    assert first.cells[1][0].archived
    assert first.domains == ["host gpu-a01"]
    assert second.domains == ["region eu-west"]


def test_counts_and_flags_of_a_page_agree_with_the_flagged_querysets(settings):
    settings.NVME_FINISHED_DAYS = 7
    run = make_run(status=RunStatus.FINISHED)
    nvme = host_location("gpu-a01")
    cks = [checkpoint(run, s, Importance.CRITICAL if s % 2 else Importance.ROUTINE, age_days=30) for s in range(6)]
    for ck in cks:
        copy(ck, nvme)
    summaries, by_checkpoint = placement.run_flags(run.pk, shown=2)
    counts = {s.flag: s.count for s in summaries}
    assert counts == placement.flag_counts(run_id=run.pk)
    assert counts[Flag.FINISHED_ON_NVME] == 6
    assert counts[Flag.UNDER_REPLICATED] == 3
    assert counts[Flag.NEWEST_ON_ONE_HOST] == 1
    nvme_summary = next(s for s in summaries if s.flag == Flag.FINISHED_ON_NVME)
    assert [c.step for c in nvme_summary.shown] == [5, 4] and nvme_summary.more == 4
    assert dict(by_checkpoint) == {k: v for k, v in placement.flags_of([c.pk for c in cks], run_id=run.pk).items() if v}


def test_the_api_pages_a_runs_placement_by_keyset_and_visits_each_checkpoint_once(signed_in):
    run = make_run()
    loc = host_location("gpu-a01")
    for step in [5, 3, 9, 1]:
        copy(checkpoint(run, step), loc)
    copy(checkpoint(run, None, tag="final"), loc)
    copy(checkpoint(run, None, tag="last.ckpt"), loc)
    seen, url = [], f"/api/v1/runs/{run.pk}/placement/?limit=2"
    while url:
        body = signed_in.get(url).json()
        assert [c["location"] for c in body["columns"]] == [loc.name]
        seen += [r["step"] if r["step"] is not None else r["tag"] for r in body["rows"]]
        url = body["next"]
    assert seen == [9, 5, 3, 1, "final", "last.ckpt"]
    row = signed_in.get(f"/api/v1/runs/{run.pk}/placement/?limit=1").json()["rows"][0]
    assert row["copies"][0]["host"] == "gpu-a01" and row["copies"][0]["site"] == "dc1"
    assert row["copies"][0]["tiers"] == [{"tier": "nvme", "storage_class": "", "bytes": 4096, "files": 1}]
    assert row["flags"] == [Flag.NEWEST_ON_ONE_HOST]


@pytest.mark.parametrize("query", ["after=x", "after=-3", "limit=0", "limit=201", "limit=ten"])
def test_a_bad_cursor_or_limit_is_refused_plainly(signed_in, query):
    run = make_run()
    response = signed_in.get(f"/api/v1/runs/{run.pk}/placement/?{query}")
    assert response.status_code == 400
    assert set(response.json()) >= {"error", "detail"}


def test_the_checkpoint_placement_api_and_the_flagged_list(signed_in):
    run = make_run()
    ck = checkpoint(run, 1, Importance.CRITICAL)
    copy(ck, host_location("gpu-a01"))
    body = signed_in.get(f"/api/v1/checkpoints/{ck.pk}/placement/").json()
    assert body["verified_copies"] == 1 and body["failure_domains"] == ["host gpu-a01"]
    assert {f["flag"] for f in body["flags"]} == {Flag.UNDER_REPLICATED, Flag.NEWEST_ON_ONE_HOST}
    counts = {f["flag"]: f["count"] for f in signed_in.get("/api/v1/checkpoints/flagged/").json()}
    assert counts == {
        Flag.UNDER_REPLICATED: 1,
        Flag.FINISHED_ON_NVME: 0,
        Flag.ARCHIVE_ONLY: 0,
        Flag.NEWEST_ON_ONE_HOST: 1,
        Flag.VERIFICATION_STALE: 0,
    }
    listed = signed_in.get("/api/v1/checkpoints/flagged/?flag=under_replicated").json()["results"]
    assert listed == [
        {
            "id": ck.pk,
            "run_id": run.pk,
            "run": "llm/llama-70b",
            "step": 1,
            "tag": "",
            "importance": "critical",
            "flag": "under_replicated",
            "why": "1 verified copy, all in host gpu-a01",
        }
    ]
    assert signed_in.get("/api/v1/checkpoints/flagged/?flag=nope").status_code == 400


# --- pages ------------------------------------------------------------------------------------------------


def test_the_run_page_shows_the_matrix_and_explains_its_flags(signed_in):
    run = make_run()
    ck = checkpoint(run, 700, Importance.CRITICAL)
    copy(ck, host_location("gpu-a01"))
    copy(ck, bucket("ckpt-eu", "eu-west"), verification=Verification.UNVERIFIED, classes={"GLACIER": "archive"})
    html = signed_in.get(f"/runs/{run.pk}/").content.decode()
    assert "Placement" in html
    assert "s3://ckpt-eu" in html and "region eu-west" in html
    assert "GLACIER" in html
    assert "Too few verified copies in distinct failure domains: 1 checkpoint" in html
    assert "One failure could take every good copy with it" in html
    # Its complete (if unverified) bucket copy is off the host: the newest checkpoint is not on one host only.
    assert "Newest restorable checkpoint on one host only" not in html


def test_a_run_without_flags_says_so(signed_in):
    run = make_run()
    ck = checkpoint(run, 1)
    copy(ck, host_location("gpu-a01"))
    copy(ck, bucket("ckpt-eu"))
    html = signed_in.get(f"/runs/{run.pk}/").content.decode()
    assert "No placement flag" in html


def test_the_checkpoint_page_shows_host_site_region_and_domain_of_each_copy(signed_in):
    run = make_run()
    ck = checkpoint(run, 1, Importance.MILESTONE)
    copy(ck, host_location("gpu-a01", site="dc7", region="ap-south"))
    copy(ck, bucket("ckpt-deep", "us-east"), classes={"DEEP_ARCHIVE": "deep_archive"})
    html = signed_in.get(f"/checkpoints/{ck.pk}/").content.decode()
    assert "dc7" in html and "ap-south" in html and "host gpu-a01" in html and "region us-east" in html
    assert "Deep archive (restore in hours) (DEEP_ARCHIVE)" in html
    assert "restore takes hours" in html
    assert "2 verified copies in 2 failure domains" in html
    assert "Placement: " not in html  # two verified copies in two domains, one of them off the host: no flag
    frozen = checkpoint(run, 2, Importance.CRITICAL)
    copy(frozen, bucket("ckpt-glacier"), classes={"GLACIER": "archive"})
    html = signed_in.get(f"/checkpoints/{frozen.pk}/").content.decode()
    assert "Placement: 2 flags" in html
    assert "Held or critical, only in archive classes." in html and "getting it back takes hours" in html


def test_the_placement_page_counts_each_flag_and_lists_the_checkpoints_with_why(signed_in, settings):
    settings.NVME_FINISHED_DAYS = 14
    run = make_run(status=RunStatus.FINISHED)
    nvme = host_location("gpu-a01")
    for step in range(8):
        copy(checkpoint(run, step, age_days=30), nvme)
    html = signed_in.get("/placement/").content.decode()
    assert 'href="/placement/"' in html  # the nav
    assert "Finished run still on NVMe" in html and "8 checkpoints" in html
    assert "more than 14 days ago" in html
    assert "on NVMe at gpu-a01:/mnt/nvme0" in html
    assert "See all 8 checkpoints" in html
    page = signed_in.get("/placement/?flag=finished_on_nvme").content.decode()
    assert page.count("on NVMe at gpu-a01:/mnt/nvme0") == 8
    assert f'href="/runs/{run.pk}/"' in page
    scoped = signed_in.get(f"/placement/?flag=finished_on_nvme&run={run.pk}").content.decode()
    assert "llm/llama-70b" in scoped
    assert signed_in.get("/placement/?run=424242").status_code == 404
    assert signed_in.get("/placement/?flag=bogus").status_code == 200


def test_empty_database_pages_answer_with_an_empty_state(signed_in):
    html = signed_in.get("/placement/").content.decode()
    assert "No placement flag" in html and "host agent or a bucket scan" in html
    html = signed_in.get("/placement/?flag=archive_only").content.decode()
    assert "Nothing is flagged" in html
    assert all(f["count"] == 0 for f in signed_in.get("/api/v1/checkpoints/flagged/").json())
    run = make_run()
    body = signed_in.get(f"/api/v1/runs/{run.pk}/placement/").json()
    assert body["rows"] == [] and body["columns"] == [] and body["next"] is None


# --- queries do not grow with the data --------------------------------------------------------------------


def _grow(run: Run, steps: range, locations: list[StorageLocation]) -> None:
    for step in steps:
        ck = checkpoint(run, step, Importance.CRITICAL if step % 3 == 0 else Importance.ROUTINE, age_days=30)
        for i, loc in enumerate(locations):
            copy(ck, loc, classes={"GLACIER": "archive"} if loc.kind == "bucket" and step % 2 else None)
            if i == 0 and step % 4 == 0:
                Hold.objects.create(
                    run=run, checkpoint=ck, reason="r", case_ref="c", placed_label="x", placed_at=timezone.now()
                )


@pytest.mark.parametrize(
    "url",
    [
        "/runs/{run}/",
        "/runs/{run}/?page=2",
        "/checkpoints/{checkpoint}/",
        "/placement/",
        "/placement/?flag=finished_on_nvme",
        "/placement/?flag=archive_only&run={run}",
        "/api/v1/runs/{run}/placement/",
        "/api/v1/checkpoints/{checkpoint}/placement/",
        "/api/v1/checkpoints/flagged/",
        "/api/v1/checkpoints/flagged/?flag=under_replicated",
    ],
)
def test_placement_queries_do_not_grow_with_checkpoints_copies_or_flags(signed_in, settings, url):
    settings.NVME_FINISHED_DAYS = 7
    run = make_run(status=RunStatus.FINISHED)
    locations = [host_location("gpu-a01"), bucket("ckpt-eu", "eu-west")]
    _grow(run, range(0, 3), locations)
    first = Checkpoint.objects.filter(run=run).order_by("step").first()
    target = url.format(run=run.pk, checkpoint=first.pk)
    # The run page's second page exists only once the run has grown; compare like with like.
    if "page=2" in target:
        _grow(run, range(3, 60), locations)
        one = queries_for(signed_in, target)
        _grow(run, range(60, 130), [*locations, host_location("gpu-b01")])
    else:
        one = queries_for(signed_in, target)
        _grow(run, range(3, 80), [*locations, host_location("gpu-b01")])
        other = make_run("other", status=RunStatus.FINISHED)
        _grow(other, range(0, 20), locations)
    assert queries_for(signed_in, target) == one


def flagged(ck: Checkpoint) -> list[str]:
    return placement.flags_of([ck.pk], run_id=ck.run_id)[ck.pk]


def test_a_newer_disputed_checkpoint_is_not_the_newest_restorable_one_on_one_host():
    run = make_run()
    host = host_location("gpu-a01")
    older, newer = checkpoint(run, 1), checkpoint(run, 2)
    copy(older, host)
    copy(newer, host, verification=Verification.DISPUTED)
    copy(newer, host_location("gpu-b01"), verification=Verification.DISPUTED)
    assert placement.newest_restorable_ids(run.pk) == [older.pk]
    assert list(placement.flagged(Flag.NEWEST_ON_ONE_HOST).values_list("pk", flat=True)) == [older.pk]
