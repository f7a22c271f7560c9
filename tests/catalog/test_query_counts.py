"""A constant number of queries (issue 17): the fleet's recovery points, a run's recovery page and API, the resume
answer and the ladder make as many queries for a fleet with more runs, checkpoints and copies as for a small one.
bench/spend_bench.py measures their time on 10,000,000 shard files (docs/benchmarks.md)."""

from __future__ import annotations

import pytest
from django.utils import timezone

from access.roles import Role
from catalog.models import Run
from catalog.pointers import METADATA_BATCH, pointers_for_run
from catalog.recovery_point import recovery_point_of, recovery_points_of
from tests.catalog.test_recovery_point import fresh
from tests.conftest import queries_for

pytestmark = pytest.mark.django_db


def inventory(runs: dict[str, int]) -> list[dict]:
    """``runs``: run name -> checkpoints, saved an hour apart, the newest 30 hours ago (over the 24 h objective)."""
    files: list[dict] = []
    for name, count in runs.items():
        for i in range(1, count + 1):
            files += fresh(i * 100, name, age_h=30 + count - i)
    return files


@pytest.fixture
def gpu(make_host):
    return make_host()


def test_the_recovery_points_list_makes_as_many_queries_for_many_runs_as_for_one(gpu, push, signed_in_as):
    viewer = signed_in_as(Role.VIEWER)
    push(gpu, inventory({"run-a": 2}))
    page, api = queries_for(viewer, "/recovery/points/"), queries_for(viewer, "/api/v1/recovery/points/")
    push(gpu, inventory({"run-a": 2, "run-b": 3, "run-c": 5, "run-d": 8}))
    assert queries_for(viewer, "/recovery/points/") == page
    assert queries_for(viewer, "/api/v1/recovery/points/") == api
    listed = [p["name"] for p in viewer.get("/api/v1/recovery/points/").json()["results"]]
    assert sorted(listed) == ["run-a", "run-b", "run-c", "run-d"]


def test_the_fleet_list_agrees_with_each_runs_own_recovery_point(gpu, push):
    files = inventory({"run-a": 2, "run-b": 3})
    files += fresh(900, "run-b", missing=1, age_h=1)  # a newer partial checkpoint: lost steps, not restorable
    push(gpu, files)
    Run.objects.filter(name="run-a").update(operator_gpus=16)
    now = timezone.now()
    runs = Run.objects.order_by("pk")
    bulk = recovery_points_of(runs, now=now)
    single = [recovery_point_of(r, now=now) for r in runs.select_related("team")]
    fields = ("checkpoint", "verified", "saved_at", "hours", "highest_step", "lost_steps", "lost_hours", "gpus")

    def facts(points):
        return [(*(getattr(p, f) for f in fields), p.gpus_source) for p in points]

    assert facts(bulk) == facts(single)
    assert [p.gpus_source for p in bulk] == ["operator", "world size"]
    assert bulk[1].lost_steps == 600


@pytest.mark.parametrize(
    "url",
    ["/recovery/{pk}/", "/api/v1/recovery/{pk}/", "/api/v1/runs/{pk}/resume/", "/api/v1/runs/{pk}/ladder/"],
)
def test_a_runs_recovery_answers_make_as_many_queries_for_many_checkpoints_as_for_two(gpu, push, signed_in_as, url):
    viewer = signed_in_as(Role.VIEWER)
    push(gpu, inventory({"run-a": 2}))
    run = Run.objects.get(name="run-a")
    few = queries_for(viewer, url.format(pk=run.pk))
    push(gpu, inventory({"run-a": METADATA_BATCH + 6}))
    assert queries_for(viewer, url.format(pk=run.pk)) == few


def test_torchtitans_rule_still_skips_the_newest_folders_without_a_metadata(gpu, push):
    """More than a batch of the newest step-N folders lack a .metadata: the pointer resolves to the newest that has
    one, as torchtitan would load."""
    files = inventory({"run-a": METADATA_BATCH + 6})
    newest = {f"llm/run-a/step-{i * 100}/.metadata" for i in range(7, METADATA_BATCH + 7)}
    push(gpu, [f for f in files if f["path"] not in newest])
    [pointer] = pointers_for_run(Run.objects.get(name="run-a"))
    assert pointer.content == "step-600"
    assert pointer.target is not None and pointer.target.checkpoint.step == 600
